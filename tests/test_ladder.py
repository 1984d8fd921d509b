"""Family ladders: a generated class inherits only methods whose code is identical."""

from __future__ import annotations

from pathlib import Path

from compiler.emit import BLACK_MODE
from compiler.ladder import Parent, choose_ladder_parent

ROLE_METHOD = '''
    def render_user(self, out, message):
        """The template's user branch of the message loop (lines {a}-{b})."""
        # L{a}: {{% if %}}
        if message["content"]:
            out.append("<user>")
            out.append(str(message["content"]))
            out.append("</user>")
        else:
            out.append("<user/>")
        out.append("\\n")
        out.append("")
        out.append("")
        out.append("")
        out.append("")
        out.append("")
'''

MODULE = '''"""{name} renderer."""

from rllm_renderers.core.base import GeneratedRenderer

BOS_TOKEN = "{bos}"


class {cls}(GeneratedRenderer):
    r"""Renders {name}.
    """

    MODEL_IDS = ("{name}",)

    def render_template(self, out, messages, tools, documents, add_generation_prompt):
        """The chat template."""
        out.append("{marker}")
{method}'''


def module(name: str, cls: str, *, bos: str = "<s>", marker: str = "x", lines: tuple[int, int] = (3, 9)) -> str:
    method = ROLE_METHOD.format(a=lines[0], b=lines[1])
    return MODULE.format(name=name, cls=cls, bos=bos, marker=marker, method=method)


def test_identical_methods_are_inherited_from_an_earlier_root_class(tmp_path: Path):
    (tmp_path / "fam_1.py").write_text(module("fam_1", "Fam1Renderer"), encoding="utf-8")
    # same role method at other template lines, different render_template
    parent = choose_ladder_parent("fam_2", module("fam_2", "Fam2Renderer", marker="y", lines=(5, 11)), tmp_path)
    assert parent == Parent("fam_1", "Fam1Renderer", ("render_user",))


def test_no_ladder_when_constants_differ_or_the_parent_sorts_later(tmp_path: Path):
    (tmp_path / "fam_1.py").write_text(module("fam_1", "Fam1Renderer", bos="<bos>"), encoding="utf-8")
    assert choose_ladder_parent("fam_2", module("fam_2", "Fam2Renderer"), tmp_path) is None  # BOS_TOKEN differs
    (tmp_path / "fam_3.py").write_text(module("fam_3", "Fam3Renderer"), encoding="utf-8")
    assert choose_ladder_parent("fam_0", module("fam_0", "Fam0Renderer"), tmp_path) is None  # must sort earlier


def test_only_the_output_folder_is_consulted(tmp_path: Path):
    (tmp_path / "fam_1.py").write_text(module("fam_1", "Fam1Renderer"), encoding="utf-8")
    assert choose_ladder_parent("fam_2", module("fam_2", "Fam2Renderer"), tmp_path / "empty") is None
    assert choose_ladder_parent("fam_2", module("fam_2", "Fam2Renderer"), None) is None


def test_black_mode_is_the_repository_configuration():
    import tomllib

    settings = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["tool"]["black"]
    assert BLACK_MODE.line_length == settings["line-length"]
    assert {version.name.lower() for version in BLACK_MODE.target_versions} == set(settings["target-version"])
