"""Assemble a generated renderer module and format it with black.

Output is deterministic: the same template, facts and compiler version give the
same bytes (no timestamps, sorted iteration, black pinned in pyproject.toml).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

import black

from . import __version__
from .analysis import TemplateFacts
from .probes import ProbeFacts
from .translate import RESERVED_NAMES, TemplateNames, Translator

BLACK_MODE = black.Mode(
    target_versions={black.TargetVersion.PY310},
    line_length=100,
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


def emit_module(facts: TemplateFacts, spec: ModuleSpec, turn: ProbeFacts | None = None) -> str:
    """The full text of ``generated/<module>.py``, black-formatted.

    ``turn`` carries what probing the first-pass class learned about assistant turns
    (see :mod:`compiler.probes`); without it the class can render but not parse or bridge.
    """
    names = TemplateNames(
        knobs={knob: knob_local(knob) for knob in facts.knobs + facts.runtime_special_tokens + facts.undefined_names},
        special_tokens={variable: constant_name(variable) for variable in facts.special_tokens},
    )
    translator = Translator(facts.name, names, indent=2)
    body = translator.translate_template(facts.ast)

    lines: list[str] = []
    lines += header_docstring(facts, spec)
    lines += [
        "",
        "from rllm_renderers import template_runtime as jinja",
        "from rllm_renderers.base import GeneratedRenderer",
        "from rllm_renderers.formats import ReasoningFormat, ToolCallFormat, TurnFormat",
        "",
    ]
    for variable, value in sorted(facts.special_tokens.items()):
        lines.append(f"{constant_name(variable)} = {value!r}")
    lines += ["", ""]
    lines.append(f"class {spec.class_name}(GeneratedRenderer):")
    lines += class_docstring(facts, spec, turn)
    lines.append(f"    MODEL_IDS = {tuple(spec.model_ids)!r}")
    lines.append(f"    TEMPLATE_SHA256 = {facts.sha256!r}")
    lines.append(f"    KNOBS = {tuple(facts.knobs)!r}")
    special = [f"{variable!r}: {constant_name(variable)}" for variable in sorted(facts.special_tokens)]
    # None: read from the tokenizer the class is built with (or its special_tokens= argument)
    special += [f"{variable!r}: None" for variable in facts.runtime_special_tokens]
    lines.append(f"    SPECIAL_TOKENS = {{{', '.join(special)}}}")
    lines.append(f"    ROLES = {tuple(facts.roles)!r}")
    lines.append(f"    TOOL_ARGUMENTS = {facts.tool_arguments!r}")
    if turn is not None:
        lines.append(f"    TURN = {dataclass_literal(turn.turn)}")
        if turn.unlearned:
            lines.append(f"    UNLEARNED = {dict(turn.unlearned)!r}")
        lines.append(f"    REASONING = {dataclass_literal(turn.reasoning)}")
        lines.append(f"    TOOL_CALLS = {dataclass_literal(turn.tool_calls)}")
        lines.append(f"    PREFIX_STABLE = {turn.prefix_stable!r}")
        # what bridge_to_next_turn does when the template would rewrite the sampled turn
        lines.append('    DEFAULT_THINKING_RETENTION = "template"')
    lines.append("")
    lines.append("    def render_template(self, out, messages, tools, documents, add_generation_prompt):")
    lines.append('        """The chat template, statement by statement (``# L<n>`` is its line)."""')
    for knob in facts.knobs:
        lines.append(f"        {knob_local(knob)} = self.knobs[{knob!r}]")
    for variable in facts.runtime_special_tokens:
        lines.append(f"        {knob_local(variable)} = self.special_tokens[{variable!r}]")
    for variable in facts.undefined_names:
        lines.append(f"        # apply_chat_template never passes {variable} to the template")
        lines.append(f"        {knob_local(variable)} = jinja.Undefined({variable!r})")
    lines += body
    for method in translator.methods:
        lines += ["", *method]
    source = "\n".join(lines) + "\n"
    return black.format_str(source, mode=BLACK_MODE)


def header_docstring(facts: TemplateFacts, spec: ModuleSpec) -> list[str]:
    return [
        f'"""{spec.class_name[: -len("Renderer")]} renderer, compiled from a Jinja chat template.',
        "",
        f"Models: {', '.join(spec.model_ids)}",
        f"Template: {facts.name} (sha256 {facts.sha256})",
        f"Compiled by: rllm-renderers compiler {__version__}, verified against transformers {spec.oracle_version}",
        f"Regenerate: {spec.command}",
        "",
        "Do not edit this file: edit the template or the compiler, then regenerate.",
        '"""',
    ]


def class_docstring(facts: TemplateFacts, spec: ModuleSpec, turn: ProbeFacts | None) -> list[str]:
    arguments = {
        "dict": "dicts (JSON-string arguments are parsed first)",
        "string": "JSON strings (dict arguments are serialised first)",
        "either": "dicts or JSON strings, rendered as given",
    }[facts.tool_arguments]
    knobs = ", ".join(facts.knobs) if facts.knobs else "none"
    lines = [
        f'    r"""Renders {spec.model_ids[0]} conversations exactly as its chat template does.',
        "",
        f"    Template knobs (constructor keywords): {knobs}.",
        f"    Tool-call arguments: the template consumes {arguments}.",
    ]
    if facts.runtime_special_tokens:
        names = ", ".join(facts.runtime_special_tokens)
        lines.append(f"    Special tokens read from the tokenizer (or special_tokens=) when built: {names}.")
    if turn is not None:
        lines += ["", *("    " + line for line in turn.describe())]
    return lines + ['    """', ""]
