"""Family ladders: a generated class inherits only methods whose code is identical."""

from __future__ import annotations

from pathlib import Path

from compiler.emit import BLACK_MODE
from compiler.ladder import with_ladder

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

from rllm_renderers.base import GeneratedRenderer

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
    child = with_ladder("fam_2", module("fam_2", "Fam2Renderer", marker="y", lines=(5, 11)), tmp_path, BLACK_MODE)
    assert "from .fam_1 import Fam1Renderer" in child
    assert "class Fam2Renderer(Fam1Renderer):" in child
    assert "def render_user" not in child and "def render_template" in child
    assert "Inherits from Fam1Renderer (same code): render_user." in child
    compile(child, "fam_2.py", "exec")


def test_no_ladder_when_constants_differ_or_the_parent_sorts_later(tmp_path: Path):
    (tmp_path / "fam_1.py").write_text(module("fam_1", "Fam1Renderer", bos="<bos>"), encoding="utf-8")
    code = module("fam_2", "Fam2Renderer")
    assert with_ladder("fam_2", code, tmp_path, BLACK_MODE) == code  # BOS_TOKEN differs
    (tmp_path / "fam_3.py").write_text(module("fam_3", "Fam3Renderer"), encoding="utf-8")
    code = module("fam_0", "Fam0Renderer")
    assert with_ladder("fam_0", code, tmp_path, BLACK_MODE) == code  # parents must sort earlier
