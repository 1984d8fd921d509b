"""The property every render's sampled mask must have, checked on the renderer's own output.

A model samples an assistant turn from the end of the text that opens it (the generation prompt,
or the part of it the template writes in history) through the first stop it reaches; after a stop
it samples again only once the engine has written an opening (gpt-oss writes one
``<|start|>assistant to=functions.NAME ... <|call|>`` per parallel call). So in what
``render()`` marks sampled no stop comes before the last token of its run, a run after a stop
starts right after an opening, and ``parse_response`` of the marked runs, each after the tokens
before it, gives the message back.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any


def sampled_runs(rendered, index: int) -> list[tuple[int, int]]:
    """The maximal runs ``(start, end)`` of tokens of message ``index`` marked sampled."""
    return true_runs([sampled and owner == index for owner, sampled in zip(rendered.message_indices, rendered.sampled_mask)])


def true_runs(flags: list[bool]) -> list[tuple[int, int]]:
    """The half-open runs of True in ``flags``."""
    found, start = [], None
    for position, flag in enumerate([*flags, False]):
        if flag and start is None:
            start = position
        elif not flag and start is not None:
            found.append((start, position))
            start = None
    return found


def mask_problem(renderer: Any, rendered) -> str | None:
    """What breaks the property in ``rendered`` (a :meth:`render` result), or None."""
    stop_ids = set(renderer.get_stop_token_ids())
    text_stops = [stop for stop in renderer.get_stop_strings() if stop]
    opening = renderer.turn_opening()
    ids = rendered.token_ids
    for index, role in enumerate(rendered.message_roles):
        for number, (low, high) in enumerate(sampled_runs(rendered, index)):
            where = f"message {index} ({role}), sampled tokens {low}..{high - 1}"
            if role != "assistant":
                return f"{where}: only assistant turns are sampled"
            if any(token in stop_ids for token in ids[low : high - 1]):
                return f"{where}: a stop token before the run's last token: {renderer.decode(ids[low:high])!r}"
            head = renderer.decode(ids[low : high - 1])
            if any(stop in head for stop in text_stops):
                return f"{where}: a stop before the run's end: {renderer.decode(ids[low:high])!r}"
            # (where the first run starts is the template's business: after a tool result DeepSeek
            # writes no header and prompts none; its parse is checked by parsed_runs)
            if number and opening and not renderer.decode(ids[:low]).endswith(opening):
                tail = renderer.decode(ids[max(0, low - 8) : low])
                return f"{where}: sampled after a stop without the opening {opening!r}: {tail!r}"
    return None


def parsed_runs(renderer: Any, rendered, index: int, tools=None):
    """``parse_response`` of each sampled run of message ``index`` (after the tokens before it),
    joined: the content and reasoning in order, the calls of every run."""
    contents, reasonings, calls = [], [], []
    for low, high in sampled_runs(rendered, index):
        parsed = renderer.parse_response(rendered.token_ids[low:high], tools=tools, prompt_ids=rendered.token_ids[:low])
        if parsed.status == "unlearned":
            return None
        contents.append(parsed.content or "")
        reasonings.append(parsed.reasoning_content or "")
        calls += parsed.tool_calls
    return SimpleNamespace(content="".join(contents), reasoning_content="".join(reasonings) or None, tool_calls=calls)
