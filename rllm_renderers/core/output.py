"""The text buffer a generated renderer writes into, with message attribution marks (and the caller
text its pieces carry: :mod:`rllm_renderers.jinja.caller_text`)."""

from __future__ import annotations

import bisect
from itertools import accumulate
from typing import Any, Iterator

from ..bridging import resume
from ..jinja.caller_text import MARKED_TYPES, marks_of, sources_by_message


class RenderOutput:
    """Collects rendered text pieces and remembers which message each piece belongs to.

    Generated code calls ``out.append(text)`` for every piece the template outputs
    (``out.append_content(text)`` for a piece it appends on its own),
    ``out.mark_message(message)`` when its message loop starts rendering a message
    and ``out.mark_scaffold()`` when it leaves the loop. Messages are recognised by
    identity, so the marks stay right when a template slices ``messages``
    (``messages[1:]``) or loops over a filtered copy.

    Which characters are a message's own text is not decided here: the pieces carry it
    (:mod:`rllm_renderers.jinja.caller_text`), and :meth:`caller_ranges` reads it off them when
    attribution is asked for, with the message each range belongs to.

    A message loop the compiler proved resumable is ``out.message_loop(...)``
    (:mod:`rllm_renderers.bridging.resume`): with ``record=True`` the render keeps a
    :attr:`checkpoint` in it; with ``resume_from=`` a checkpoint of a shorter
    conversation it skips what that render already wrote, when that is exact. Then
    :meth:`text` and every offset here start at :attr:`origin`, the character of the
    full text where the resumed iteration's text begins.
    """

    __slots__ = ("parts", "append", "marks", "_messages", "_caller", "_index_by_id", "origin", "loop_run", "_text")

    def __init__(self, messages: list[Any], *, record: bool = False, resume_from: Any = None) -> None:
        self.parts: list[str] = []
        self.append = self.parts.append
        self.marks: list[tuple[int, Any]] = []
        self._messages = messages
        self._index_by_id: dict[int, int] | None = None  # built at the first lookup
        self.origin = 0  # characters of the full text before text() (what a resumed loop skipped)
        # what to do with a resumable message loop (record a checkpoint, resume from one), if anything
        self.loop_run = resume.LoopRun(record, resume_from) if record or resume_from is not None else None
        self._text: tuple[int, str] | None = None  # (len(parts), their text) once joined
        self._caller: tuple[int, list] | None = None  # (len(parts), their caller_ranges) once found

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
        """``enumerate(items)`` for a resumable message loop (see :mod:`rllm_renderers.bridging.resume`):
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
        self._caller = None
        self.marks.clear()
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

    def append_content(self, text: str) -> None:
        """Append a piece the translator knows is a message's text, on its own rather than
        concatenated with its neighbours (its caller-text marks need no concatenation then);
        ``"" + text`` for a non-str raises what the template's own ``+`` would have raised."""
        self.parts.append(text if isinstance(text, str) else "" + text)

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

    def caller_ranges(self, starts: list[int] | None = None) -> list[tuple[int, int, int]]:
        """``(start, end, message_index)`` of every piece of caller text written, in order: a
        message's own text (:mod:`rllm_renderers.jinja.caller_text`), wherever the template wrote it,
        with the index of the message it came from (-1: a message not among those rendered).

        ``starts``: :meth:`part_starts`, when the caller already has them.
        """
        if self._caller is not None and self._caller[0] == len(self.parts):
            return self._caller[1]
        starts = self.part_starts() if starts is None else starts
        found: list[tuple[int, int, Any]] = []
        for position, part in enumerate(self.parts):
            if type(part) in MARKED_TYPES:
                offset = starts[position]
                found.extend((offset + low, offset + high, source) for low, high, source in marks_of(part))
        index_of = sources_by_message(self._messages) if found else {}
        ranges = [(low, high, index_of.get(id(source), -1)) for low, high, source in found if high > low]
        self._caller = (len(self.parts), ranges)
        return ranges

    def content_ranges(self, starts: list[int] | None = None) -> list[tuple[int, int]]:
        """Half-open character ranges of caller text (:meth:`caller_ranges` without the messages)."""
        return [(low, high) for low, high, _ in self.caller_ranges(starts)]

    def attributed_spans(self, starts: list[int] | None = None) -> list[tuple[int, int]]:
        """:meth:`message_spans`, with every piece of caller text attributed to the message it came
        from, wherever the template wrote it (a system prompt taken from ``messages[0]`` before
        the message loop is message 0's)."""
        starts = self.part_starts() if starts is None else starts
        spans = self.message_spans(starts)
        ranges = sorted((low, high, index) for low, high, index in self.caller_ranges(starts) if index >= 0)
        if not ranges:
            return spans
        span_starts, range_starts = [start for start, _ in spans], [low for low, _, _ in ranges]
        points = sorted({*span_starts, *range_starts, *(high for _, high, _ in ranges)})
        result: list[tuple[int, int]] = []
        for point in points:
            at = bisect.bisect_right(range_starts, point) - 1
            if at >= 0 and point < ranges[at][1]:
                index = ranges[at][2]
            else:
                index = spans[bisect.bisect_right(span_starts, point) - 1][1]
            if not result or result[-1][1] != index:
                result.append((point, index))
        return result

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
