"""Assemble a generated renderer module and format it with black.

Output is deterministic: the same template, facts and compiler version give the
same bytes (no timestamps, sorted iteration, black pinned in pyproject.toml).
"""

from __future__ import annotations

import ast
import dataclasses
import re
import textwrap
from dataclasses import dataclass

import black

from . import __version__
from .analysis import JINJA_OWN_NAMES, TemplateFacts
from .content_format import detect_content_format
from .literals import docstring_text, require_identifier
from .probes import ProbeFacts
from .translator import RESERVED_NAMES, TemplateNames, ir, translate
from .translator.emit_py import method_lines, statement_lines

# The one black configuration: the same as [tool.black] in pyproject.toml (a test checks), so
# `black .` leaves generated files as the compiler wrote them.
BLACK_MODE = black.Mode(
    target_versions={black.TargetVersion.PY310},
    line_length=120,
    magic_trailing_comma=True,
)

SIZE_TOKEN = re.compile(r"^(\d+(\.\d+)?[bBmMkK]|[aA]\d+[bB]|\d{4})$")
DROPPED_SUFFIXES = {"instruct", "it", "chat", "base", "bf16", "fp8", "hf"}


@dataclass(frozen=True)
class ModuleSpec:
    module: str  # generated/<module>.py
    class_name: str
    model_ids: tuple[str, ...]
    command: str  # the command that regenerates the file
    oracle_version: str
    template_name: str | None = None  # one of a tokenizer's named templates (None: its only one)


def family_module_name(model_id: str) -> str:
    """``Qwen/Qwen2.5-7B-Instruct`` -> ``qwen2_5``; ``google/gemma-3-27b-it`` -> ``gemma_3``."""
    name = model_id.split("/")[-1]
    kept = []
    for part in name.split("-"):
        if SIZE_TOKEN.match(part):
            break
        kept.append(part)
    while kept and kept[-1].lower() in DROPPED_SUFFIXES:
        kept.pop()
    module = "_".join(kept or [name]).lower()
    module = re.sub(r"[^0-9a-z]+", "_", module).strip("_")
    return module if module[:1].isalpha() else "model_" + module


def class_name_for(module: str) -> str:
    """``qwen2_5`` -> ``Qwen25Renderer``, ``gpt_oss`` -> ``GptOssRenderer``."""
    return "".join(part[:1].upper() + part[1:] for part in module.split("_")) + "Renderer"


def constant_name(variable: str) -> str:
    return variable.upper()


def knob_local(knob: str) -> str:
    """The Python local holding a knob: its own name unless that is taken (``str``, ``out``...)."""
    local = knob if knob.isidentifier() else re.sub(r"\W", "_", knob)
    return local + "_" if local in RESERVED_NAMES or local[:1].isdigit() else local


def dataclass_literal(value: object) -> str:
    """``TurnFormat(close="<|im_end|>", ...)`` with only the fields that differ from their defaults."""
    if value is None:
        return "None"
    arguments = []
    for field in dataclasses.fields(value):
        current = getattr(value, field.name)
        if field.default is not dataclasses.MISSING and current == field.default:
            continue
        arguments.append(f"{field.name}={current!r}")
    return f"{type(value).__name__}({', '.join(arguments)})"


@dataclass(frozen=True)
class Translation:
    """A template translated once: the names its code uses, its IR, and the lines of its methods (the
    same for the first-pass class and the emitted one: only the class's facts differ)."""

    names: TemplateNames
    program: ir.Program
    method_lines: tuple[str, ...]


def translate_facts(facts: TemplateFacts) -> Translation:
    """Translate the template of ``facts`` (the slowest step of a compile after black: done once)."""
    names = TemplateNames(
        knobs={
            knob: knob_local(knob)
            for knob in facts.knobs + facts.runtime_special_tokens + facts.undefined_names + facts.jinja_names
        },
        special_tokens={variable: constant_name(variable) for variable in facts.special_tokens},
    )
    program = translate(facts.ast, facts.name, names, facts.source)
    lines = statement_lines(program.body, 2)
    for method in program.methods:
        lines += ["", *method_lines(method)]
    return Translation(names, program, tuple(lines))


def emit_module(
    facts: TemplateFacts,
    spec: ModuleSpec,
    turn: ProbeFacts | None = None,
    *,
    formatted: bool = True,
    translation: Translation | None = None,
) -> str:
    """The full text of ``generated/<module>.py``, black-formatted.

    ``turn`` carries what probing the first-pass class learned about assistant turns
    (see :mod:`compiler.probes`); without it the class can render but not parse or bridge.
    The module is self-contained: it imports only ``rllm_renderers.compiled``. ``formatted=False`` skips black (the same code, for a class that is only
    run, never written: black is the slowest step on a large template). ``translation``: the
    template's, when it was translated already (:func:`translate_facts`).
    """
    translation = translation or translate_facts(facts)
    names, program = translation.names, translation.program
    code_names = [spec.module, spec.class_name, *names.knobs.values(), *names.special_tokens.values()]
    code_names += [method.name for method in program.methods]
    for name in code_names:
        require_identifier(name, "the name")

    lines: list[str] = []
    lines += header_docstring(facts, spec)
    lines += ["", import_line(program, turn, runtime_values=bool(facts.undefined_names or facts.jinja_names)), ""]
    for variable, value in sorted(facts.special_tokens.items()):
        lines.append(f"{constant_name(variable)} = {value!r}")
    lines += ["", ""]
    lines.append(f"class {spec.class_name}(GeneratedRenderer):")
    lines += class_docstring(facts, spec, turn, program.resumption)
    lines.append(f"    MODEL_IDS = {tuple(spec.model_ids)!r}")
    lines.append(f"    TEMPLATE_SHA256 = {facts.sha256!r}")
    if spec.template_name not in (None, "default"):  # resolve picks it for calls with tools (see named_templates)
        lines.append(f"    TEMPLATE_NAME = {spec.template_name!r}")
    lines.append(f"    KNOBS = {tuple(facts.knobs)!r}")
    special = [f"{variable!r}: {constant_name(variable)}" for variable in sorted(facts.special_tokens)]
    # None: read from the tokenizer the class is built with (or its special_tokens= argument)
    special += [f"{variable!r}: None" for variable in facts.runtime_special_tokens]
    lines.append(f"    SPECIAL_TOKENS = {{{', '.join(special)}}}")
    lines.append(f"    ROLES = {tuple(facts.roles)!r}")
    lines.append(f"    TOOL_ARGUMENTS = {facts.tool_arguments!r}")
    if facts.lead_roles:
        lines.append(f"    LEAD_ROLES = {tuple(facts.lead_roles)!r}")
    lines.append(f"    CONTENT_FORMAT = {detect_content_format(facts.ast)!r}")
    if turn is not None:
        lines.append(f"    TURN = {dataclass_literal(turn.turn)}")
        if turn.unlearned:
            lines.append(f"    UNLEARNED = {dict(turn.unlearned)!r}")
        if turn.unproven:
            lines.append(f"    UNPROVEN = {dict(turn.unproven)!r}")
        lines.append(f"    REASONING = {dataclass_literal(turn.reasoning)}")
        lines.append(f"    TOOL_CALLS = {dataclass_literal(turn.tool_calls)}")
        lines.append(f"    PREFIX_STABLE = {turn.prefix_stable!r}")
        # what bridge_to_next_turn does when the template would rewrite the sampled turn
        lines.append('    DEFAULT_THINKING_RETENTION = "template"')
    lines.append("")
    lines.append("    def render_template(self, out, messages, tools, documents, add_generation_prompt):")
    lines.append('        """The chat template, statement by statement, each comment quoting the statement."""')
    for knob in facts.knobs:
        lines.append(f"        {knob_local(knob)} = self.knobs[{knob!r}]")
    for variable in facts.runtime_special_tokens:
        lines.append(f"        {knob_local(variable)} = self.special_tokens[{variable!r}]")
    for variable in facts.undefined_names:
        lines.append(f"        # apply_chat_template never passes {docstring_text(variable)} to the template")
        lines.append(f"        {knob_local(variable)} = jinja.Undefined({variable!r})")
    for variable in facts.jinja_names:
        lines.append(f"        {knob_local(variable)} = {JINJA_OWN_NAMES[variable]}  # Jinja's own {variable!r}")
    lines += translation.method_lines
    source = "\n".join(lines) + "\n"
    return black.format_str(source, mode=BLACK_MODE) if formatted else source


def import_line(program: ir.Program, turn: ProbeFacts | None, runtime_values: bool = False) -> str:
    """The module's one import, from ``rllm_renderers.compiled``: only the names its code uses
    (``runtime_values``: the class gives names the template reads values from the runtime)."""
    statements = list(ir.walk_statements(program.body))
    for method in program.methods:
        statements += ir.walk_statements(method.body)
    expressions = [expression for statement in statements for expression in ir.expressions_of(statement)]
    expressions += [p.default for method in program.methods for p in method.parameters if p.default is not None]
    uses_runtime = any("jinja" in ir.names_read(expression) for expression in expressions)
    uses_runtime = uses_runtime or any(method.memoized for method in program.methods)  # @jinja.memoized_macro
    uses_runtime = uses_runtime or runtime_values
    names = {"GeneratedRenderer"} | ({"jinja"} if uses_runtime else set())
    if turn is not None:
        names |= {type(value).__name__ for value in (turn.turn, turn.reasoning, turn.tool_calls) if value is not None}
    aliases = [ast.alias(name) for name in sorted(names)]
    return ast.unparse(ast.ImportFrom(module="rllm_renderers.compiled", names=aliases, level=0))


def header_docstring(facts: TemplateFacts, spec: ModuleSpec) -> list[str]:
    return [
        f'"""{spec.class_name[: -len("Renderer")]} renderer, compiled from a Jinja chat template.',
        "",
        f"Models: {', '.join(docstring_text(model_id) for model_id in spec.model_ids)}",
        f"Template: {docstring_text(facts.name)} (sha256 {facts.sha256})",
        f"Compiled by: rllm-renderers compiler {__version__}, verified against transformers {spec.oracle_version}",
        f"Regenerate: {docstring_text(spec.command)}",
        "",
        "Do not edit this file: edit the template or the compiler, then regenerate.",
        '"""',
    ]


def class_docstring(
    facts: TemplateFacts,
    spec: ModuleSpec,
    turn: ProbeFacts | None,
    resumption: object = None,
) -> list[str]:
    arguments = {
        "dict": "dicts (JSON-string arguments are parsed first)",
        "string": "JSON strings (dict arguments are serialised first)",
        "either": "dicts or JSON strings, rendered as given",
    }[facts.tool_arguments]
    knobs = ", ".join(docstring_text(knob) for knob in facts.knobs) if facts.knobs else "none"
    lines = [
        f'    r"""Renders {docstring_text(spec.model_ids[0])} conversations exactly as its chat template does.',
        "",
        f"    Template knobs (constructor keywords): {knobs}.",
        f"    Tool-call arguments: the template consumes {arguments}.",
    ]
    if facts.runtime_special_tokens:
        names = ", ".join(docstring_text(name) for name in facts.runtime_special_tokens)
        lines.append(f"    Special tokens read from the tokenizer (or special_tokens=) when built: {names}.")
    if turn is not None:
        lines += ["", *("    " + line for line in turn.describe())]
    if resumption is not None:
        lines += textwrap.wrap(resumption.describe(), 100, initial_indent="    ", subsequent_indent="    ")
    return lines + ['    """', ""]
