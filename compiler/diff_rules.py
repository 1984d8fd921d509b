"""The summary of ``python -m compiler diff``: each behavioural change stated as the template's rule.

One line per change, worded from what the two renderers do rather than from the template source:
a changed learned fact ("turn format: close '<|return|>' -> '<|end|>'"), the generation prompt
("the generation prompt now ends with `</think>`"), the clock ("the date now defaults to today"),
and, per kind of message, how the text written for it changed ("tool results: `<tool_response>` ->
`<result>`"). Nothing here compiles or renders: :mod:`compiler.behaviour_diff` hands the texts in.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

#: How much unchanged text is quoted on each side of a changed segment.
CONTEXT_CHARACTERS = 12
#: Longer quotes are cut in the middle.
QUOTE_CHARACTERS = 90


@dataclass(frozen=True)
class Rule:
    """One summary line. ``flagged``: a change a rollout or a trainer feels even when no render in the
    report shows it (a learned fact, the generation prompt, the clock)."""

    text: str
    flagged: bool = False


def quoted(text: str) -> str:
    """``text`` in backticks, line breaks and tabs escaped, cut in the middle when long."""
    shown = text.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t").replace("`", "'")
    if len(shown) > QUOTE_CHARACTERS:
        half = QUOTE_CHARACTERS // 2
        shown = shown[:half] + "…" + shown[-half:]
    return f"`{shown}`"


def merged_spans(old: str, new: str, gap: int = 2 * CONTEXT_CHARACTERS) -> list[list[int]]:
    """``[i1, i2, j1, j2]`` of each differing stretch, stretches less than ``gap`` apart merged."""
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    merged: list[list[int]] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        if merged and i1 - merged[-1][1] <= gap:
            merged[-1][1], merged[-1][3] = i2, j2
        else:
            merged.append([i1, i2, j1, j2])
    return merged


def changed_segments(old: str, new: str) -> list[tuple[str, str]]:
    """The (old, new) pieces that differ between two texts, each with a little unchanged context."""
    pieces = []
    for i1, i2, j1, j2 in merged_spans(old, new):
        before = min(CONTEXT_CHARACTERS, i1)
        after = min(CONTEXT_CHARACTERS, len(old) - i2)
        pieces.append((old[i1 - before : i2 + after], new[j1 - before : j2 + after]))
    return pieces


def core_changes(old: str, new: str) -> tuple[tuple[str, str], ...]:
    """The changes without context, each widened to the marker or word it falls in
    (``im_end`` -> ``<|im_end|>``): what several kinds of text may share."""
    cores = []
    for i1, i2, j1, j2 in merged_spans(old, new, gap=4):
        left = 0  # the context before is the same on both sides: widen both alike
        while left < 16 and i1 - left > 0 and widens_left(old, i1 - left) and widens_left(new, j1 - left):
            left += 1
        right = 0
        while right < 16 and i2 + right < len(old) and widens_right(old, i2 + right) and widens_right(new, j2 + right):
            right += 1
        cores.append((old[i1 - left : i2 + right], new[j1 - left : j2 + right]))
    return tuple(cores)


def widens_left(text: str, start: int) -> bool:
    """Whether a piece starting at ``start`` takes the character before it too."""
    if start >= len(text):
        return not text[start - 1].isspace() and text[start - 1] != ">"
    return text[start] != "<" and not text[start - 1].isspace() and text[start - 1] != ">"


def widens_right(text: str, end: int) -> bool:
    """Whether a piece ending at ``end`` takes the character at ``end`` too."""
    if end >= len(text):
        return False
    return text[end - 1] != ">" and not text[end].isspace() and text[end] != "<"


def change_in_words(old: str, new: str) -> str:
    """``old`` -> ``new`` said as briefly as the change allows."""
    if not old:
        return f"now written: {quoted(new)}"
    if not new:
        return f"no longer written: {quoted(old)}"
    pieces = changed_segments(old, new)
    if len(pieces) > 2:
        return f"{quoted(old)} -> {quoted(new)}"
    return "; ".join(f"{quoted(before)} -> {quoted(after)}" for before, after in pieces)


def generation_prompt_rule(old: str | None, new: str | None, setting: str = "") -> Rule | None:
    """The text ``add_generation_prompt`` appends (None: a side refused the probe); ``setting``:
    the knob values it was rendered with, in words ("" for the defaults)."""
    if old is None or new is None or old == new:
        return None
    where = f" with {setting}" if setting else ""
    if new.startswith(old):
        words = f"now ends with {quoted(new[len(old):])} (was {quoted(old)})"
    elif old.startswith(new):
        words = f"no longer ends with {quoted(old[len(new):])} (now {quoted(new)})"
    else:
        words = f"is {quoted(new)} (was {quoted(old)})"
    return Rule(f"the generation prompt{where} {words}", True)


def clock_rule(old_reads_clock: bool, new_reads_clock: bool, shown: str) -> Rule | None:
    """``shown``: the date the renders of the report were made on."""
    if new_reads_clock and not old_reads_clock:
        return Rule(
            "the date now defaults to today (strftime_now): the same conversation renders differently each day "
            f"(the renders below are made on {shown})",
            True,
        )
    if old_reads_clock and not new_reads_clock:
        return Rule(f"the date no longer defaults to today (strftime_now; the renders below are made on {shown})", True)
    return None


def message_kind(message: dict) -> str:
    """How the summary names a kind of message."""
    role = message.get("role", "?")
    if role == "assistant":
        if message.get("tool_calls"):
            return "assistant turns with tool calls"
        if message.get("reasoning_content"):
            return "assistant turns with reasoning"
        return "assistant answers"
    if role == "tool":
        return "tool results"
    return f"{role} messages"


#: Keys of the text pieces outside any message (see :func:`behaviour_diff.render_parts`).
PREAMBLE, BETWEEN, ENDING = "preamble", "between", "ending"
PART_NAMES = {
    PREAMBLE: "text before the first message",
    BETWEEN: "text between messages",
    ENDING: "text after the last message",
}


def default_system_rule(before: str, after: str) -> Rule:
    """The text written before the first message when the conversation has no system message: a
    default system prompt (or a preamble) that appears, goes or changes."""
    pieces = changed_segments(before, after)
    if len(pieces) == 1 and not difflib_added(before, after):
        return Rule(f"the default system prompt (no system message given) is gone: {quoted(removed_text(before, after))}")
    if len(pieces) == 1 and not difflib_added(after, before):
        return Rule(f"a default system prompt (no system message given) is added: {quoted(removed_text(after, before))}")
    return Rule(f"with no system message, the text before the first message: {change_in_words(before, after)}")


def difflib_added(old: str, new: str) -> bool:
    """Whether ``new`` holds text ``old`` does not (anything but deletions)."""
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    return any(tag in ("insert", "replace") for tag, *_ in matcher.get_opcodes())


def removed_text(longer: str, shorter: str) -> str:
    matcher = difflib.SequenceMatcher(None, longer, shorter, autojunk=False)
    return "".join(longer[i1:i2] for tag, i1, i2, _, _ in matcher.get_opcodes() if tag == "delete")


def part_rules(changed: list[tuple[list[dict], dict, dict]]) -> list[Rule]:
    """Per kind of message (and for the text outside messages), the first change seen.

    ``changed``: (messages, old parts, new parts) of each probe conversation whose render changed;
    parts map a message index or a :data:`PART_NAMES` key to the text written for it."""
    rules: dict[str, Rule] = {}
    cores: dict[str, tuple] = {}  # per rule, the change without context
    for messages, old, new in changed:
        for key in [*old, *(key for key in new if key not in old)]:
            before, after = old.get(key, ""), new.get(key, "")
            if before == after:
                continue
            name = PART_NAMES[key] if isinstance(key, str) else message_kind(messages[key])
            if name in rules:
                continue
            cores[name] = core_changes(before, after)
            if key == PREAMBLE and not any(message.get("role") == "system" for message in messages):
                rules[name] = default_system_rule(before, after)
                continue
            rules[name] = Rule(f"{name}: {change_in_words(before, after)}")
    return merged_rules(rules, cores)


def merged_rules(rules: dict[str, Rule], cores: dict[str, tuple]) -> list[Rule]:
    """One line for the kinds of text that changed alike (a turn close written after every message
    changes every kind): ``user messages, tool results, ...: `<|im_end|>` -> `<|endoftext|>```."""
    by_core: dict[tuple, list[str]] = {}
    for name, core in cores.items():
        by_core.setdefault(core, []).append(name)
    result, said = [], set()
    for name, rule in rules.items():
        names = by_core[cores[name]]
        if len(names) < 3:
            result.append(rule)
        elif names[0] not in said:
            said.add(names[0])
            words = "; ".join(f"{quoted(before)} -> {quoted(after)}" for before, after in cores[name])
            result.append(Rule(f"{', '.join(names)}: {words}"))
    return result
