"""The report of ``python -m compiler diff``: markdown for a pull request, or plain terminal text.

Sections, in order: a verdict line, flagged consequences, learned facts, renders (changed ones
before and after with visible whitespace: ``·`` a space, ``→`` a tab, ``↵`` a line break), the fuzz
count with the smallest changed conversation, read-back and bridge, and ripple.
"""

from __future__ import annotations

import json
import re

from .behaviour_diff import BehaviourDiff, RenderChange

NO_CHANGE = "no behaviour change"


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
            self.lines += ["", text, ("=" if level == 1 else "-") * len(text)]

    def line(self, text: str = "") -> None:
        self.lines.append(text)

    def item(self, text: str) -> None:
        self.lines.append(f"- {text}")

    def code(self, text: str) -> None:
        if self.markdown:
            fence = "`" * max(3, 1 + max((len(run) for run in re.findall(r"`+", text)), default=0))
            self.lines += [fence + "text", text, fence]
        else:
            self.lines += ["    " + line for line in text.split("\n")]

    def inline(self, text: str) -> str:
        if not self.markdown:
            return text
        fence = "`" * (1 + max((len(run) for run in re.findall(r"`+", text)), default=0))
        return f"{fence} {text} {fence}" if text.startswith("`") or text.endswith("`") else f"{fence}{text}{fence}"

    def text(self) -> str:
        return "\n".join(self.lines).strip("\n") + "\n"


def report(diff: BehaviourDiff, *, markdown: bool = True) -> str:
    out = Writer(markdown)
    out.heading(f"Renderer diff: {diff.old.label} -> {diff.new.label}", 1)
    verdict = "**behaviour changed**" if markdown else "BEHAVIOUR CHANGED"
    out.line(verdict if diff.changed else NO_CHANGE)
    if diff.flags:
        out.heading("Flagged")
        for flag in diff.flags:
            out.item(("**!** " if markdown else "! ") + flag)
    facts_section(out, diff)
    renders_section(out, diff)
    fuzz_section(out, diff)
    read_back_section(out, diff)
    out.heading("Ripple")
    if diff.ripple:
        for line in diff.ripple:
            out.item(line)
    else:
        out.line(
            "none: every checked-in module imports only rllm_renderers.compiled, so no other module changes with this one"
        )
    return out.text()


def facts_section(out: Writer, diff: BehaviourDiff) -> None:
    out.heading("Learned facts")
    if not diff.facts:
        out.line("unchanged (turn, reasoning, tool calls, knobs, tool-argument form, prefix stability, retention)")
    for change in diff.facts:
        out.item(f"{change.name}: {out.inline(change.words)}")


def renders_section(out: Writer, diff: BehaviourDiff) -> None:
    out.heading("Renders")
    if diff.unchanged_renders:
        out.line("unchanged: " + ", ".join(diff.unchanged_renders))
    for change in diff.renders:
        render_change(out, change, f"changed: {change.name}")


def render_change(out: Writer, change: RenderChange, title: str) -> None:
    out.line("")
    out.line(f"**{title}**" if out.markdown else title)
    out.line("conversation: " + out.inline(json.dumps(conversation_of(change), ensure_ascii=False, default=repr)))
    out.line("before:")
    out.code(visible_whitespace(change.old))
    out.line("after:")
    out.code(visible_whitespace(change.new))


def conversation_of(change: RenderChange) -> dict:
    case = change.case
    shown: dict = {"messages": case.messages}
    if case.tools:
        shown["tools"] = [tool.get("function", {}).get("name") for tool in case.tools]
    if case.add_generation_prompt:
        shown["add_generation_prompt"] = True
    if case.knobs:
        shown["knobs"] = case.knobs
    return shown


def fuzz_section(out: Writer, diff: BehaviourDiff) -> None:
    fuzz = diff.fuzz
    out.heading("Fuzz")
    out.line(f"{fuzz.changed} of {fuzz.checked} generated conversations change their {fuzz.compared}")
    if fuzz.smallest is not None:
        render_change(out, fuzz.smallest, "smallest changed conversation")


def read_back_section(out: Writer, diff: BehaviourDiff) -> None:
    out.heading("Read-back and bridge")
    out.line(
        "each class's own sampled turn, parsed whole; cut at its first stop token; and bridged to the next user message"
    )
    for change in diff.read_backs:
        sides = (
            [("before and after", change.old)]
            if change.old == change.new
            else [("before", change.old), ("after", change.new)]
        )
        for label, side in sides:
            stopped = (
                f"; stops early at {side.stop_inside!r}: {side.stopped}"
                if side.stop_inside
                else "; a rollout stops at its end"
            )
            out.item(f"{change.name}, {label}: {out.inline(side.parsed)}{stopped}; bridge: {side.bridge}")
