"""The report of ``python -m compiler diff``: markdown for a pull request, or plain terminal text.

Cause first, evidence after, short enough to read (a hundred lines at most for a real revision):

1. a verdict line, then the summary: one line per behavioural change stated as the template's rule
   (:mod:`compiler.diff_rules`), ``!`` before the ones a rollout or trainer feels;
2. the evidence: of each changed probe conversation only the differing lines of its render, marked
   ``-`` (before) and ``+`` (after) with a line of context, whitespace visible (``·`` a space, ``→`` a
   tab, ``↵`` a line break); a change already shown is not shown again; then the smallest changed
   conversation, readable;
3. what was checked: unchanged probes, the fuzz count, read-back and bridge, limits of the tool
   (never counted as a change), ripple.
"""

from __future__ import annotations

import difflib
import json
import re

from .behaviour_diff import BehaviourDiff, RenderChange, is_limit

NO_CHANGE = "no behaviour change"
#: Changed probe conversations whose lines are shown (the others are named).
EVIDENCE_CONVERSATIONS = 3
#: Diff lines shown per conversation.
EVIDENCE_LINES = 14
#: A render line longer than this is cut around its change.
LINE_CHARACTERS = 110


def visible_whitespace(text: str) -> str:
    """Spaces, tabs and line breaks made visible (the line breaks kept), other controls escaped."""
    shown = []
    for character in text:
        if character == " ":
            shown.append("·")
        elif character == "\t":
            shown.append("→")
        elif character == "\n":
            shown.append("↵\n")
        elif not character.isprintable():
            shown.append(repr(character)[1:-1])
        else:
            shown.append(character)
    return "".join(shown)


class Writer:
    """Headings, lists and code blocks, as markdown or as terminal text."""

    def __init__(self, markdown: bool) -> None:
        self.markdown = markdown
        self.lines: list[str] = []

    def heading(self, text: str, level: int = 2) -> None:
        if self.markdown:
            self.lines += ["", "#" * level + " " + text, ""]
        else:
            self.lines += ["", text, ("=" if level == 1 else "-") * min(len(text), 100)]

    def line(self, text: str = "") -> None:
        self.lines.append(text)

    def item(self, text: str) -> None:
        self.lines.append(f"- {text}")

    def code(self, text: str) -> None:
        if self.markdown:
            fence = "`" * max(3, 1 + max((len(run) for run in re.findall(r"`+", text)), default=0))
            self.lines += [fence + "diff", text, fence]
        else:
            self.lines += ["    " + line for line in text.split("\n")]

    def inline(self, text: str) -> str:
        if not self.markdown:
            return text
        fence = "`" * (1 + max((len(run) for run in re.findall(r"`+", text)), default=0))
        return f"{fence} {text} {fence}" if text.startswith("`") or text.endswith("`") else f"{fence}{text}{fence}"

    def bold(self, text: str) -> str:
        return f"**{text}**" if self.markdown else text

    def text(self) -> str:
        return "\n".join(self.lines).strip("\n") + "\n"


def report(diff: BehaviourDiff, *, markdown: bool = True) -> str:
    out = Writer(markdown)
    out.heading(f"Renderer diff: {diff.old.label} -> {diff.new.label}", 1)
    if diff.changed:
        count = len(diff.summary)
        out.line(out.bold("behaviour changed") + f": {count} change{'s' * (count != 1)} (exit 1)")
        out.heading("Summary")
        for rule in diff.summary:
            out.item(("! " if rule.flagged else "") + rule.text)
    else:
        out.line(NO_CHANGE + " (exit 0)")
    evidence_section(out, diff)
    checked_section(out, diff)
    return out.text()


# --- the evidence: differing lines only ---------------------------------------------------------


def clipped(line: str, around: int) -> str:
    """``line`` cut to :data:`LINE_CHARACTERS` around the character at ``around``."""
    if len(line) <= LINE_CHARACTERS:
        return line
    start = max(0, min(around - LINE_CHARACTERS // 3, len(line) - LINE_CHARACTERS))
    end = start + LINE_CHARACTERS
    return ("…" if start else "") + line[start:end] + ("…" if end < len(line) else "")


def first_difference(line: str, others: list[str]) -> int:
    """Where ``line`` first differs from the most alike of ``others`` (0 without one)."""
    if not others:
        return 0
    other = max(others, key=lambda candidate: difflib.SequenceMatcher(None, line, candidate).ratio())
    return next((k for k, (a, b) in enumerate(zip(line, other)) if a != b), min(len(line), len(other)))


def hunks(old: str, new: str) -> list[list[str]]:
    """The differing lines of two renders, grouped with one line of context, marked and clipped."""
    before = visible_whitespace(old).split("\n")
    after = visible_whitespace(new).split("\n")
    groups = []
    for group in difflib.SequenceMatcher(None, before, after, autojunk=False).get_grouped_opcodes(1):
        lines = []
        for tag, i1, i2, j1, j2 in group:
            removed, added = before[i1:i2], after[j1:j2]
            if tag == "equal":
                lines += ["  " + clipped(line, 0) for line in removed]
                continue
            lines += ["- " + clipped(line, first_difference(line, added)) for line in removed]
            lines += ["+ " + clipped(line, first_difference(line, removed)) for line in added]
        groups.append(lines)
    return groups


def conversation_line(change: RenderChange) -> str:
    case = change.case
    shown: dict = {"messages": case.messages}
    if case.tools:
        shown["tools"] = [tool.get("function", {}).get("name") for tool in case.tools]
    if case.add_generation_prompt:
        shown["add_generation_prompt"] = True
    if case.knobs:
        shown["knobs"] = case.knobs
    text = json.dumps(shown, ensure_ascii=False, default=repr)
    return text if len(text) <= 400 else text[:399] + "…"


def evidence_section(out: Writer, diff: BehaviourDiff) -> None:
    changes = sorted(diff.renders, key=lambda change: len(change.old) + len(change.new))
    if not changes and diff.fuzz.smallest is None:
        return
    out.heading("Evidence")
    shown: set[tuple[str, ...]] = set()
    same_as_shown: list[str] = []
    conversations = 0
    for change in changes:
        fresh = [group for group in hunks(change.old, change.new) if changed_lines(group) not in shown]
        if not fresh or conversations >= EVIDENCE_CONVERSATIONS:
            same_as_shown.append(change.name)
            continue
        conversations += 1
        shown.update(changed_lines(group) for group in fresh)
        evidence(out, change.name, change, fresh)
    if same_as_shown:
        out.line("")
        out.line("also changed (like the above, or not shown): " + ", ".join(same_as_shown))
    smallest = diff.fuzz.smallest
    if smallest is not None:
        evidence(out, "smallest changed conversation", smallest, hunks(smallest.old, smallest.new))
        out.line("conversation: " + out.inline(conversation_line(smallest)))


def changed_lines(group: list[str]) -> tuple[str, ...]:
    return tuple(line for line in group if line[:1] in "+-")


def evidence(out: Writer, title: str, change: RenderChange, groups: list[list[str]]) -> None:
    out.line("")
    out.line(out.bold(title) + (f" ({change.name})" if change.name != title and change.name != "smallest" else ""))
    lines: list[str] = []
    for group in groups:
        lines += (["  …"] if lines else []) + group
    if len(lines) > EVIDENCE_LINES:
        hidden = sum(1 for line in lines[EVIDENCE_LINES:] if line[:1] in "+-")
        lines = lines[:EVIDENCE_LINES] + [f"  … {hidden} more changed lines"]
    if not lines:  # the same text, other token ids
        lines = ["  (the same text, other token ids)"]
    out.code("\n".join(lines))


# --- what was checked -----------------------------------------------------------------------


def checked_section(out: Writer, diff: BehaviourDiff) -> None:
    out.heading("Checked")
    if diff.unchanged_renders:
        out.item("unchanged probes: " + ", ".join(diff.unchanged_renders))
    fuzz = diff.fuzz
    out.item(f"fuzz: {fuzz.changed} of {fuzz.checked} generated conversations change their {fuzz.compared}")
    same = [change.name for change in diff.read_backs if change.old == change.new and not is_limited(change)]
    if same:
        out.item("read-back and bridge unchanged: " + ", ".join(same))
    for change in diff.read_backs:
        if change.old == change.new or is_limited(change):
            continue
        for label, side in (("before", change.old), ("after", change.new)):
            stopped = f"; stops early at {side.stop_inside!r}: {side.stopped}" if side.stop_inside else ""
            out.item(f"read-back, {change.name}, {label}: {out.inline(side.parsed)}{stopped}; bridge: {side.bridge}")
    if diff.limits:
        out.item("not checked (a limit of this tool, not a change): " + "; ".join(diff.limits))
    cut = [change for change in diff.facts if len(change.words) > 200]
    for change in cut:
        out.item(f"{change.name} in full: {out.inline(change.words)}")
    if diff.ripple:
        out.item("ripple: " + "; ".join(diff.ripple))
    else:
        out.item("ripple: none (every checked-in module imports only rllm_renderers.compiled)")


def is_limited(change) -> bool:
    return is_limit(change.old.bridge) or is_limit(change.new.bridge)
