"""``python -m compiler diff OLD NEW``: what a template revision changes in its renderer's behaviour.

Each side is a template file, a generated ``.py`` file, or a model id (its template from the corpus
or our overrides, as ``generate`` finds it). A template or model id is compiled as ``generate``
would (:func:`compiler.pipeline.compile_source`, nothing written); a generated file is loaded as
``verify`` loads it. The two classes are then compared on what a reviewer of the pull request needs
to know (:func:`compare`; :mod:`compiler.diff_report` prints it):

- learned facts (the class constants: turn close and stops, reasoning markers, tool-call syntax,
  knobs, tool-argument form, prefix stability, retention default), changed ones in words, with the
  consequences flagged: a stop that also occurs inside a rendered assistant turn (a rollout stops
  there), a generation prompt that now holds the reasoning open marker, knobs added or removed, ...;
- renders of a fixed set of conversations (:func:`compiler.conversations.fixed_edge_cases`, and an
  assistant turn with reasoning last), before and after;
- a fuzz count: of ``cases`` generated conversations (:func:`compiler.conversations.conversation_cases`),
  how many render other token ids (text, without a real tokenizer), and the smallest of them;
- read-back and bridge: what each class's own sampled turns parse to (``parse_response``), whether
  a rollout cut at the first stop token still parses to the same message, and whether the bridge
  from that rollout to the next user message is exact;
- ripple: other checked-in modules whose behaviour changes with it (generated modules import only
  ``rllm_renderers.compiled``, so none can; a module importing another would be listed).
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .analysis import compared_roles, knob_candidates
from .conversations import Case, ConversationFeatures, drawn_cases, fixed_edge_cases
from .errors import CompileError
from .pipeline import GENERATED_DIR, Prepared, compile_source, load_generated_file, load_renderer_class
from .source import resolve_source
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
DEFAULT_CASES = 100


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
    compiled = compile_source(source)
    renderer_class = load_renderer_class(compiled.code, compiled.spec.module, compiled.spec.class_name)
    return Side(argument, renderer_class, compiled)


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
        return f"tool-call arguments: the template consumes {before} -> {after}", [
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


def comparison_features(old: Side, new: Side) -> ConversationFeatures:
    """What to draw: the template side's roles and knob values (the new side's when both are), with
    every knob of either side."""
    template_side = new if new.prepared is not None else old
    other = old if template_side is new else new
    prepared = template_side.prepared
    if prepared is None:
        candidates, roles, placeholders = {}, (), {}
    else:
        candidates = knob_candidates(prepared.facts.ast, prepared.facts.knobs)
        roles, placeholders = compared_roles(prepared.facts.ast), prepared.placeholders
    features = features_for(template_side.renderer_class, candidates, roles, placeholders)
    extra = tuple((knob, (True, False)) for knob in other.renderer_class.KNOBS if knob not in dict(features.knobs))
    return dataclasses.replace(features, knobs=features.knobs + extra)


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
        renderer = self.instance(side, case.knobs)
        arguments = dict(tools=copy.deepcopy(case.tools), add_generation_prompt=case.add_generation_prompt)
        try:
            if self.tokenizer is not None:
                return renderer.render_ids(copy.deepcopy(case.messages), **arguments)
            return renderer.render_text(copy.deepcopy(case.messages), **arguments)
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


@dataclass
class RenderChange:
    name: str
    case: Case
    old: str
    new: str


def named_cases(features: ConversationFeatures) -> list[tuple[str, Case]]:
    """The fixed conversations, each with a name a reviewer reads, and an assistant turn with
    reasoning as the last message."""
    user = {"role": "user", "content": "What is the weather in Paris?"}
    answer = {"role": "assistant", "content": "It is sunny.", "reasoning_content": "The tool said sunny."}
    cases = fixed_edge_cases(features) + [Case([user, answer], knobs=dict(features.base_knobs))]
    return [(case_name(case, dict(features.base_knobs)), case) for case in cases]


def case_name(case: Case, base_knobs: dict) -> str:
    """What a fixed conversation exercises, in a few words."""
    knobs = {knob: value for knob, value in case.knobs.items() if base_knobs.get(knob, object()) != value}
    if knobs:
        return ", ".join(f"{knob}={value!r}" for knob, value in knobs.items())
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


def render_changes(renderers: Renderers, cases: list[tuple[str, Case]]) -> tuple[list[RenderChange], list[str]]:
    """(the fixed conversations whose render changed, the names of those that did not)."""
    changed, same = [], []
    for name, case in cases:
        old, new = renderers.text(renderers.old, case), renderers.text(renderers.new, case)
        ids_differ = renderers.tokenizer is not None and renderers.output(renderers.old, case) != renderers.output(
            renderers.new, case
        )
        if old != new or ids_differ:
            changed.append(RenderChange(name, case, old, new))
        else:
            same.append(f"{name} (refused by both)" if old.startswith("refused: ") else name)
    return changed, same


@dataclass
class FuzzResult:
    checked: int
    changed: int
    compared: str  # "token ids" or "text"
    smallest: RenderChange | None = None


def fuzz(renderers: Renderers, features: ConversationFeatures, cases: int, seed_value: int) -> FuzzResult:
    """Of ``cases`` generated conversations, how many render differently, and the smallest of them."""
    drawn = drawn_cases(features, cases, seed_value)
    differing = [
        case for case in drawn if renderers.output(renderers.old, case) != renderers.output(renderers.new, case)
    ]
    compared = "token ids" if renderers.tokenizer is not None else "text"
    result = FuzzResult(len(drawn), len(differing), compared)
    if differing:
        smallest = min(differing, key=lambda case: (len(case.describe()), case.describe()))
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


@dataclass
class BehaviourDiff:
    old: Side
    new: Side
    facts: list[FactChange]
    renders: list[RenderChange]
    unchanged_renders: list[str]
    fuzz: FuzzResult
    read_backs: list[ReadBackChange]
    ripple: list[str]
    flags: list[str]  # every consequence flagged, facts' and read-back's

    @property
    def changed(self) -> bool:
        """Whether behaviour changed: a learned fact, a render, a fuzzed conversation or a read-back."""
        read_back_changed = any(
            (change.old.parsed, change.old.stopped, change.old.bridge)
            != (change.new.parsed, change.new.stopped, change.new.bridge)
            for change in self.read_backs
        )
        return bool(self.facts or self.renders or self.fuzz.changed or read_back_changed)


def compare(old: Side, new: Side, *, cases: int = DEFAULT_CASES, seed_value: int = 0) -> BehaviourDiff:
    features = comparison_features(old, new)
    real = new.real_tokenizer if new.real_tokenizer is not None else old.real_tokenizer
    renderers = Renderers(old, new, real)
    facts = fact_changes(old.renderer_class, new.renderer_class)
    changed, same = render_changes(renderers, named_cases(features))
    fuzzed = fuzz(renderers, features, cases, seed_value)
    backs = read_backs(old, new, features)
    flags = [flag for change in facts for flag in change.flags]
    for change in backs:
        if change.new.stop_inside and not change.old.stop_inside:
            flags.append(
                f"stop {change.new.stop_inside!r} also occurs inside a rendered assistant turn ({change.name}): "
                f"a rollout stops there and parses to {change.new.stopped}"
            )
        if change.new.bridge != change.old.bridge:
            flags.append(f"bridge after {change.name}: {change.old.bridge} -> {change.new.bridge}")
    flags += holds_reasoning_open(renderers, features)
    return BehaviourDiff(old, new, facts, changed, same, fuzzed, backs, ripple(), flags)


def holds_reasoning_open(renderers: Renderers, features: ConversationFeatures) -> list[str]:
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
    return flags
