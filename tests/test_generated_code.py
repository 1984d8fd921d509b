"""What the checked-in generated renderers must never contain, and attribution from the translator's marks."""

from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path

import pytest

from tests.families import FAMILIES, FAMILY_IDS

REPO = Path(__file__).resolve().parents[1]
GENERATED = sorted(path for path in (REPO / "generated").glob("*.py") if not path.name.startswith("_"))
ALWAYS_DEFINED = {"strftime_now", "raise_exception", "Namespace"}


def is_text(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def problems_in(code: str) -> list[str]:
    tree = ast.parse(code)
    problems = []
    if "str(jinja.raise_exception(" in code:
        problems.append("str(jinja.raise_exception(...)) where a raise statement belongs")
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add) and is_text(node.right):
            left = node.left.right if isinstance(node.left, ast.BinOp) and isinstance(node.left.op, ast.Add) else node.left
            if is_text(left):
                problems.append(f"line {node.lineno}: adjacent literals joined with +: {ast.unparse(node)[:60]}")
        if isinstance(node, ast.If):
            test = node.test.operand if isinstance(node.test, ast.UnaryOp) else node.test
            if (
                isinstance(test, ast.Call)
                and ast.unparse(test.func) == "jinja.defined"
                and isinstance(test.args[0], ast.Attribute)
                and test.args[0].attr in ALWAYS_DEFINED
            ):
                problems.append(f"line {node.lineno}: dead defined() branch on a global")
            if node.orelse and ast.dump(ast.Module(node.body, [])) == ast.dump(ast.Module(node.orelse, [])):
                problems.append(f"line {node.lineno}: identical if/else branches")
    imported = {}
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                imported[alias.asname or alias.name] = node.lineno
    used = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    problems += [f"line {line}: unused import {name}" for name, line in imported.items() if name not in used]
    problems += unreachable_statements(tree) + dead_stores(tree) + positional_names(tree) + foreign_imports(tree)
    return problems


TERMINAL = (ast.Raise, ast.Return, ast.Break, ast.Continue)


def unreachable_statements(tree: ast.AST) -> list[str]:
    """A statement after a raise / return / break / continue in the same block."""
    problems = []
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if isinstance(block, list):
                for statement, following in zip(block, block[1:]):
                    if isinstance(statement, TERMINAL):
                        problems.append(f"line {following.lineno}: unreachable after line {statement.lineno}")
    return problems


def dead_stores(tree: ast.AST) -> list[str]:
    """A local assigned (``x = ...``) in a function that nothing in it (or a nested function) reads."""
    problems = []
    for function in (node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)):
        read = {node.id for node in ast.walk(function) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}
        for node in ast.walk(function):
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    for name in ast.walk(target):
                        if isinstance(name, ast.Name) and isinstance(name.ctx, ast.Store) and name.id not in read:
                            problems.append(f"line {node.lineno}: {name.id} is assigned and never read ({function.name})")
    return problems


def positional_names(tree: ast.AST) -> list[str]:
    """A role method named by its position (``render_assistant_2``) rather than by what it handles."""
    return [
        f"line {node.lineno}: {node.name} is named by position"
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef) and node.name.startswith("render_") and re.search(r"_\d+$", node.name)
    ]


def foreign_imports(tree: ast.Module) -> list[str]:
    """An import from anywhere but rllm_renderers.compiled (another family's module, the runtime's inside)."""
    return [
        f"line {node.lineno}: imports {'.' * getattr(node, 'level', 0)}{getattr(node, 'module', '') or ''}"
        for node in tree.body
        if isinstance(node, ast.Import)
        or (isinstance(node, ast.ImportFrom) and (node.level or node.module != "rllm_renderers.compiled"))
    ]


@pytest.mark.parametrize("path", GENERATED, ids=lambda path: path.stem)
def test_generated_code_reads_like_a_hand_port(path: Path):
    assert problems_in(path.read_text(encoding="utf-8")) == []


def test_the_checks_catch_what_they_look_for():
    bad = (
        "from rllm_renderers.compiled import ReasoningFormat\n"
        "from rllm_renderers import template_runtime as jinja\n"
        "from .glm_4_6 import Glm46Renderer\n"
        "x = 'a' + 'b'\ny = x + 'c' + 'd'\n"
        "if jinja.defined(jinja.strftime_now):\n    pass\nelse:\n    pass\n"
        "str(jinja.raise_exception('no'))\n"
        "def render_assistant_2(out, m):\n"
        "    unused = 1\n"
        "    for item in m:\n"
        "        raise jinja.TemplateError('no')\n"
        "        out.append(item)\n"
    )
    found = problems_in(bad)
    for what in ("unused import ReasoningFormat", "imports rllm_renderers", "imports .glm_4_6", "unused import Glm46",
                 "adjacent literals", "dead defined()", "identical if/else", "raise_exception(...))",
                 "unreachable after", "unused is assigned and never read", "render_assistant_2 is named by position"):
        assert any(what in problem for problem in found), (what, found)
    assert len(found) == 12, found


@pytest.mark.parametrize("family", FAMILIES, ids=FAMILY_IDS)
def test_content_equal_to_a_role_name_is_attributed_to_the_content(family):
    tokenizer = family.load_tokenizer()
    renderer = family.renderer_class(tokenizer)
    messages = [{"role": "user", "content": "user"}, {"role": "assistant", "content": "assistant"}]
    rendered = renderer.render(messages)
    text = renderer.decode(rendered.token_ids)
    content_tokens = [token for token, flag in zip(rendered.token_ids, rendered.is_content) if flag]
    assert renderer.decode(content_tokens).count("user") == 1, text
    for index, word in enumerate(("user", "assistant")):
        tokens = [t for t, m, c in zip(rendered.token_ids, rendered.message_indices, rendered.is_content) if c and m == index]
        assert renderer.decode(tokens).strip() == word, (word, text)
    # the header that also says "user" is not content
    header = [t for t, m, c in zip(rendered.token_ids, rendered.message_indices, rendered.is_content) if m == 0 and not c]
    assert renderer.decode(header).strip() != ""



def test_content_written_outside_the_message_loop_is_attributed_to_its_message(tmp_path: Path):
    """``messages[0].content`` written before the loop (a system prompt) is message 0's content."""
    source = (
        "{% if messages[0].role == 'system' %}<sys>{{ messages[0].content | trim }}</sys>{% endif %}"
        "{% for m in messages %}{% if not (loop.first and m.role == 'system') %}<{{ m.role }}>{{ m.content }}"
        "{% endif %}{% endfor %}"
    )
    template = tmp_path / "outside.jinja"
    template.write_text(source, encoding="utf-8")
    from compiler import pipeline
    from compiler.source import resolve_source

    code = pipeline.compile_source(resolve_source("test/outside", template=template, allow_hub=False)).code
    renderer = pipeline.load_renderer_class(code, "outside", "OutsideRenderer")()
    messages = [{"role": "system", "content": " Stay terse. "}, {"role": "user", "content": "Hi."}]
    out = renderer._render_output(messages, None, False)
    text = out.text()
    assert text == "<sys>Stay terse.</sys><user>Hi."
    assert [text[low:high] for low, high in out.content_ranges()] == ["Stay terse.", "Hi."]
    assert [(text[low:high], index) for low, high, index in out.caller_ranges()] == [("Stay terse.", 0), ("Hi.", 1)]
    # the loop's marks leave the system prompt outside any message; attribution gives it to message 0
    spans = out.attributed_spans()
    system_start = text.index("Stay")
    assert [index for start, index in spans if start <= system_start][-1] == 0
    assert [index for start, index in spans if start <= system_start + len("Stay terse.")][-1] == -1  # `</sys>`


TINY = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if message.role == 'user' %}<u>{{ message.content }}{{ eos_token }}"
    "{% elif message.role == 'assistant' %}<a>{{ message.content }}{{ eos_token }}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}<a>{% endif %}"
)
TINY_CHILD = TINY.replace("{{ bos_token }}", "{{ bos_token }}<sys>")
TOKENS = {"bos_token": "<s>", "eos_token": "</s>"}


def test_a_near_copy_is_self_contained_whatever_the_out_folder_or_checkout_holds(tmp_path: Path, monkeypatch):
    """A template that repeats another's methods gets its own copy of them: no import of the other
    module, the same bytes into an empty folder as into one holding the near copy, in any checkout."""
    from compiler import pipeline
    from compiler.source import resolve_source

    first_template, second_template = tmp_path / "a.jinja", tmp_path / "b.jinja"
    first_template.write_text(TINY, encoding="utf-8")
    second_template.write_text(TINY_CHILD, encoding="utf-8")
    first = resolve_source("test/fam-a", template=first_template, allow_hub=False)
    second = resolve_source("test/fam-b", template=second_template, allow_hub=False)
    outputs = []
    for name in ("empty", "holding_the_near_copy"):
        out = tmp_path / name / "out"
        if name == "holding_the_near_copy":
            pipeline.generate(first, out, cases=5, seed=0, module="fam_a", special_tokens=TOKENS)
            generated = tmp_path / name / "generated"  # a checkout whose generated/ holds it too
            generated.mkdir()
            shutil.copy(out / "fam_a.py", generated / "fam_0.py")
            monkeypatch.setattr(pipeline, "GENERATED_DIR", generated)
        path, _, _ = pipeline.generate(second, out, cases=5, seed=0, module="fam_b", special_tokens=TOKENS)
        outputs.append(path.read_bytes())
    assert outputs[0] == outputs[1]
    code = outputs[0].decode()
    assert "class FamBRenderer(GeneratedRenderer):" in code and "def render_user(" in code
    assert foreign_imports(ast.parse(code)) == []


def test_black_mode_is_the_repository_configuration():
    import tomllib

    from compiler.emit import BLACK_MODE

    settings = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["black"]
    assert BLACK_MODE.line_length == settings["line-length"]
    assert {version.name.lower() for version in BLACK_MODE.target_versions} == set(settings["target-version"])
