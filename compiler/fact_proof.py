"""Proof of the turn facts a class learned: its stops and its parse, on the template's own renders.

A render is proven by comparing it with the template; a *learned fact* (the stops, the turn's
close, the reasoning markers, the tool-call syntax) is proven here by using it the way an
engine does. For every knob value the class accepts, each sample assistant turn (a plain answer,
a reasoned one, one call, parallel calls, string values holding quotes, backslashes and the
template's own markers) is rendered by the template after the generation prompt, as the model
would sample it; then

* **stops**: the completion is cut at its first stop. No stop may occur inside the turn before
  its end (the text after the cut may only be the template's whitespace), and a stop must end
  the turn a round later too: not text the template takes from a variable (a round counter);
* **read-back**: ``parse_response`` of the cut completion must give back the message it was
  rendered from: its content, its reasoning and its calls (where the template renders them).

A fact that fails is reported with the reason; ``generate`` then ships it as UNLEARNED (see
:mod:`compiler.pipeline`), and ``verify`` fails a checked-in class that claims it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

from .probe_shapes import shaped
from .probes import after_prompt, as_text_parts
from .sampled_turns import mask_problem, parsed_runs, sampled_runs
from .turn_sampling import THOUGHT, after_prefill, reasoned_turn

USER = {"role": "user", "content": "What is up?"}
WEATHER, TIME = "get_weather", "get_time"
#: A string value the parse must give back whole: quotes, a backslash, a newline.
TRICKY = 'say "hi", it\'s C:\\new\nok'
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": "A sample tool.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "n": {"type": "integer"}}},
        },
    }
    for name in (WEATHER, TIME)
]


def _call(name: str, arguments: dict, number: int) -> dict:
    return {"id": f"call{number:05d}x", "type": "function", "function": {"name": name, "arguments": arguments}}


def sample_turns(markers: Iterable[str] = ()) -> dict[str, dict]:
    """The assistant turns read back, by label; ``markers`` (the template's own, not stops) go
    inside a string argument, where a parse must not take them for syntax."""
    turns = {
        "plain": {"role": "assistant", "content": "Fine, see [1] and (2)."},
        "reasoning": {"role": "assistant", "content": "It is 4.", "reasoning_content": "Two and two."},
        "one call": {"role": "assistant", "content": "", "tool_calls": [_call(WEATHER, {"city": "Paris", "n": 3}, 1)]},
        "parallel calls": {
            "role": "assistant",
            "content": "",
            "tool_calls": [_call(WEATHER, {"city": "Paris"}, 1), _call(TIME, {"city": "Rome", "n": 2}, 2)],
        },
        "quoted string": {"role": "assistant", "content": "", "tool_calls": [_call(WEATHER, {"city": TRICKY}, 1)]},
    }
    marked = "".join(sorted(set(markers)))
    if marked:
        value = f"a {marked} b"
        turns["markers in a string"] = {
            "role": "assistant",
            "content": "",
            "tool_calls": [_call(WEATHER, {"city": value}, 1)],
        }
    return turns


def follower(turn: dict) -> dict:
    """The message after ``turn``: the tool result of its first call, else a user message."""
    if turn.get("tool_calls"):
        return {"role": "tool", "content": "sunny", "tool_call_id": turn["tool_calls"][0]["id"]}
    return {"role": "user", "content": "ok"}


@dataclass
class FactProof:
    """Counts of what was checked, and the facts that failed (fact -> reason)."""

    checked: int = 0  # turns read back
    exact: int = 0  # of those, given back exactly
    skipped: int = 0  # turns no model samples after the prompt (the template writes them otherwise)
    failed: dict[str, str] = field(default_factory=dict)
    # render()'s sampled marks of the sample turns (compiler.sampled_turns): not a learned fact but
    # the renderer's own output, so a failure here is a defect to fix, never shipped as unlearned
    marks_checked: int = 0
    marks_wrong: list[str] = field(default_factory=list)

    def fail(self, fact: str, reason: str) -> None:
        self.failed.setdefault(fact, reason)

    def summary(self) -> str:
        text = f"read-back: {self.exact}/{self.checked} exact"
        if self.failed:
            text += " (" + "; ".join(f"{fact} WRONG: {why}" for fact, why in self.failed.items()) + ")"
        text += f", sampled marks: {self.marks_checked - len(self.marks_wrong)}/{self.marks_checked} exact"
        if self.marks_wrong:
            text += f" (first wrong: {self.marks_wrong[0]})"
        return text


def knob_settings(features) -> Iterator[dict]:
    """The base knobs, then each accepted value of each knob with the others at their base."""
    base = dict(features.base_knobs)
    yield base
    for knob, values in features.knobs:
        for value in values:
            if base.get(knob, object()) != value:
                yield {**base, knob: value}


def prove_facts(renderer_class: type, tokenizer: Any, special_tokens: dict[str, str], features) -> FactProof:
    """Prove ``renderer_class``'s stops and parse on the template's renders (see the module doc)."""
    proof = FactProof()
    if renderer_class.TURN is None:
        return proof
    base_read: set[str] | None = None  # the sample turns read back with the base knobs
    base_settings: dict = dict(features.base_knobs)
    for settings in knob_settings(features):
        try:
            renderer = shaped(renderer_class(tokenizer, special_tokens=dict(special_tokens), **settings))
        except ValueError:
            continue
        if renderer.UNLEARNED:
            return proof  # parse_response says "unlearned" and the bridge returns None: nothing claimed
        markers = fact_markers(renderer)
        read, unread = set(), []
        for label, turn in sample_turns(markers).items():
            checked, skipped = proof.checked, proof.skipped
            read_back(renderer, label, turn, settings, proof)
            check_sampled_marks(renderer, label, turn, settings, proof)
            if proof.checked > checked:
                read.add(label)
            elif proof.skipped > skipped:
                unread.append(label)
        if base_read and unread and not read and not writes_knob_text(renderer, settings, base_settings):
            # a fact learned under the base knobs must hold under every value the class accepts: here
            # no sample turn continues the generation prompt (it opens a block history never writes)
            proof.fail(
                "turn",
                f"with {settings} no sample turn reads back ({', '.join(unread)}): the template writes them "
                "otherwise than this generation prompt opens them, and no learned fact says how a turn goes on",
            )
        if base_read is None:
            base_read = read
        # a round later: a stop holding text the template takes from a variable (a round counter,
        # `[Round 2]`) does not recur
        plain = sample_turns()["plain"]
        read_back(renderer, "plain", plain, settings, proof, [USER, plain, follower(plain)], " a round later")
    return proof


def writes_knob_text(renderer, settings: dict, base_settings: dict) -> bool:
    """Whether the generation prompt holds a knob's own text (Jamba's ``generation_preamble``): a
    prefill the caller writes and history never shows. No turn reads back after it, yet nothing the
    class learned is wrong there: the turn goes on as under the base knobs. (A knob that switches
    the template's own text, DeepSeek-V3.1's ``thinking``, still has to read back.)"""
    prompt = renderer.generation_prompt()
    changed = [value for knob, value in settings.items() if base_settings.get(knob) != value]
    return any(isinstance(value, str) and value.strip() and value in prompt for value in changed)


def fact_markers(renderer) -> set[str]:
    """The markers of the class's reasoning and tool-call syntax that are not stops."""
    found = set()
    for fact in (renderer.REASONING, renderer.TOOL_CALLS):
        if fact is None:
            continue
        for name in ("open", "close", "call_start"):
            value = getattr(fact, name, "")
            if isinstance(value, str) and value.strip():
                found.add(value.strip())
    return {marker for marker in found if not any(stop in marker for stop in renderer.get_stop_strings())}


def as_written(renderer, messages: list[dict]) -> list[dict]:
    """``messages`` with their content in the form the template writes: one text part each for a
    template that writes no string content (``TurnFormat.content_parts``, Idefics)."""
    if renderer.TURN is not None and renderer.TURN.content_parts:
        return [as_text_parts(message) for message in messages]
    return messages


def tools_for(renderer, history: list[dict]) -> list | None:
    """The sample tools, in a form the template renders (OpenAI's, bare functions), else none."""
    for candidate in (TOOLS, [tool["function"] for tool in TOOLS], None):
        try:
            renderer.render_text(as_written(renderer, history), tools=candidate, add_generation_prompt=True)
        except ValueError:
            continue
        return candidate
    return None


def read_back(
    renderer,
    label: str,
    turn: dict,
    settings: dict,
    proof: FactProof,
    history: list[dict] | None = None,
    when: str = "",
) -> None:
    """Render ``turn`` after ``history`` (a user message) as sampled, cut it at its first stop, parse
    it, compare (see the module doc)."""
    history = history or [USER]
    tools = tools_for(renderer, history)
    closed = bool(renderer.TURN.close)
    # nothing closes the turn: the next message's header ends it
    messages = history + [turn] if closed else history + [turn, follower(turn)]
    try:
        prompt = renderer.render_text(as_written(renderer, history), tools=tools, add_generation_prompt=True)
        output = renderer._render_output(as_written(renderer, messages), tools, not closed)
    except ValueError:
        return  # the template refuses this turn (a call it cannot write)
    full = output.text()
    completion = after_prompt(prompt, full)
    if completion is None:
        if read_back_reasoned(renderer, label, turn, tools, proof):
            return
        completion = after_prefill(prompt, full, renderer.encoder.added_token_strings)
        if completion is None:
            proof.skipped += 1
            return
    if closed:  # the turn's own text: not what the template writes after the conversation (an eos)
        start = len(full) - len(completion)
        ends = [offset for offset, index in output.message_spans() if offset > start and index != len(history)]
        completion = completion[: min(ends, default=len(full)) - start]
    calls = turn.get("tool_calls") or []
    if calls and renderer.TOOL_CALLS is None and not any(call["function"]["name"] in completion for call in calls):
        proof.skipped += 1  # the template writes no call (tool calls unsupported): the class claims nothing of them
        return
    where = f"{label}{f' with {settings}' if settings else ''}{when}"
    found = first_stop(renderer, completion)
    if found is None and closed:
        # the stop may open the next message (a tool reply's opener): the turn then runs up to it
        completion = stop_in_follower(renderer, history, turn, tools, prompt, completion) or completion
        found = first_stop(renderer, completion)
    if found is None:
        proof.fail("turn", f"no stop ends the {where} turn {completion!r}")
        return
    at, stop = found
    rest = completion[at + len(stop) :]
    after_close = rest.strip() == renderer.TURN.after_close.strip()  # (after a call turn's stop too: Cohere)
    if closed and rest.strip() and not after_close:  # (what follows the close the bridge writes itself)
        header = renderer.generation_prompt().strip()
        if header and header in rest and len(turn.get("tool_calls") or []) > 1:
            return  # the template writes a turn per call (harmony); the model samples them one by one
        proof.fail("turn", f"the stop {stop!r} ends the {where} turn before its end: {completion!r}")
        return
    cut = completion[: at + len(stop)]
    encode = renderer.encoder.encode
    parsed = renderer.parse_response(encode(cut), tools=tools, prompt_ids=encode(prompt))
    if parsed.status == "unlearned":
        return
    proof.checked += 1
    rendered = completion[:at]
    problems = differences(turn, parsed, rendered)
    if not problems:
        proof.exact += 1
        return
    for fact, problem in problems:
        proof.fail(fact, f"the {where} turn {cut!r} reads back with {problem}")


def check_sampled_marks(renderer, label: str, turn: dict, settings: dict, proof: FactProof) -> None:
    """``render()`` of the sample turn after a user message: its sampled marks lie between an
    opening and the first stop after it, and parse back to the message (:mod:`compiler.sampled_turns`)."""
    tools = tools_for(renderer, [USER])
    messages = as_written(renderer, [USER, turn])
    try:
        rendered = renderer.render(messages, tools=tools)
    except ValueError:
        return  # the template refuses this turn
    proof.marks_checked += 1
    where = f"{label}{f' with {settings}' if settings else ''}"
    problem = mask_problem(renderer, rendered)
    if problem is None:
        parsed = parsed_runs(renderer, rendered, 1, tools)
        if parsed is not None and sampled_runs(rendered, 1):
            own = [token for token, owner in zip(rendered.token_ids, rendered.message_indices) if owner == 1]
            differing = differences(turn, parsed, renderer.decode(own))
            if differing:
                problem = f"the marked turn parses back with {differing[0][1]}"
    if problem is not None:
        proof.marks_wrong.append(f"the {where} turn: {problem}")


def read_back_reasoned(renderer, label: str, turn: dict, tools, proof: FactProof) -> bool:
    """For a template that cuts reasoning out of the content (QwQ, DeepSeek-R1), whose turns do not
    continue the prompt: the turn as the model samples it, a reasoning block and then the turn
    (:func:`compiler.turn_sampling.reasoned_turn`), read back. False when that is not such a template."""
    sampled = reasoned_turn(renderer, [USER], turn, tools)
    if sampled is None or turn.get("reasoning_content"):
        return False
    prompt, completion = sampled
    parsed = renderer.parse_response(completion, tools=tools, prompt_ids=prompt)
    if parsed.status == "unlearned":
        return True
    proof.checked += 1
    expected = {**turn, "reasoning_content": THOUGHT.strip()}
    problems = differences(expected, parsed, renderer.decode(completion))
    proof.exact += not problems
    for fact, problem in problems:
        proof.fail(fact, f"the {label} turn {renderer.decode(completion)!r} reads back with {problem}")
    return True


def first_stop(renderer, text: str) -> tuple[int, str] | None:
    """Where the first stop in ``text`` starts, and which (the longest of those starting there)."""
    stops = [(text.find(stop), -len(stop), stop) for stop in renderer.get_stop_strings() if stop and stop in text]
    return (min(stops)[0], min(stops)[2]) if stops else None


def stop_in_follower(renderer, history, turn, tools, prompt: str, own: str) -> str | None:
    """The turn's text up to a stop the next message's header starts with (None when there is none
    right after the turn's own text ``own``)."""
    try:
        messages = as_written(renderer, history + [turn, follower(turn)])
        full = renderer.render_text(messages, tools=tools, add_generation_prompt=True)
    except ValueError:
        return None
    completion = after_prompt(prompt, full)
    if completion is None or not completion.startswith(own):
        return None
    found = first_stop(renderer, completion[len(own) :])
    if found is None or completion[len(own) : len(own) + found[0]].strip():
        return None
    return completion[: len(own) + found[0] + len(found[1])]


def differences(turn: dict, parsed, rendered: str) -> list[tuple[str, str]]:
    """(fact, what differs) between ``turn`` and its parse, for what the render shows."""
    found = []
    calls = turn.get("tool_calls") or []
    reasoning = turn.get("reasoning_content")
    content = turn.get("content") or ""
    content_fact = "tool_calls" if calls else "reasoning" if reasoning else "turn"
    if content and content in rendered and (parsed.content or "").strip() != content:
        found.append((content_fact, f"content {parsed.content!r}"))
    named = all(call["function"]["name"] in rendered for call in calls)
    if not content and calls and named and (parsed.content or "").strip():
        found.append(("tool_calls", f"content {parsed.content!r}"))
    if reasoning and reasoning in rendered and (parsed.reasoning_content or "").strip() != reasoning:
        found.append(("reasoning", f"reasoning {parsed.reasoning_content!r}"))
    if not reasoning and (parsed.reasoning_content or "").strip():
        found.append(("reasoning", f"reasoning {parsed.reasoning_content!r}"))
    if calls and named:
        expected = [(call["function"]["name"], call["function"]["arguments"]) for call in calls]
        got = [(call.name, call.arguments) for call in parsed.tool_calls]
        if got != expected:
            found.append(("tool_calls", f"calls {got!r}"))
    elif not calls and parsed.tool_calls:
        found.append(("tool_calls", f"calls {[(call.name, call.arguments) for call in parsed.tool_calls]!r}"))
    return found
