"""``python -m compiler diff OLD NEW``: what a template revision changes in its renderer's behaviour.

Each side is a template file, a generated ``.py`` file, or a model id (its template from the corpus
or our overrides, as ``generate`` finds it). A template or model id is compiled as ``generate``
would (:func:`compiler.pipeline.compile_source`, nothing written); a generated file is loaded as
``verify`` loads it. The two classes are then compared on what a reviewer of the pull request needs
to know (:func:`compare`; :mod:`compiler.diff_report` prints it):

- a summary, causes first, one line per change stated as the template's rule
  (:mod:`compiler.diff_rules`): the clock, the generation prompt under each knob value the template
  tests, the text written for each kind of message and outside them, every changed learned fact
  (class constants: turn close and stops, reasoning markers, tool-call syntax, knobs, ...) and the
  consequences a rollout feels (a stop inside a rendered assistant turn, a bridge that changed);
- renders of probe conversations before and after, accepted by both templates (``content: ""``
  where ``None`` is refused), with the clock frozen so that both sides render the same day;
- a fuzz count: of ``cases`` generated conversations (:func:`compiler.conversations.conversation_cases`),
  how many render other token ids (text, without a real tokenizer), and the smallest changed
  conversation, shrunk and written in readable text (:func:`readable`);
- read-back and bridge: what each class's own sampled turns parse to (``parse_response``), whether
  a rollout cut at the first stop token still parses to the same message, and whether the bridge
  from that rollout to the next user message is exact; what could not be checked is listed as a
  limit of the tool, never as a change;
- ripple: other checked-in modules whose behaviour changes with it (generated modules import only
  ``rllm_renderers.compiled``, so none can; a module importing another would be listed).
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import json
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from rllm_renderers.compiled import jinja

from .analysis import KNOB_GUESSES, compared_roles, knob_candidates
from .conversations import Case, ConversationFeatures, drawn_cases, fixed_edge_cases
from .diff_rules import BETWEEN, ENDING, PREAMBLE, Rule, clock_rule, generation_prompt_rule, part_rules
from .errors import CompileError
from . import pipeline
from .pipeline import GENERATED_DIR, Prepared, compile_source, load_generated_file, load_renderer_class
from .source import resolve_source
from .stability import measure_prefix_stability
from .verify import features_for

#: The class constants that are learned facts, in the order the report gives them.
FACTS = (
    "TURN",
    "REASONING",
    "TOOL_CALLS",
    "UNLEARNED",
    "KNOBS",
    "TOOL_ARGUMENTS",
    "PREFIX_STABLE",
    "DEFAULT_THINKING_RETENTION",
    "ROLES",
    "CONTENT_FORMAT",
    "SPECIAL_TOKENS",
)
DEFAULT_CASES = 40  # generated conversations: the probes carry the summary; drawing is most of the time


@dataclass
class Side:
    """One side of the comparison: a renderer class, and what it was compiled from (if a template)."""

    label: str
    renderer_class: type
    prepared: Prepared | None = None  # None for a generated file (its template is not at hand)

    @property
    def tokenizer(self) -> Any:
        """The tokenizer its parse and bridge are checked with: the real one, else the synthetic one
        carrying the template's markers (None for a generated file: the other side's is used)."""
        return self.prepared.check_tokenizer if self.prepared is not None else None

    @property
    def real_tokenizer(self) -> Any:
        return self.prepared.tokenizer if self.prepared is not None else None

    @property
    def placeholders(self) -> dict[str, str]:
        return dict(self.prepared.placeholders) if self.prepared is not None else {}


def load_side(argument: str, *, model: str | None, corpus: Path | None, tokenizer: Path | None) -> Side:
    """A template file, a generated ``.py`` file, or a model id (see the module docstring)."""
    path = Path(argument)
    if path.suffix == ".py" and path.is_file():
        return Side(argument, load_generated_file(path))
    if path.is_file():
        model_id = model or path.stem.replace("__", "/")
        source = resolve_source(model_id, template=path, tokenizer=tokenizer, corpus=corpus, allow_hub=False)
    elif path.suffix in (".py", ".jinja", ".j2") or path.exists():
        raise CompileError(f"{argument}: not a template or generated file")
    else:
        source = resolve_source(argument, tokenizer=tokenizer, corpus=corpus, allow_hub=False)
    with fewer_stability_cases(), shared_tokenizers():
        compiled = compile_source(source)
    renderer_class = load_renderer_class(compiled.code, compiled.spec.module, compiled.spec.class_name)
    return Side(argument, renderer_class, compiled)


#: Conversations the prefix-stability measure draws while ``diff`` compiles (``generate`` draws
#: :data:`compiler.pipeline.STABILITY_CASES`; the drawing is most of a compile's time). Where the
#: two sides then disagree, the stable one is measured again with the full count (:func:`prefix_stable`).
DIFF_STABILITY_CASES = 30


@contextmanager
def fewer_stability_cases():
    original = pipeline.STABILITY_CASES
    pipeline.STABILITY_CASES = DIFF_STABILITY_CASES
    try:
        yield
    finally:
        pipeline.STABILITY_CASES = original


#: Tokenizers loaded for a side, by folder: two revisions of one model share their tokenizer, and
#: loading it is most of a compile's time after the stability draws.
_TOKENIZERS: dict[str, Any] = {}


@contextmanager
def shared_tokenizers():
    load = pipeline.load_tokenizer_for

    def load_once(source):
        if source.tokenizer_dir is None:
            return None
        key = str(Path(source.tokenizer_dir).resolve())
        if key not in _TOKENIZERS:
            _TOKENIZERS[key] = load(source)
        return _TOKENIZERS[key]

    pipeline.load_tokenizer_for = load_once
    try:
        yield
    finally:
        pipeline.load_tokenizer_for = load


def prefix_stable(side: Side) -> bool:
    """The side's prefix stability measured as ``generate`` measures it (its class constant for a
    generated file, which ``generate`` wrote). Asked of the side that the fewer draws found stable:
    the other side's counterexample is a proof already."""
    if side.prepared is None:
        return side.renderer_class.PREFIX_STABLE
    prepared = side.prepared
    features = features_for(
        side.renderer_class,
        knob_candidates(prepared.facts.ast, prepared.facts.knobs),
        compared_roles(prepared.facts.ast),
        prepared.placeholders,
    )
    renderer = side.renderer_class(prepared.tokenizer, special_tokens=prepared.placeholders, **dict(features.base_knobs))
    return measure_prefix_stability(renderer, features, cases=pipeline.STABILITY_CASES, seed_value=0)[0]


# --- learned facts ----------------------------------------------------------------------


@dataclass
class FactChange:
    name: str
    old: Any
    new: Any
    words: str  # what changed, in words
    flags: list[str] = field(default_factory=list)  # consequences a reviewer must not miss


def fact_changes(old: type, new: type) -> list[FactChange]:
    changes = []
    for name in FACTS:
        before, after = getattr(old, name, None), getattr(new, name, None)
        if before != after:
            changes.append(FactChange(name, before, after, *describe_change(name, before, after)))
    return changes


def describe_change(name: str, before: Any, after: Any) -> tuple[str, list[str]]:
    """(the change in words, flagged consequences) for one class constant."""
    if name == "TURN":
        old_stops = set(getattr(before, "stop_tokens", ()) or ())
        new_stops = set(getattr(after, "stop_tokens", ()) or ())
        flags = []
        if new_stops - old_stops:
            flags.append("stop tokens added: " + ", ".join(map(repr, sorted(new_stops - old_stops))))
        if old_stops - new_stops:
            flags.append("stop tokens removed: " + ", ".join(map(repr, sorted(old_stops - new_stops))))
        return record_change(before, after), flags
    if name in ("REASONING", "TOOL_CALLS"):
        return record_change(before, after), []
    if name == "KNOBS":
        added, removed = sorted(set(after) - set(before)), sorted(set(before) - set(after))
        flags = [f"knob added: {knob} (callers may now pass it)" for knob in added]
        flags += [f"knob removed: {knob} (a caller passing it now gets ValueError)" for knob in removed]
        return f"knobs {list(before)} -> {list(after)}", flags
    if name == "TOOL_ARGUMENTS":
        return f"the template consumes {before} -> {after}", [
            f"tool-argument form changed ({before} -> {after}): renders of tool calls change"
        ]
    if name == "PREFIX_STABLE":
        flag = "no longer prefix-stable: the bridge returns None more often" if before and not after else ""
        return f"prefix-stable {before} -> {after}", [flag] if flag else []
    if name == "DEFAULT_THINKING_RETENTION":
        return f"default thinking retention {before!r} -> {after!r}", [f"retention default changed to {after!r}"]
    if name == "UNLEARNED":
        return f"not learned: {before!r} -> {after!r}", (
            ["a turn fact is no longer learned"] if set(after or {}) - set(before or {}) else []
        )
    return f"{name.lower()}: {before!r} -> {after!r}", []


def record_change(before: Any, after: Any) -> str:
    """The fields of a format record that changed (``close '<|return|>' -> '<|end|>'``), or the
    whole record when it appears or goes."""
    if before is None or after is None or type(before) is not type(after):
        return f"{before!r} -> {after!r}"
    return "; ".join(
        f"{item.name} {getattr(before, item.name)!r} -> {getattr(after, item.name)!r}"
        for item in dataclasses.fields(before)
        if getattr(before, item.name) != getattr(after, item.name)
    )


# --- the renders ------------------------------------------------------------------------------


def tested_knob_values(ast: Any, knobs: tuple[str, ...]) -> dict[str, tuple]:
    """Per knob, the values the template tells apart: the constants it compares the knob with, and
    True and False where it tests the knob itself (``{% if enable_thinking %}``). Generic guesses
    (``'custom value'``, ``[]``) would only add renders that say nothing."""
    from jinja2 import nodes

    compared = knob_candidates(ast, knobs)
    values: dict[str, list] = {knob: [value for value in compared[knob] if not guessed(value)] for knob in knobs}
    for test in [node.test for node in ast.find_all((nodes.If, nodes.CondExpr))]:
        for name in truth_tested(test):
            if name in values:
                values[name] += [flag for flag in (True, False) if flag not in values[name]]
    return {knob: tuple(found) for knob, found in values.items()}


def guessed(value: Any) -> bool:
    """Whether ``value`` is one of :data:`compiler.analysis.KNOB_GUESSES` (of its type: 1 is no True)."""
    return any(type(value) is type(guess) and value == guess for guess in KNOB_GUESSES)


def truth_tested(test: Any) -> list[str]:
    """The names whose truth ``test`` decides on: ``knob``, ``not knob``, ``knob is false``,
    ``knob and ...`` (``knob is defined`` or ``knob == 'x'`` test something else)."""
    from jinja2 import nodes

    if isinstance(test, nodes.Name):
        return [test.name]
    if isinstance(test, nodes.Not):
        return truth_tested(test.node)
    if isinstance(test, (nodes.And, nodes.Or)):
        return truth_tested(test.left) + truth_tested(test.right)
    if isinstance(test, nodes.Test) and test.name in ("true", "false", "boolean") and isinstance(test.node, nodes.Name):
        return [test.node.name]  # `knob is false`
    return []


def comparison_features(old: Side, new: Side) -> ConversationFeatures:
    """What to draw: the template side's roles and the knob values its template tests (the new
    side's when both are templates), with every knob of either side."""
    template_side = new if new.prepared is not None else old
    other = old if template_side is new else new
    prepared = template_side.prepared
    if prepared is None:
        candidates, roles, placeholders = {}, (), {}
    else:
        candidates = tested_knob_values(prepared.facts.ast, prepared.facts.knobs)
        roles, placeholders = compared_roles(prepared.facts.ast), prepared.placeholders
    features = features_for(template_side.renderer_class, candidates, roles, placeholders)
    if other.prepared is not None:  # the knobs only the other side has, with the values its template tests
        theirs = tested_knob_values(other.prepared.facts.ast, other.prepared.facts.knobs)
    else:
        theirs = {knob: (True, False) for knob in other.renderer_class.KNOBS}
    extra = tuple((knob, theirs[knob]) for knob in other.renderer_class.KNOBS if knob not in dict(features.knobs))
    return dataclasses.replace(features, knobs=features.knobs + extra)


#: The date the clock shows while both sides render (renders that read it stay comparable and the
#: report the same from day to day); :func:`reads_clock` tries a second one.
FROZEN_DATE = datetime(2025, 3, 14, 9, 30)
OTHER_DATE = datetime(2026, 11, 2, 18, 5)


@contextmanager
def clock_at(moment: datetime):
    """``strftime_now`` (what generated code calls for the date) answers ``moment``."""
    original = jinja.strftime_now
    jinja.strftime_now = moment.strftime
    try:
        yield
    finally:
        jinja.strftime_now = original


@dataclass
class Renderers:
    """Instances of both classes per knob setting (each gets only the knobs it has)."""

    old: Side
    new: Side
    tokenizer: Any  # a real tokenizer both sides are compared with, or None (text only)
    _built: dict = field(default_factory=dict)

    def instance(self, side: Side, knobs: dict) -> Any:
        own = {knob: value for knob, value in knobs.items() if knob in side.renderer_class.KNOBS}
        key = (id(side), json.dumps(own, sort_keys=True, default=repr))
        if key not in self._built:
            placeholders = side.placeholders or (self.new if side is self.old else self.old).placeholders
            self._built[key] = side.renderer_class(self.tokenizer, special_tokens=placeholders, **own)
        return self._built[key]

    def output(self, side: Side, case: Case) -> str | list[int]:
        """The case's token ids (text without a tokenizer), or ``refused: <reason>``."""
        if self.tokenizer is None:
            return self.text(side, case)
        renderer = self.instance(side, case.knobs)
        try:
            return renderer.render_ids(
                copy.deepcopy(case.messages),
                tools=copy.deepcopy(case.tools),
                add_generation_prompt=case.add_generation_prompt,
            )
        except ValueError as exc:
            return f"refused: {exc}"

    def text(self, side: Side, case: Case) -> str:
        renderer = self.instance(side, case.knobs)
        try:
            return renderer.render_text(
                copy.deepcopy(case.messages),
                tools=copy.deepcopy(case.tools),
                add_generation_prompt=case.add_generation_prompt,
            )
        except ValueError as exc:
            return f"refused: {exc}"

    def differs(self, case: Case) -> bool:
        """Both sides render ``case``, to other ids (text without a tokenizer)."""
        old, new = self.output(self.old, case), self.output(self.new, case)
        refused = any(isinstance(output, str) and output.startswith("refused: ") for output in (old, new))
        return not refused and old != new

    def parts(self, side: Side, case: Case) -> dict:
        """The text written for each message (by index) and outside them (:data:`diff_rules.PART_NAMES`
        keys): what the template writes where, attributed as the renderer attributes its tokens."""
        renderer = self.instance(side, case.knobs)
        try:
            out = renderer._render_output(copy.deepcopy(case.messages), copy.deepcopy(case.tools), case.add_generation_prompt)
        except ValueError:
            return {}
        text, starts = out.text(), out.part_starts()
        spans = out.attributed_spans(starts)
        parts: dict = {}
        seen_message = False
        for position, (start, index) in enumerate(spans):
            end = spans[position + 1][0] if position + 1 < len(spans) else len(text)
            if index >= 0:
                seen_message = True
                key: Any = index
            elif not seen_message:
                key = PREAMBLE
            elif any(later >= 0 for _, later in spans[position + 1 :]):
                key = BETWEEN
            else:
                key = ENDING
            parts[key] = parts.get(key, "") + text[start:end]
        return parts


@dataclass
class RenderChange:
    name: str
    case: Case
    old: str
    new: str


QUESTION = {"role": "user", "content": "What is the weather in Paris?"}
ANSWER = {"role": "assistant", "content": "It is sunny.", "reasoning_content": "The tool said sunny."}
THANKS = {"role": "user", "content": "Thanks."}


def named_cases(features: ConversationFeatures) -> list[tuple[str, Case]]:
    """The probe conversations, each with a name a reviewer reads: the fixed ones, an assistant turn
    with reasoning last, and per knob value a conversation with history and the generation prompt
    (what a rollout renders)."""
    base = dict(features.base_knobs)
    fixed = fixed_edge_cases(dataclasses.replace(features, knobs=()))
    cases = [(case_name(case, base), case) for case in fixed]
    cases.append(("reasoning last", Case([copy.deepcopy(QUESTION), copy.deepcopy(ANSWER)], knobs=dict(base))))
    history = [copy.deepcopy(QUESTION), copy.deepcopy(ANSWER), copy.deepcopy(THANKS)]
    for knob, values in features.knobs:
        for value in values:
            case = Case(copy.deepcopy(history), add_generation_prompt=True, knobs={**base, knob: value})
            cases.append((f"{knob}={value!r}, history and generation prompt", case))
    return cases


def case_name(case: Case, base_knobs: dict) -> str:
    """What a fixed conversation exercises, in a few words."""
    roles = [message["role"] for message in case.messages]
    calls = max((len(message.get("tool_calls") or []) for message in case.messages), default=0)
    if calls > 1:
        return "parallel calls"
    if calls == 1:
        return "tool call and result"
    if "system" in roles:
        return "system"
    if all(not message.get("content") for message in case.messages):
        return "empty turns"
    if roles[-1] == "assistant":
        return "reasoning last" if case.messages[-1].get("reasoning_content") else "answer last"
    if "assistant" in roles:
        return "reasoning in history"
    return "chat, generation prompt" if case.add_generation_prompt else "chat"


def accepted_by_both(renderers: Renderers, case: Case) -> Case:
    """``case``, or with ``content: ""`` for a ``content: None`` that a side refuses (several
    templates refuse None beside tool calls: the probe would compare two refusals)."""
    if not any(refused(renderers.text(side, case)) for side in (renderers.old, renderers.new)):
        return case
    messages = [
        {**message, "content": ""} if "content" in message and message["content"] is None else message
        for message in case.messages
    ]
    return dataclasses.replace(case, messages=messages) if messages != case.messages else case


def refused(text: str) -> bool:
    return text.startswith("refused: ")


def render_changes(renderers: Renderers, cases: list[tuple[str, Case]]) -> tuple[list[RenderChange], list[str]]:
    """(the probe conversations whose render changed, the names of those that did not)."""
    changed, same = [], []
    for name, case in cases:
        case = accepted_by_both(renderers, case)
        old, new = renderers.text(renderers.old, case), renderers.text(renderers.new, case)
        ids_differ = renderers.tokenizer is not None and renderers.output(renderers.old, case) != renderers.output(
            renderers.new, case
        )
        if refused(old) and refused(new):  # (the messages name each side's class)
            same.append(f"{name} (refused by both)")
        elif old != new or ids_differ:
            changed.append(RenderChange(name, case, old, new))
        else:
            same.append(f"{name} (refused by both)" if refused(old) else name)
    return changed, same


def generation_prompts(renderers: Renderers, features: ConversationFeatures) -> list[Rule]:
    """What ``add_generation_prompt`` appends after a user message, per side, with the default knobs
    and each knob value the template tests."""
    base = dict(features.base_knobs)
    settings = [("", base)] + [(f"{knob}={value!r}", {**base, knob: value}) for knob, values in features.knobs for value in values]
    rules: list[Rule] = []
    seen: list[list] = []
    for words, knobs in settings:
        prompts = []
        for side in (renderers.old, renderers.new):
            without = renderers.text(side, Case([copy.deepcopy(QUESTION)], knobs=knobs))
            with_prompt = renderers.text(side, Case([copy.deepcopy(QUESTION)], add_generation_prompt=True, knobs=knobs))
            ok = not refused(without) and not refused(with_prompt) and with_prompt.startswith(without)
            prompts.append(with_prompt[len(without) :] if ok else None)
        if prompts in seen:  # the same change as with the defaults (or another value)
            continue
        seen.append(prompts)
        rule = generation_prompt_rule(*prompts, setting=words)
        if rule is not None:
            rules.append(rule)
    return rules


def reads_clock(renderers: Renderers, side: Side, case: Case) -> bool:
    """Whether ``side`` renders ``case`` differently on another day."""
    with clock_at(OTHER_DATE):
        other_day = renderers.text(side, case)
    return other_day != renderers.text(side, case)


@dataclass
class FuzzResult:
    checked: int
    changed: int
    compared: str  # "token ids" or "text"
    smallest: RenderChange | None = None


#: Realistic text that replaces drawn text when the smallest changed conversation is made readable.
READABLE_TEXT = {
    "system": "You are terse.",
    "user": "What is the weather in Paris?",
    "assistant": "It is sunny.",
    "tool": "sunny",
}


def readable(case: Case, differs) -> Case:
    """A smaller conversation that still changes, made of text a person reads: drawn text replaced
    by :data:`READABLE_TEXT`, then messages, tools and the generation prompt left out one at a time
    while the render still changes (``differs(case)``)."""
    messages = copy.deepcopy(case.messages)
    for message in messages:
        if isinstance(message.get("content"), str):
            message["content"] = READABLE_TEXT.get(message.get("role"), "Hello")
        if isinstance(message.get("reasoning_content"), str) and message["reasoning_content"]:
            message["reasoning_content"] = ANSWER["reasoning_content"]
    best = dataclasses.replace(case, messages=messages)
    if not differs(best):
        best = case
    shrinking = True
    while shrinking:
        shrinking = False
        candidates = [
            dataclasses.replace(best, messages=best.messages[:index] + best.messages[index + 1 :])
            for index in range(len(best.messages))
            if len(best.messages) > 1
        ]
        if best.tools:
            candidates.append(dataclasses.replace(best, tools=None))
        if best.add_generation_prompt:
            candidates.append(dataclasses.replace(best, add_generation_prompt=False))
        for candidate in candidates:
            if differs(candidate):
                best, shrinking = candidate, True
                break
    return best


def fuzz(
    renderers: Renderers, features: ConversationFeatures, cases: int, seed_value: int, probes: list[RenderChange]
) -> FuzzResult:
    """Of ``cases`` generated conversations, how many render differently; the smallest changed
    conversation (of those and the probes), made readable (:func:`readable`)."""
    drawn = drawn_cases(features, cases, seed_value) if cases else []
    differing = [
        case for case in drawn if renderers.output(renderers.old, case) != renderers.output(renderers.new, case)
    ]
    compared = "token ids" if renderers.tokenizer is not None else "text"
    result = FuzzResult(len(drawn), len(differing), compared)
    candidates = [change.case for change in probes if renderers.differs(change.case)]
    candidates += [case for case in differing if renderers.differs(case)]
    if candidates:
        smallest = min(candidates, key=lambda case: (len(case.describe()), case.describe()))
        smallest = readable(smallest, renderers.differs)
        result.smallest = RenderChange(
            "smallest", smallest, renderers.text(renderers.old, smallest), renderers.text(renderers.new, smallest)
        )
    return result


# --- read-back and bridge ---------------------------------------------------------------------


@dataclass
class ReadBack:
    """One sampled turn of one side: what it parses to, whole and cut at the first stop, and the bridge."""

    parsed: str  # the whole sampled turn, parsed
    stopped: str  # the rollout cut at its first stop token, parsed ("" when it is the same turn)
    stop_inside: str | None  # the stop token that cuts the turn before its end, if any
    bridge: str  # "exact", "None (re-render)", "wrong" or why it was not checked


def sampled_turns(features: ConversationFeatures) -> list[tuple[str, list[dict] | None, dict]]:
    call = {"id": "call00001", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
    if features.arguments_form == "string":
        call["function"]["arguments"] = json.dumps(call["function"]["arguments"])
    params = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    tools = [
        {"type": "function", "function": {"name": "get_weather", "description": "Look it up.", "parameters": params}}
    ]
    turns = [
        ("answer", None, {"role": "assistant", "content": "It is sunny."}),
        (
            "reasoning and answer",
            None,
            {"role": "assistant", "content": "It is sunny.", "reasoning_content": "Sunny, says the tool."},
        ),
    ]
    if features.tool_calls:
        turns.append(("tool call", tools, {"role": "assistant", "content": "", "tool_calls": [call]}))
    return turns


def parsed_summary(parsed: Any) -> str:
    calls = [
        f"{call.name}({json.dumps(call.arguments, sort_keys=True) if not isinstance(call.arguments, str) else call.arguments}) [{call.status.value if hasattr(call.status, 'value') else call.status}]"
        for call in parsed.tool_calls
    ]
    parts = [f"content={parsed.content!r}", f"reasoning={parsed.reasoning_content!r}"]
    if calls:
        parts.append("calls=" + ", ".join(calls))
    return " ".join(parts)


def read_back(
    side: Side, tokenizer: Any, placeholders: dict, tools: list[dict] | None, turn: dict, knobs: dict
) -> ReadBack:
    if tokenizer is None:
        return ReadBack("not checked (no tokenizer)", "", None, "not checked")
    own = {knob: value for knob, value in knobs.items() if knob in side.renderer_class.KNOBS}
    renderer = side.renderer_class(tokenizer, special_tokens=placeholders, **own)
    user = {"role": "user", "content": "What is the weather in Paris?"}
    try:
        prompt = renderer.render_ids([user], tools=copy.deepcopy(tools), add_generation_prompt=True)
        full = renderer.render_ids([user, turn], tools=copy.deepcopy(tools))
    except ValueError as exc:
        return ReadBack(f"refused: {exc}", "", None, "not checked")
    if full[: len(prompt)] != prompt:
        return ReadBack("not checked (the turn does not extend the generation prompt)", "", None, "not checked")
    completion = full[len(prompt) :]
    parsed = parsed_summary(renderer.parse_response(completion, tools=tools))
    stops = set(renderer.get_stop_token_ids())
    cut = next((index + 1 for index, token in enumerate(completion) if token in stops), len(completion))
    rollout = completion[:cut]
    stop_inside = None
    stopped = ""
    after_close = renderer.TURN.after_close if renderer.TURN is not None else ""
    if cut < len(completion) and renderer.decode(completion[cut:]) not in ("", after_close):
        stop_inside = renderer.decode([completion[cut - 1]])
        stopped = parsed_summary(renderer.parse_response(rollout, tools=tools))
    next_user = {"role": "user", "content": "Thanks."}
    try:
        bridged = renderer.bridge_to_next_turn(prompt, rollout, [next_user], tools=copy.deepcopy(tools))
        expected = renderer.render_ids([user, turn, next_user], tools=copy.deepcopy(tools), add_generation_prompt=True)
    except ValueError as exc:
        return ReadBack(parsed, stopped, stop_inside, f"refused: {exc}")
    if bridged is None:
        bridge = "None (re-render)"
    elif bridged.token_ids == expected:
        bridge = "exact"
    elif bridged.token_ids[: len(prompt) + len(rollout)] != prompt + rollout:
        bridge = "wrong (does not start with the prompt and the rollout)"
    else:
        bridge = "differs from the full render (the rollout was cut before the turn's end)"
    return ReadBack(parsed, stopped, stop_inside, bridge)


@dataclass
class ReadBackChange:
    name: str
    old: ReadBack
    new: ReadBack


def read_backs(old: Side, new: Side, features: ConversationFeatures) -> list[ReadBackChange]:
    knobs = dict(features.base_knobs)
    results = []
    for name, tools, turn in sampled_turns(features):
        sides = []
        for side, other in ((old, new), (new, old)):
            tokenizer = side.tokenizer if side.tokenizer is not None else other.tokenizer
            placeholders = side.placeholders or other.placeholders
            sides.append(read_back(side, tokenizer, placeholders, tools, copy.deepcopy(turn), knobs))
        results.append(ReadBackChange(name, *sides))
    return results


# --- ripple -----------------------------------------------------------------------------------


def ripple(folder: Path = GENERATED_DIR) -> list[str]:
    """Checked-in modules importing another generated module (whose change would change theirs):
    ``module: imports X``. Empty when every module imports only ``rllm_renderers.compiled``."""
    found = []
    for path in sorted(folder.glob("*.py")):
        if path.name.startswith("_"):
            continue
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ImportFrom) and (node.level or "generated" in (node.module or "")):
                found.append(f"{path.stem}: imports {'.' * node.level}{node.module or ''}")
    return found


# --- the whole comparison ---------------------------------------------------------------------

#: What each learned fact is called in the summary.
FACT_NAMES = {
    "TURN": "turn format",
    "REASONING": "reasoning markers",
    "TOOL_CALLS": "tool-call syntax",
    "UNLEARNED": "facts not learned",
    "KNOBS": "knobs",
    "TOOL_ARGUMENTS": "tool-call arguments",
    "PREFIX_STABLE": "prefix stability",
    "DEFAULT_THINKING_RETENTION": "thinking retention",
    "ROLES": "roles",
    "CONTENT_FORMAT": "content format",
    "SPECIAL_TOKENS": "special tokens",
}
FACT_WORDS = 240  # a changed record is cut here in the summary (the learned-facts section has it whole)


def fact_rule(change: FactChange) -> Rule:
    """A changed learned fact, always flagged: parse, stops and bridge follow these facts."""
    words = "; ".join([change.words, *change.flags]) if change.name != "KNOBS" else "; ".join(change.flags)
    if len(words) > FACT_WORDS:
        words = words[: FACT_WORDS - 1] + "…"
    return Rule(f"{FACT_NAMES.get(change.name, change.name)} ({change.name}): {words}", True)


def is_limit(result: str) -> bool:
    """A read-back or bridge result that says what the tool could not check, not what the renderer does."""
    return result.startswith(("not checked", "refused"))


@dataclass
class BehaviourDiff:
    old: Side
    new: Side
    summary: list[Rule]  # the behavioural changes as the template's rules, causes first
    facts: list[FactChange]
    renders: list[RenderChange]
    unchanged_renders: list[str]
    fuzz: FuzzResult
    read_backs: list[ReadBackChange]
    ripple: list[str]
    limits: list[str]  # what could not be checked (never a change)

    @property
    def changed(self) -> bool:
        """Whether behaviour changed: a learned fact, a render, a fuzzed conversation or a read-back."""
        read_back_changed = any(
            not is_limit(change.old.bridge) and not is_limit(change.new.bridge)
            and (change.old.parsed, change.old.stopped, change.old.bridge)
            != (change.new.parsed, change.new.stopped, change.new.bridge)
            for change in self.read_backs
        )
        return bool(self.facts or self.renders or self.fuzz.changed or read_back_changed or self.summary)

    @property
    def flags(self) -> list[str]:
        return [rule.text for rule in self.summary if rule.flagged]


def compare(old: Side, new: Side, *, cases: int = DEFAULT_CASES, seed_value: int = 0) -> BehaviourDiff:
    with clock_at(FROZEN_DATE):
        return _compare(old, new, cases, seed_value)


def _compare(old: Side, new: Side, cases: int, seed_value: int) -> BehaviourDiff:
    features = comparison_features(old, new)
    real = new.real_tokenizer if new.real_tokenizer is not None else old.real_tokenizer
    renderers = Renderers(old, new, real)
    facts = fact_changes(old.renderer_class, new.renderer_class)
    if any(change.name == "PREFIX_STABLE" for change in facts) and not prefix_stable(old if old.renderer_class.PREFIX_STABLE else new):
        facts = [change for change in facts if change.name != "PREFIX_STABLE"]  # (fewer draws told them apart)
    changed, same = render_changes(renderers, named_cases(features))
    fuzzed = fuzz(renderers, features, cases, seed_value, changed)
    backs = read_backs(old, new, features)

    chat = Case([copy.deepcopy(QUESTION)], knobs=dict(features.base_knobs))
    clock = clock_rule(reads_clock(renderers, old, chat), reads_clock(renderers, new, chat), f"{FROZEN_DATE:%d %b %Y}")
    summary = [clock] if clock else []
    summary += generation_prompts(renderers, features)
    summary += holds_reasoning_open(renderers, features)
    probes = [change.case for change in changed] + ([fuzzed.smallest.case] if fuzzed.smallest is not None else [])
    clocked = clock is not None
    parts = []
    for case in probes:
        sides = [renderers.parts(old, case), renderers.parts(new, case)]
        if not all(sides):  # a side refuses it
            continue
        if clocked:  # the date is named once, not again in every part that holds it
            sides = without_clock(renderers, case, *sides)
        for side_parts in sides:  # the generation prompt has its own line
            side_parts.pop(ENDING, None)
        parts.append((case.messages, *sides))
    summary += part_rules(parts)
    summary += [fact_rule(change) for change in facts]
    limits = []
    for change in backs:
        if change.new.stop_inside and not change.old.stop_inside:
            summary.append(Rule(
                f"stop {change.new.stop_inside!r} also occurs inside a rendered assistant turn ({change.name}): "
                f"a rollout stops there and parses to {change.new.stopped}", True
            ))
        checked = not is_limit(change.old.bridge) and not is_limit(change.new.bridge)
        if change.new.bridge != change.old.bridge and checked:
            summary.append(Rule(f"bridge after {change.name}: {change.old.bridge} -> {change.new.bridge}", True))
        limits += [
            f"{change.name}, {label}: {side.parsed if is_limit(side.parsed) else 'bridge ' + side.bridge}"
            for label, side in (("before", change.old), ("after", change.new))
            if is_limit(side.bridge)
        ]
    if not summary and (changed or fuzzed.changed):
        summary.append(Rule("renders change (see the evidence): no rule the summary knows names it"))
    return BehaviourDiff(old, new, summary, facts, changed, same, fuzzed, backs, ripple(), limits)


def without_clock(renderers: Renderers, case: Case, old: dict, new: dict) -> list[dict]:
    """The parts of a conversation's render, less those that hold the date on either side."""
    with clock_at(OTHER_DATE):
        other_day = [renderers.parts(renderers.old, case), renderers.parts(renderers.new, case)]
    dated = {key for now, then in zip((old, new), other_day) for key in now if now.get(key) != then.get(key)}
    return [{key: text for key, text in side.items() if key not in dated} for side in (old, new)]


def holds_reasoning_open(renderers: Renderers, features: ConversationFeatures) -> list[Rule]:
    """Flags for the reasoning markers against the assistant header (the generation prompt): the
    prompt now ends holding the open marker (the model no longer samples it), or no longer does; the
    open marker now holds the header (the parser expects the header inside the sampled turn)."""
    case = Case([{"role": "user", "content": "Hello"}], knobs=dict(features.base_knobs))
    prompting = dataclasses.replace(case, add_generation_prompt=True)
    prompt_holds, marker_holds = [], []
    for side in (renderers.old, renderers.new):
        reasoning = side.renderer_class.REASONING
        header = renderers.text(side, prompting)[len(renderers.text(side, case)) :]
        opening = reasoning.open if reasoning is not None else ""
        prompt_holds.append(bool(opening and opening in header))
        marker_holds.append(bool(opening and header.strip() and header.strip() in opening))
    flags = []
    if prompt_holds == [False, True]:
        flags.append("the generation prompt now holds the reasoning open marker: the model no longer samples it")
    if prompt_holds == [True, False]:
        flags.append("the generation prompt no longer holds the reasoning open marker: the model now samples it")
    if marker_holds == [False, True]:
        flags.append("the reasoning open marker now holds the assistant header")
    return [Rule(flag, True) for flag in flags]
