"""The compiler given hostile or huge input: nothing in data runs, errors are one line, runs are atomic.

Data never becomes code: a model id, manifest row, file name or template string reaches a
generated module only as an escaped literal, and the compiler checks a module before it runs it.
"""

from __future__ import annotations

import ast
import csv
import os
from pathlib import Path

import pytest

from compiler.cli import main
from compiler.errors import CompileError
from compiler.load_check import check_load_safe
from tests.families import corpus_path
from tests.test_cli import TINY, TOKENS


def hostile_ids(sentinel: Path) -> list[str]:
    """Model ids that ran code when pasted into a docstring (one per way out of it); the code
    creates ``sentinel`` (named from its folder, the working directory: an id has one ``/``)."""
    run = f'open({sentinel.name!r}, "w")'
    return [
        f'evil/x""";{run};"""',  # ends the module and class docstrings on one line
        f'evil/x"""\n{run}\n"""',  # the same over lines
        f'evil/x\\"""\n{run}\n#\\',  # a backslash before the quotes, one at the end
    ]


def one_error_line(capsys) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    return lines[0]


def module_constants(path: Path) -> dict[str, object]:
    """The literal class constants of a generated file, read without running it."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    (renderer,) = [node for node in tree.body if isinstance(node, ast.ClassDef)]
    return {
        node.targets[0].id: ast.literal_eval(node.value)
        for node in renderer.body
        if isinstance(node, ast.Assign) and isinstance(node.value, (ast.Constant, ast.Tuple))
    }


@pytest.mark.parametrize("case", range(3))
def test_a_hostile_model_id_on_the_command_line_runs_nothing(tmp_path: Path, capsys, monkeypatch, case: int):
    monkeypatch.chdir(tmp_path)
    sentinel = tmp_path / "ran"
    model_id = hostile_ids(sentinel)[case]
    template = tmp_path / "tiny.jinja"
    template.write_text(TINY, encoding="utf-8")
    out = tmp_path / "out"
    code = main(["generate", "--model", model_id, "--template", str(template), "--out", str(out), "--cases", "3", *TOKENS])
    assert code == 0, capsys.readouterr()
    assert not sentinel.exists()
    (written,) = [path for path in out.glob("*.py") if not path.name.startswith("_")]
    assert module_constants(written)["MODEL_IDS"] == (model_id,)
    text = written.read_text(encoding="utf-8")
    tree = check_load_safe(text, str(written))  # only imports, literals and the class at top level
    assert [type(node).__name__ for node in tree.body if isinstance(node, (ast.Expr, ast.ClassDef))] == ["Expr", "ClassDef"]
    assert ascii(model_id).replace('"', "\\x22") in text  # in the docstrings: the escaped literal


def test_a_hostile_model_id_in_a_corpus_manifest_runs_nothing(tmp_path: Path, capsys, monkeypatch):
    """A manifest row whose template matches the compiled one lands in MODEL_IDS and the docstring."""
    monkeypatch.chdir(tmp_path)
    real = corpus_path("templates", "MANIFEST.tsv").parent.parent
    sentinel = tmp_path / "ran"
    corpus = tmp_path / "corpus"
    (corpus / "templates").mkdir(parents=True)
    (corpus / "tokenizers").symlink_to(real / "tokenizers")  # referenced, not copied
    template = "Qwen__Qwen2.5-7B-Instruct.jinja"
    (corpus / "templates" / template).symlink_to(real / "templates" / template)
    with (real / "templates" / "MANIFEST.tsv").open(newline="", encoding="utf-8") as handle:
        rows = [row for row in csv.DictReader(handle, delimiter="\t") if row["file"] == template]
    assert rows, "the corpus lists Qwen2.5's template"
    hostile = [dict(rows[0], model_id=model_id) for model_id in hostile_ids(sentinel)]
    with (corpus / "templates" / "MANIFEST.tsv").open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]), delimiter="\t")
        writer.writeheader()
        writer.writerows([rows[0], *hostile])
    out = tmp_path / "out"
    model = rows[0]["model_id"]
    code = main(["generate", "--model", model, "--corpus", str(corpus), "--out", str(out), "--cases", "2", "--offline"])
    assert code == 0, capsys.readouterr()
    assert not sentinel.exists()
    (written,) = [path for path in out.glob("*.py") if not path.name.startswith("_")]
    assert module_constants(written)["MODEL_IDS"] == (model, *(row["model_id"] for row in hostile))


def test_a_hostile_template_string_stays_inside_the_docstring(tmp_path: Path, capsys, monkeypatch):
    """The turn's closing marker, quoted in the class docstring, holds the docstring's own end."""
    monkeypatch.chdir(tmp_path)
    sentinel = tmp_path / "ran"
    closing = f'"""\nopen({sentinel.name!r}, "w")\n"""'
    template = tmp_path / "quotes.jinja"
    template.write_text(TINY.replace("{{ eos_token }}", "{{ eos_token }}" + closing.replace("\n", "{{ '\\n' }}")), "utf-8")
    out = tmp_path / "out"
    code = main(["generate", "--model", "test/quotes", "--template", str(template), "--out", str(out), "--cases", "3", *TOKENS])
    assert code == 0, capsys.readouterr()
    assert not sentinel.exists()
    tree = check_load_safe((out / "quotes.py").read_text(encoding="utf-8"), "quotes.py")
    (renderer,) = [node for node in tree.body if isinstance(node, ast.ClassDef)]
    assert "open(" in ast.get_docstring(renderer)  # the marker is described, as text


@pytest.mark.parametrize(
    "statement",
    [
        "import os",
        "print('x')",
        "X = open('f')",
        "class R(GeneratedRenderer):\n    open('f')",
        "class R(GeneratedRenderer):\n    X = open('f')",
        "class R(GeneratedRenderer):\n    def f(self, x=open('f')):\n        pass",
        "class R(GeneratedRenderer):\n    @print\n    def f(self):\n        pass",
        "class R(GeneratedRenderer):\n    def f(self, x: open('f')):\n        pass",
        "from os import system",
        "from .glm_4_6 import Glm46Renderer",  # another family's module: every module is self-contained
        "from rllm_renderers.core.base import TurnFormat",  # the runtime's inside, not its surface for generated code
        "@print\nclass R(GeneratedRenderer):\n    pass",
    ],
)
def test_a_module_that_would_run_code_at_import_is_refused(statement: str):
    with pytest.raises(CompileError, match="not loaded"):
        check_load_safe(f'"""doc"""\nfrom rllm_renderers.compiled import GeneratedRenderer\n{statement}\n', "m.py")


def test_every_checked_in_renderer_passes_the_load_check():
    generated = Path(__file__).resolve().parent.parent / "generated"
    files = [path for path in generated.glob("*.py") if not path.name.startswith("_")]
    assert len(files) >= 30
    for path in files:
        check_load_safe(path.read_text(encoding="utf-8"), path.name)


# --- hostile and huge templates: one `error:` line, never a traceback or a hang ---------------------

RUNAWAY = {
    "overflow": "{% for i in range(10**9) %}x{% endfor %}",
    "recursion": "{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}",
}


@pytest.mark.parametrize("kind", sorted(RUNAWAY))
def test_a_runaway_template_is_one_error_line_naming_its_line(tmp_path: Path, capsys, kind: str):
    template = tmp_path / "runaway.jinja"
    template.write_text(TINY.replace("{% endfor %}", "{% endfor %}\n" + RUNAWAY[kind], 1), encoding="utf-8")
    code = main(["generate", "--model", "test/runaway", "--template", str(template), "--out", str(tmp_path / "out"), "--cases", "3", *TOKENS])
    assert code == 1
    line = one_error_line(capsys)
    assert line.startswith("error: runaway.jinja:2:"), line  # the statement's line
    assert {"overflow": "OverflowError", "recursion": "RecursionError"}[kind] in line
    assert not (tmp_path / "out").exists()


def test_nested_loops_fail_fast_on_the_render_budget(tmp_path: Path, capsys):
    import time

    template = tmp_path / "loops.jinja"
    loops = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    template.write_text(TINY.replace("{% for message", loops + "\n{% for message", 1), encoding="utf-8")
    started = time.monotonic()
    code = main(["generate", "--model", "test/loops", "--template", str(template), "--out", str(tmp_path / "out"), "--cases", "3", "--render-budget", "1", *TOKENS])
    assert code == 1
    line = one_error_line(capsys)
    assert line.startswith("error: loops.jinja:1:") and "range(100000)" in line and "1 s budget" in line, line
    assert time.monotonic() - started < 30


def test_check_dir_with_a_broken_python_file_is_one_error_line(tmp_path: Path, capsys):
    (tmp_path / "broken.py").write_text("def (\n", encoding="utf-8")
    assert main(["check", "--dir", str(tmp_path)]) == 1
    line = one_error_line(capsys)
    assert "broken.py" in line and "line 1" in line, line


@pytest.mark.parametrize("model_id", ["../../../x", "a/../../b", "/abs/x", "a//b", "a/b/c", "./x", ".."])
def test_a_model_id_must_not_be_a_path(tmp_path: Path, capsys, model_id: str):
    code = main(["generate", "--model", model_id, "--out", str(tmp_path / "out"), "--cases", "3", *TOKENS])
    assert code == 1
    assert "is not an org/name pair" in one_error_line(capsys)


def test_an_override_outside_templates_overrides_is_not_reached(tmp_path: Path):
    """The path the probe took: --model ../../<elsewhere>/x found <elsewhere>/x.jinja and compiled it."""
    from compiler.source import OVERRIDES_DIR, resolve_source

    (tmp_path / "x.jinja").write_text(TINY, encoding="utf-8")
    model_id = os.path.relpath(tmp_path / "x", OVERRIDES_DIR)
    assert (OVERRIDES_DIR / f"{model_id}.jinja").resolve() == (tmp_path / "x.jinja").resolve()
    with pytest.raises(CompileError, match="not an org/name pair"):
        resolve_source(model_id, allow_hub=False)


@pytest.mark.parametrize("text", ["", "  \n\t\n"])
def test_an_empty_template_is_refused(tmp_path: Path, capsys, text: str):
    template = tmp_path / "empty.jinja"
    template.write_text(text, encoding="utf-8")
    code = main(["generate", "--model", "test/empty", "--template", str(template), "--out", str(tmp_path / "out"), *TOKENS])
    assert code == 1
    assert "the template is empty" in one_error_line(capsys)
    assert not (tmp_path / "out").exists()


def test_list_dir_of_a_file_is_refused(tmp_path: Path, capsys):
    afile = tmp_path / "tiny.jinja"
    afile.write_text(TINY, encoding="utf-8")
    assert main(["list", "--dir", str(afile)]) == 1
    assert "is not a folder" in one_error_line(capsys)


# --- generate is atomic as a whole: module and index ------------------------------------------------

#: A generate run whose every file write is slowed down: the window in which a second run into the
#: same folder used to read the folder, compute its index without the first run's module, and win.
SLOW_WRITES = """
import sys, time
import compiler.publish as publish
write = publish.write_atomically
def slow_write(path, text):
    time.sleep(2)
    write(path, text)
publish.write_atomically = slow_write
import compiler.pipeline as pipeline
if hasattr(pipeline, "write_atomically"):  # before publish.py existed
    pipeline.write_atomically = slow_write
from compiler.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_two_concurrent_generate_runs_into_one_folder_both_land_in_the_index(tmp_path: Path):
    import subprocess
    import sys

    from compiler.emit import BLACK_MODE
    from compiler.index import index_is_current

    repo = Path(__file__).resolve().parent.parent
    out = tmp_path / "out"
    runs = []
    for name in ("first", "second"):
        template = tmp_path / f"{name}.jinja"
        template.write_text(TINY.replace("<u>", f"<{name}>"), encoding="utf-8")
        command = [sys.executable, "-c", SLOW_WRITES, "generate", "--model", f"test/{name}", "--template", str(template)]
        command += ["--out", str(out), "--cases", "2", *TOKENS]
        runs.append(subprocess.Popen(command, cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for run in runs:
        stdout, stderr = run.communicate(timeout=300)
        assert run.returncode == 0, stderr
    assert sorted(path.name for path in out.iterdir()) == ["_index.py", "first.py", "second.py"]
    index = (out / "_index.py").read_text(encoding="utf-8")
    assert "'first'" in index.replace('"', "'") and "'second'" in index.replace('"', "'")
    assert index_is_current(out, BLACK_MODE)


def test_a_crash_between_the_module_and_the_index_is_repaired_by_one_check(tmp_path: Path, capsys, monkeypatch):
    import compiler.publish as publish
    from compiler.emit import BLACK_MODE
    from compiler.index import index_is_current

    template = tmp_path / "tiny.jinja"
    template.write_text(TINY, encoding="utf-8")
    out = tmp_path / "out"
    assert main(["generate", "--model", "test/tiny", "--template", str(template), "--out", str(out), "--cases", "2", *TOKENS]) == 0
    second = tmp_path / "other.jinja"
    second.write_text(TINY.replace("<u>", "<o>"), encoding="utf-8")
    write = publish.write_atomically

    def crash_at_the_index(path: Path, text: str) -> None:
        if path.name == "_index.py":
            raise KeyboardInterrupt  # the run stops here: its module is written, its index is not
        write(path, text)

    monkeypatch.setattr(publish, "write_atomically", crash_at_the_index)
    with pytest.raises(KeyboardInterrupt):
        main(["generate", "--model", "test/other", "--template", str(second), "--out", str(out), "--cases", "2", *TOKENS])
    monkeypatch.undo()
    assert sorted(path.name for path in out.iterdir()) == ["_index.py", "other.py", "tiny.py"]  # no temporary left
    assert not index_is_current(out, BLACK_MODE)
    capsys.readouterr()
    main(["check", "--dir", str(out), "--corpus", str(tmp_path)])
    assert "REPAIRED _index.py" in capsys.readouterr().out
    assert index_is_current(out, BLACK_MODE)


# --- a tokenizer shipping several named templates ---------------------------------------------------

TOOLS = [{"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object", "properties": {}}}}]


def named_template_tokenizer(tool_use: str):
    """The Qwen2.5 tokenizer shipping {"default": Qwen2.5's template, "tool_use": ``tool_use``}."""
    from rllm_renderers.encoding.loading import load_tokenizer

    tokenizer = load_tokenizer(corpus_path("tokenizers", "qwen25"))
    default = corpus_path("templates", "Qwen__Qwen2.5-7B-Instruct.jinja").read_text(encoding="utf-8")
    tokenizer.chat_template = {"default": default, "tool_use": tool_use}
    return tokenizer


def test_resolve_renders_each_call_with_the_template_apply_chat_template_picks():
    """transformers' get_chat_template: ``tool_use`` when tools is not None (even []), else ``default``."""
    from rllm_renderers.core.registry import resolve

    tokenizer = named_template_tokenizer(corpus_path("templates", "Qwen__QwQ-32B.jinja").read_text(encoding="utf-8"))
    renderer = resolve("Qwen/Qwen2.5-7B-Instruct", tokenizer).renderer
    conversations = [
        [{"role": "user", "content": "hi"}],
        [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
    ]
    compared = 0
    for messages in conversations:
        for tools in (None, [], TOOLS):
            for prompt in (True, False):
                expected = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=prompt, tokenize=True, return_dict=False)
                assert renderer.render_ids(messages, tools=tools, add_generation_prompt=prompt) == list(expected), (messages, tools)
                compared += 1
    assert compared == 12
    # the two templates differ on these calls, so the check above tells them apart
    default_only = resolve("Qwen/Qwen2.5-7B-Instruct", load_named_free_tokenizer()).renderer
    assert default_only.render_ids(conversations[0], tools=TOOLS) != renderer.render_ids(conversations[0], tools=TOOLS)


def load_named_free_tokenizer():
    from rllm_renderers.encoding.loading import load_tokenizer

    return load_tokenizer(corpus_path("tokenizers", "qwen25"))


def test_a_tool_use_template_no_renderer_covers_is_refused_loudly():
    from rllm_renderers.core.registry import resolve

    default = corpus_path("templates", "Qwen__Qwen2.5-7B-Instruct.jinja").read_text(encoding="utf-8")
    tokenizer = named_template_tokenizer(default.replace("<tool_call>", "<call>"))
    renderer = resolve("Qwen/Qwen2.5-7B-Instruct", tokenizer).renderer
    messages = [{"role": "user", "content": "hi"}]
    expected = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
    assert renderer.render_ids(messages, add_generation_prompt=True) == list(expected)  # no tools: default
    for call in (
        lambda: renderer.render_ids(messages, tools=TOOLS, add_generation_prompt=True),
        lambda: renderer.render(messages, tools=[]),
        lambda: renderer.parse_response([1, 2], tools=TOOLS),
    ):
        with pytest.raises(ValueError, match="'tool_use' template"):
            call()


def test_generate_compiles_every_named_template_of_a_tokenizer_folder(tmp_path: Path, capsys):
    import json

    real = corpus_path("tokenizers", "qwen25")
    folder = tmp_path / "tokenizer"
    folder.mkdir()
    (folder / "tokenizer.json").symlink_to(real / "tokenizer.json")  # referenced, not copied
    config = json.loads((real / "tokenizer_config.json").read_text(encoding="utf-8"))
    # the Qwen2.5 tokenizer has no bos token; and its BPE reads "<a>Fine" as "<a" ">Fine", so the
    # header and the answer share a token no model samples (verify refuses that): a line break
    # after the header keeps them apart
    plain = TINY.replace("{{ bos_token }}", "").replace("<a>", "<a>\n")
    config["chat_template"] = [
        {"name": "default", "template": plain},
        {"name": "tool_use", "template": plain.replace("<u>", "<u tools>")},
    ]
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    out = tmp_path / "out"
    code = main(["generate", "--model", "test/named", "--tokenizer", str(folder), "--out", str(out), "--cases", "2", "--offline"])
    assert code == 0, capsys.readouterr()
    assert sorted(path.name for path in out.iterdir()) == ["_index.py", "named.py", "named_tool_use.py"]
    assert "TEMPLATE_NAME" not in module_constants(out / "named.py")
    assert module_constants(out / "named_tool_use.py")["TEMPLATE_NAME"] == "tool_use"
    assert "<u tools>" in (out / "named_tool_use.py").read_text(encoding="utf-8")
    assert "--template-name tool_use" in (out / "named_tool_use.py").read_text(encoding="utf-8")


def test_a_render_writing_without_end_fails_on_the_size_budget(tmp_path: Path, capsys):
    import time

    template = tmp_path / "writes.jinja"
    loops = "{% for i in range(100000) %}{% for j in range(100000) %}xyz{% endfor %}{% endfor %}"
    template.write_text(TINY.replace("{% for message", loops + "\n{% for message", 1), encoding="utf-8")
    started = time.monotonic()
    arguments = ["--out", str(tmp_path / "out"), "--cases", "3", "--render-characters", "100000", *TOKENS]
    assert main(["generate", "--model", "test/writes", "--template", str(template), *arguments]) == 1
    line = one_error_line(capsys)
    assert line.startswith("error: writes.jinja:1:") and "100000-character budget" in line, line
    assert time.monotonic() - started < 30


# --- every input ends in one clear line: deep nesting, a raising template, special files, --out ------

NESTED = {
    "1000 ifs": ("{% if messages %}" * 1000 + "x" + "{% endif %}" * 1000, "{% if %} nested 1000 deep"),
    "150 ifs": ("{% if messages %}" * 150 + "x" + "{% endif %}" * 150, "{% if %} nested 150 deep"),
    "25 fors": ("{% for m in messages %}" * 25 + "x" + "{% endfor %}" * 25, "{% for %} nested 25 deep"),
    "500 parentheses": ("{{ " + "(" * 500 + "1" + ")" * 500 + " }}", "( nested 500 deep"),
}


@pytest.mark.parametrize("case", sorted(NESTED))
def test_deep_nesting_is_one_error_line_naming_the_construct(tmp_path: Path, capsys, case: str):
    nested, named = NESTED[case]
    template = tmp_path / "deep.jinja"
    template.write_text(TINY.replace("{% endfor %}", "{% endfor %}\n" + nested, 1), encoding="utf-8")
    code = main(["generate", "--model", "test/deep", "--template", str(template), "--out", str(tmp_path / "out"), "--cases", "3", *TOKENS])
    assert code == 1
    line = one_error_line(capsys)
    assert line.startswith("error: deep.jinja:2: " + named), line
    assert not (tmp_path / "out").exists()


def test_a_template_raising_key_error_is_one_error_line(tmp_path: Path, capsys):
    template = tmp_path / "keys.jinja"
    template.write_text(TINY + "{{ '%(missing)s' % {} }}", encoding="utf-8")
    code = main(["generate", "--model", "test/keys", "--template", str(template), "--out", str(tmp_path / "out"), "--cases", "3", *TOKENS])
    assert code == 1
    line = one_error_line(capsys)
    assert line.startswith("error: keys.jinja:") and line.endswith(": the template raised KeyError ('missing')"), line


def special_files(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    fifo = tmp_path / "fifo.jinja"
    os.mkfifo(fifo)
    (tmp_path / "folder.jinja").mkdir()
    return {
        "/dev/zero": (Path("/dev/zero"), "is a character device, not a regular file"),
        "FIFO": (fifo, "is a FIFO (named pipe), not a regular file"),
        "folder": (tmp_path / "folder.jinja", "is a folder, not a regular file"),
        "missing": (tmp_path / "missing.jinja", "template file not found"),
    }


@pytest.mark.parametrize("kind", ["/dev/zero", "FIFO", "folder", "missing"])
def test_a_special_file_as_the_template_is_named_as_such(tmp_path: Path, capsys, kind: str):
    path, named = special_files(tmp_path)[kind]
    code = main(["generate", "--model", "test/special", "--template", str(path), "--out", str(tmp_path / "out"), *TOKENS])
    assert code == 1
    line = one_error_line(capsys)
    assert str(path) in line and named in line, line


def test_an_empty_out_is_refused_not_the_working_folder(tmp_path: Path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    template = tmp_path / "tiny.jinja"
    template.write_text(TINY, encoding="utf-8")
    code = main(["generate", "--model", "test/tiny", "--template", str(template), "--out", "", "--cases", "3", *TOKENS])
    assert code == 1
    assert one_error_line(capsys) == "error: --out must be a folder path, got an empty one"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["tiny.jinja"]


def test_the_whole_compile_budget_ends_a_slow_template_naming_the_conversation(tmp_path: Path, capsys):
    """Every render within its own budget, but each one slow: the whole-compile budget ends it."""
    template = tmp_path / "slow.jinja"
    slow = "{% for m in messages %}{% set x = (m.content ~ 'abc') * 20000000 %}{% endfor %}"
    template.write_text(TINY + slow, encoding="utf-8")
    code = main(["generate", "--model", "test/slow", "--template", str(template), "--out", str(tmp_path / "out"), "--cases", "3", "--budget", "1", *TOKENS])
    assert code == 1
    line = one_error_line(capsys)
    assert line.startswith("error: slow.jinja:1: ") and "the compile ran past the 1 s compile budget (raise it with --budget)" in line, line
    assert ', rendering the conversation [{"role": ' in line, line
    assert not (tmp_path / "out").exists()
