"""What keeps compile time near-linear in template size (benchmarks/bench_compile.py times it).

No timings here: the guards count the passes whose cost grows with the template, and check that
the translator's own scope query, which replaced jinja2's quadratic symbol tracking, answers as
jinja2 does on every corpus template.
"""

from __future__ import annotations

import copy
import gc
import random
from collections import Counter
from pathlib import Path

import jinja2.compiler
import jinja2.environment
from jinja2 import meta, nodes
from jinja2.idtracking import find_symbols

import compiler.emit
import compiler.pipeline
from compiler.analysis import SPECIAL_TOKEN_NAMES, free_variables, parse_template, unreachable_names
from compiler.collector import COMPILE_THRESHOLD
from compiler.pipeline import generate
from compiler.source import resolve_source
from compiler.translator.expressions import GLOBAL_FUNCTIONS
from compiler.translator.lower import TEMPLATE_INPUTS
from compiler.translator.scopes import assigned_names
from tests.families import corpus_path

#: A small template of the benchmark's "branches" shape: a role chain with sets, elifs and a loop.
BRANCHES = (
    "{{ bos_token }}{% for message in messages %}"
    + "".join(
        f"{{%- if message.role == 'user' and message.content == 'k{i}' %}}<u{i}>{{{{ message.content | trim }}}}"
        f"{{%- elif message.role == 'r{i}' %}}{{% set x{i} = message.content %}}<r{i}>{{{{ x{i} }}}}{{% endif %}}\n"
        for i in range(6)
    )
    + "{% if message.role == 'user' %}<u>{{ message.content }}{{ eos_token }}"
    "{% elif message.role == 'assistant' %}<a>{{ message.content }}{{ eos_token }}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}<a>{% endif %}"
)


def statement_lists(template: nodes.Template) -> list[list[nodes.Node]]:
    """Every statement list of a template (each scope's and each branch's), and a tail of each."""
    lists = [template.body]
    for node in template.find_all(nodes.Node):
        for field in ("body", "else_", "elif_"):
            value = getattr(node, field, None)
            if isinstance(value, list) and value:
                lists.append(value)
    return lists + [statements[len(statements) // 2 :] for statements in lists if len(statements) > 1]


def test_assigned_names_answers_as_jinja_symbol_tracking_on_every_corpus_template():
    templates = sorted(corpus_path("templates").glob("*.jinja"))
    compared = 0
    for path in templates:
        template = parse_template(path.read_text(encoding="utf-8"), path.name)
        for statements in statement_lists(template):
            assert assigned_names(statements) == set(find_symbols(statements, None).stores), path.name
            compared += 1
    assert len(templates) >= 25 and compared > 1000, (len(templates), compared)


def test_assigned_names_keeps_the_sets_of_nested_scopes_and_takes_those_of_branches():
    template = parse_template(
        "{% set a = 1 %}{% if c %}{% set b = 1 %}{% elif d %}{% set e, f = 1, 2 %}{% else %}{% macro m() %}"
        "{% set inner = 1 %}{% endmacro %}{% endif %}{% for x in xs %}{% set loop_local = 1 %}{% endfor %}"
        "{% set block %}{% set in_block = 1 %}{% endset %}{% filter upper %}{% set filtered = 1 %}{% endfilter %}"
        "{% call m() %}{% set called = 1 %}{% endcall %}{% with w = 1 %}{% set in_with = 1 %}{% endwith %}",
        "scopes",
    )
    assert assigned_names(template.body) == {"a", "b", "e", "f", "m", "block"}
    assert assigned_names(template.body) == set(find_symbols(template.body, None).stores)


def test_free_variables_answers_as_jinja_on_every_corpus_template():
    """The names not asked about are one name in the copy jinja2's code generator runs on: the answer
    for the names asked about is jinja2's own on the template as written (the names a compile asks
    about, and random handfuls of each template's own names, free or bound)."""
    draw = random.Random(28)
    templates = sorted(corpus_path("templates").glob("*.jinja"))
    compared = 0
    for path in templates:
        source = path.read_text(encoding="utf-8")
        template = parse_template(source, path.name)
        environment = template.environment
        jinja_answer = meta.find_undeclared_variables(copy.deepcopy(template, {id(environment): environment}))
        jinja_answer -= set(TEMPLATE_INPUTS) | set(GLOBAL_FUNCTIONS)
        names = sorted({node.name for node in template.find_all((nodes.Name, nodes.NSRef))})
        asked = [set(SPECIAL_TOKEN_NAMES), set(unreachable_names())]
        asked += [set(draw.sample(names, min(len(names), draw.randint(1, 5)))) for _ in range(3)]
        for among in asked:
            assert free_variables(parse_template(source, path.name), among) == jinja_answer & among, path.name
            compared += 1
    assert len(templates) >= 25 and compared == 5 * len(templates)


def test_a_compile_runs_each_pass_that_grows_with_the_template_once(tmp_path: Path, monkeypatch):
    """One jinja2 parse of ours (besides transformers' own compile), one jinja2 code generation of
    ours (free variables; besides transformers' compile), one translation for the first-pass class
    and the emitted one, and black once, on the emitted module; all at the compile's collector pace."""
    calls: Counter[str] = Counter()
    thresholds: set[int] = set()

    def counted(owner, attribute: str, label: str) -> None:
        original = getattr(owner, attribute)

        def wrapper(*args, **kwargs):
            calls[label] += 1
            thresholds.add(gc.get_threshold()[0])
            return original(*args, **kwargs)

        monkeypatch.setattr(owner, attribute, wrapper)

    counted(jinja2.environment.Environment, "_parse", "jinja parse")
    counted(jinja2.compiler.CodeGenerator, "visit_Template", "jinja code generation")
    counted(compiler.emit, "translate", "translation")
    counted(compiler.emit.black, "format_str", "black")
    path = tmp_path / "branches.jinja"
    path.write_text(BRANCHES + "{# " + tmp_path.name + " #}", encoding="utf-8")  # not in transformers' cache
    source = resolve_source("bench/branches", template=path, allow_hub=False)
    before = gc.get_threshold()
    generate(source, tmp_path / "out", cases=1, seed=0, special_tokens={"bos_token": "<s>", "eos_token": "</s>"})
    assert calls["translation"] == 1, calls
    assert calls["jinja parse"] == 2, calls  # transformers' compile, then ours
    assert calls["jinja code generation"] == 2, calls  # transformers' compile, then find_undeclared_variables
    # the emitted module, and the generated folder's index (publish_module formats _index.py)
    assert calls["black"] == 2, calls
    # at the compile's collector pace throughout (full collections scan the template's whole AST
    # and IR: at Python's default pace they grew faster than the template), and as it was after
    assert thresholds == {max(before[0], COMPILE_THRESHOLD)} and gc.get_threshold() == before
