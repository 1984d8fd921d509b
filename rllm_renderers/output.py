"""The text buffer a generated renderer writes into, with message attribution marks."""

from __future__ import annotations

from itertools import accumulate
from typing import Any, Iterator

from . import resume


class RenderOutput:
    """Collects rendered text pieces and remembers which message each piece belongs to.

    Generated code calls ``out.append(text)`` for every piece the template outputs,
    ``out.append_content(text)`` for a piece that is a message's own text (its content,
    reasoning or tool calls, as the translator knows from the template),
    ``out.mark_message(message)`` when its message loop starts rendering a message
    and ``out.mark_scaffold()`` when it leaves the loop. Messages are recognised by
    identity, so the marks stay right when a template slices ``messages``
    (``messages[1:]``) or loops over a filtered copy.

    A message loop the compiler proved resumable is ``out.message_loop(...)``
    (:mod:`rllm_renderers.resume`): with ``record=True`` the render keeps a
    :attr:`checkpoint` in it; with ``resume_from=`` a checkpoint of a shorter
    conversation it skips what that render already wrote, when that is exact. Then
    :meth:`text` and every offset here start at :attr:`origin`, the character of the
    full text where the resumed iteration's text begins.
    """

    __slots__ = ("parts", "append", "marks", "content_parts", "_messages", "_index_by_id", "origin", "loop_run", "_text")

    def __init__(self, messages: list[Any], *, record: bool = False, resume_from: Any = None) -> None:
        self.parts: list[str] = []
        self.append = self.parts.append
        self.marks: list[tuple[int, Any]] = []
        self.content_parts: list[int] = []  # indices into parts of message text
        self._messages = messages
        self._index_by_id: dict[int, int] | None = None  # built at the first lookup
        self.origin = 0  # characters of the full text before text() (what a resumed loop skipped)
        # what to do with a resumable message loop (record a checkpoint, resume from one), if anything
        self.loop_run = resume.LoopRun(record, resume_from) if record or resume_from is not None else None
        self._text: tuple[int, str] | None = None  # (len(parts), their text) once joined

    def message_loop(
        self,
        items: Any,
        *,
        lookahead: int = 0,
        leading: int = 0,
        lists: tuple = (),
        state: tuple = (),
        scans: tuple = (),
    ) -> Iterator:
        """``enumerate(items)`` for a resumable message loop (see :mod:`rllm_renderers.resume`):
        the loop body reads ``items`` and ``lists`` at most ``lookahead`` messages ahead (and their
        first ``leading``; beyond that only through the ``scans`` tests) and nothing from outside
        it but ``state``."""
        if self.loop_run is None:
            return enumerate(items)
        return resume.message_loop(self, items, lookahead, leading, lists, state, scans)

    def skip_to(self, origin: int) -> None:
        """Drop what was written so far: the full text up to ``origin`` is known to hold it."""
        self.parts.clear()
        self._text = None
        self.marks.clear()
        self.content_parts.clear()
        self.origin = origin

    @property
    def resumed_at(self) -> int | None:
        """The iteration a resumed message loop went on at (None: the render is whole)."""
        return self.loop_run.resumed_at if self.loop_run is not None else None

    @property
    def resume_refused(self) -> str | None:
        """Why the checkpoint given could not be resumed from (None: it was, or none was given)."""
        return self.loop_run.refused if self.loop_run is not None else None

    @property
    def checkpoint(self) -> resume.LoopCheckpoint | None:
        """The checkpoint recorded in this render (``record=True``), once it has ended."""
        if self.loop_run is None:
            return None
        return self.loop_run.checkpoint(self.parts, self.origin, len(self.text()))

    def message_index(self, message: Any) -> int:
        """The index of ``message`` (by identity) in the rendered messages, -1 for any other value."""
        if message is None:
            return -1
        if self.resumed_at is not None:  # a resumed loop marks the last messages: look for them from the end
            messages = self._messages
            for index in range(len(messages) - 1, -1, -1):
                if messages[index] is message:
                    return index
            return -1
        if self._index_by_id is None:
            self._index_by_id = {id(item): index for index, item in enumerate(self._messages)}
        return self._index_by_id.get(id(message), -1)

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
        surrounding = self.marks[-1][1] if self.marks else None
        self.mark_message(message)
        self.content_parts.append(len(self.parts))
        self.parts.append(text)
        self.marks.append((len(self.parts), surrounding))

    def mark_message(self, message: Any) -> None:
        """Text appended from now on belongs to ``message`` (attributed to no message if it is not an
        input message). Marks keep the message itself; its index is looked up when spans are asked for,
        so a resumed render never looks up the messages its skipped part marked."""
        self.marks.append((len(self.parts), message))

    def mark_scaffold(self) -> None:
        """Text appended from now on belongs to no message."""
        self.marks.append((len(self.parts), None))

    def text(self) -> str:
        """The text written (from :attr:`origin` on)."""
        joined = self._text
        if joined is None or joined[0] != len(self.parts):
            joined = self._text = (len(self.parts), "".join(self.parts))
        return joined[1]

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
        for mark_part, message in self.marks:
            message_index = self.message_index(message)
            offset = starts[mark_part]
            if spans[-1][0] == offset:
                spans[-1] = (offset, message_index)
            else:
                spans.append((offset, message_index))
        return spans
