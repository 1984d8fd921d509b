"""The text buffer a generated renderer writes into, with message attribution marks."""

from __future__ import annotations

from itertools import accumulate
from typing import Any


class RenderOutput:
    """Collects rendered text pieces and remembers which message each piece belongs to.

    Generated code calls ``out.append(text)`` for every piece the template outputs,
    ``out.append_content(text)`` for a piece that is a message's own text (its content,
    reasoning or tool calls, as the translator knows from the template),
    ``out.mark_message(message)`` when its message loop starts rendering a message
    and ``out.mark_scaffold()`` when it leaves the loop. Messages are recognised by
    identity, so the marks stay right when a template slices ``messages``
    (``messages[1:]``) or loops over a filtered copy.
    """

    __slots__ = ("parts", "append", "marks", "content_parts", "_index_by_id")

    def __init__(self, messages: list[Any]) -> None:
        self.parts: list[str] = []
        self.append = self.parts.append
        self.marks: list[tuple[int, int]] = []
        self.content_parts: list[int] = []  # indices into parts of message text
        self._index_by_id = {id(message): index for index, message in enumerate(messages)}

    def append_content(self, text: str, message: Any = None) -> None:
        """Append a piece of a message's own text (attributed as content).

        ``message``: the message it belongs to, when the template writes it outside its message
        loop (``messages[0].content`` for a system prompt); the piece is attributed to it.
        ``"" + text`` for a non-str raises what the template's own ``+`` would have raised.
        """
        text = text if type(text) is str else "" + text
        if message is None:
            self.content_parts.append(len(self.parts))
            self.parts.append(text)
            return
        surrounding = self.marks[-1][1] if self.marks else -1
        self.mark_message(message)
        self.content_parts.append(len(self.parts))
        self.parts.append(text)
        self.marks.append((len(self.parts), surrounding))

    def mark_message(self, message: Any) -> None:
        """Text appended from now on belongs to ``message`` (-1 if it is not an input message)."""
        self.marks.append((len(self.parts), self._index_by_id.get(id(message), -1)))

    def mark_scaffold(self) -> None:
        """Text appended from now on belongs to no message."""
        self.marks.append((len(self.parts), -1))

    def text(self) -> str:
        return "".join(self.parts)

    def part_starts(self) -> list[int]:
        """The character offset of every part in :meth:`text`, plus the text's length at the end."""
        return [0, *accumulate(map(len, self.parts))]

    def content_ranges(self, starts: list[int] | None = None) -> list[tuple[int, int]]:
        """Half-open character ranges of the pieces appended with :meth:`append_content`.

        ``starts``: :meth:`part_starts`, when the caller already has them.
        """
        starts = self.part_starts() if starts is None else starts
        return [(starts[part], starts[part + 1]) for part in self.content_parts if starts[part + 1] > starts[part]]

    def message_spans(self, starts: list[int] | None = None) -> list[tuple[int, int]]:
        """``(char_start, message_index)`` pairs, in order, starting at character 0 with -1."""
        starts = self.part_starts() if starts is None else starts
        spans = [(0, -1)]
        for mark_part, message_index in self.marks:
            offset = starts[mark_part]
            if spans[-1][0] == offset:
                spans[-1] = (offset, message_index)
            else:
                spans.append((offset, message_index))
        return spans
