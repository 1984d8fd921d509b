"""Probe conversations in the shape a template accepts.

The probes and the fact proof render short conversations (``[user, assistant]``...). Some
templates refuse that shape yet render the same turns in another: one that needs a system message
first (a variable set only in the system branch, used unconditionally: ``LEAD_ROLES``), one that
raises unless the last message is a user message. :class:`ShapedRenderer` renders every probe
conversation in such a shape (the lead messages first; a user message after a conversation that
ends otherwise, cut off again where that message starts) and reports what it rendered as if only
the probe's own messages had been given, so the probes read the turns as usual.
"""

from __future__ import annotations

import dataclasses
from typing import Any

LEAD_CONTENT = "Context."
TRAILING_USER = {"role": "user", "content": "Go on."}


class ShapedOutput:
    """A render of the shaped conversation, seen as the render of the probe's own messages."""

    def __init__(self, output: Any, lead: int, own: int, end: int | None) -> None:
        self._output, self._lead, self._own, self._end = output, lead, own, end

    def text(self) -> str:
        text = self._output.text()
        return text if self._end is None else text[: self._end]

    def message_spans(self, *args: Any) -> list[tuple[int, int]]:
        spans = [(start, self.index(owner)) for start, owner in self._output.message_spans(*args)]
        return [(start, owner) for start, owner in spans if self._end is None or start < self._end]

    def caller_ranges(self, *args: Any) -> list[tuple[int, int, int]]:
        ranges = [(low, high, self.index(owner)) for low, high, owner in self._output.caller_ranges(*args)]
        return [(low, high, owner) for low, high, owner in ranges if self._end is None or high <= self._end]

    def index(self, owner: int) -> int:
        own = owner - self._lead
        return own if 0 <= own < self._own else -1

    def __getattr__(self, name: str) -> Any:
        return getattr(self._output, name)


class ShapedRenderer:
    """``renderer`` with every conversation rendered in the shape the template accepts (module doc)."""

    def __init__(self, renderer: Any) -> None:
        self._renderer = renderer
        self._lead = [{"role": role, "content": LEAD_CONTENT} for role in renderer.LEAD_ROLES]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._renderer, name)

    def _shaped(self, render, messages: list, add_generation_prompt: bool):
        """``render(shaped messages)`` and the shape: (result, trailing message added)."""
        shaped = self._lead + list(messages)
        try:
            return render(shaped), False
        except ValueError:
            if add_generation_prompt or not messages or messages[-1].get("role") == "user":
                raise
        return render(shaped + [TRAILING_USER]), True

    def _render_output(self, messages: list, tools: Any, add_generation_prompt: bool, **options: Any) -> ShapedOutput:
        output, trailing = self._shaped(
            lambda shaped: self._renderer._render_output(shaped, tools, add_generation_prompt, **options),
            messages,
            add_generation_prompt,
        )
        end = None
        if trailing:  # cut where the trailing user message starts
            last = len(self._lead) + len(messages)
            end = next((start for start, owner in output.message_spans() if owner == last), None)
            if end is None:
                raise ValueError("the template marks no start of the trailing user message")
        return ShapedOutput(output, len(self._lead), len(messages), end)

    def render_text(self, messages: list, *, tools: Any = None, add_generation_prompt: bool = False) -> str:
        return self._render_output(messages, tools, add_generation_prompt).text()

    def render_ids(self, messages: list, *, tools: Any = None, add_generation_prompt: bool = False) -> list[int]:
        return self._renderer.encoder.encode(self.render_text(messages, tools=tools, add_generation_prompt=add_generation_prompt))

    def render(self, messages: list, *, tools: Any = None, add_generation_prompt: bool = False):
        rendered, trailing = self._shaped(
            lambda shaped: self._renderer.render(shaped, tools=tools, add_generation_prompt=add_generation_prompt),
            messages,
            add_generation_prompt,
        )
        lead, own = len(self._lead), len(messages)
        indices = [owner - lead if 0 <= owner - lead < own else -1 for owner in rendered.message_indices]
        return dataclasses.replace(
            rendered,
            message_indices=indices,
            sampled_mask=[sampled and index >= 0 for sampled, index in zip(rendered.sampled_mask, indices)],
            is_content=[content and index >= 0 for content, index in zip(rendered.is_content, indices)],
            message_roles=list(rendered.message_roles[lead : lead + own]),
            message_tool_names=list(rendered.message_tool_names[lead : lead + own]),
        )


def shaped(renderer: Any) -> Any:
    """``renderer`` as a :class:`ShapedRenderer` (it also refuses shapes the template refuses)."""
    return renderer if isinstance(renderer, ShapedRenderer) else ShapedRenderer(renderer)
