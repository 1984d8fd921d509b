"""Matching a render with placeholders against a prompt's text, without regular expressions.

Recovery (:mod:`rllm_renderers.bridging.recovery`) renders candidate conversations whose unknown
contents are placeholders, and asks whether such a render, read as "literal text, then any text
for each placeholder", matches the prompt's text. A regular expression compiled per render cost
time that grew with the square of the conversation (most of it in ``re``'s parser); this matcher
does the same with ``str.startswith`` and ``str.find`` over the text, and finds the boundaries a
placeholder's text may not cross once per prompt.

Semantics (those of the regular expression it replaces): a placeholder takes the shortest text
that lets the rest match (the first match found, trying shorter texts first), a placeholder
written again must be the same text, and a placeholder's text never holds the start of a
boundary string.
"""

from __future__ import annotations

import bisect
import re
import sys
from typing import Iterable, NamedTuple

#: Placeholders (private-use characters around a number) no prompt holds and no template changes.
NEEDLE_OPEN, NEEDLE_CLOSE = "\ue000", "\ue001"
NEEDLE = re.compile(f"{NEEDLE_OPEN}(\\d+){NEEDLE_CLOSE}")


def needle(number: int) -> str:
    return f"{NEEDLE_OPEN}{number}{NEEDLE_CLOSE}"


class Matched(NamedTuple):
    """A render with placeholders (``rendered``) matched from the text's start up to ``end``."""

    rendered: str
    end: int
    values: dict[int, str]


class SearchedText:
    """A prompt's text and where the boundary strings start in it (found once)."""

    def __init__(self, text: str, boundaries: Iterable[str]) -> None:
        self.text = text
        starts = set()
        for boundary in filter(None, boundaries):
            at = text.find(boundary)
            while at >= 0:
                starts.add(at)
                at = text.find(boundary, at + 1)
        self.boundary_starts = sorted(starts)

    def next_boundary(self, position: int) -> int:
        """The first boundary start at or after ``position`` (the text's length if none)."""
        index = bisect.bisect_left(self.boundary_starts, position)
        return self.boundary_starts[index] if index < len(self.boundary_starts) else len(self.text)

    def match(
        self, rendered: str, *, whole: bool = False, after: "Matched | None" = None
    ) -> "Matched | None":
        """Where the match of ``rendered`` (with placeholders) from the text's start ends, and each
        placeholder's text; None when it does not match (``whole``: it must match all of the text).

        ``after``: an earlier match of a render that ``rendered`` starts with; the match goes on from
        its end, with its placeholders' texts as they were (so a conversation read one message at a
        time is matched once, not once per message)."""
        values: dict[int, str] = {}
        rest, start = rendered, 0
        # (not after a render that ends with a placeholder: its text was taken as short as it could be)
        if after is not None and not after.rendered.endswith(NEEDLE_CLOSE) and rendered.startswith(after.rendered):
            rest, start, values = rendered[len(after.rendered) :], after.end, dict(after.values)
        pieces = NEEDLE.split(rest)  # literal, number, literal, number, ..., literal
        literals, numbers = pieces[::2], [int(number) for number in pieces[1::2]]
        depth = len(numbers) + 50
        if depth > sys.getrecursionlimit() - 100:
            sys.setrecursionlimit(depth + 1000)  # one frame per placeholder
        end = self._match_from(literals, numbers, 0, start, values, whole)
        return None if end is None else Matched(rendered, end, values)

    def _match_from(
        self, literals: list[str], numbers: list[int], index: int, position: int, values: dict[int, str], whole: bool
    ) -> int | None:
        text, literal = self.text, literals[index]
        if not text.startswith(literal, position):
            return None
        position += len(literal)
        if index == len(numbers):
            return position if not whole or position == len(text) else None
        number, following = numbers[index], literals[index + 1]
        if number in values:  # written again: the same text
            known = values[number]
            if not text.startswith(known, position):
                return None
            return self._match_from(literals, numbers, index + 1, position + len(known), values, whole)
        limit = self.next_boundary(position)  # the placeholder's text ends at or before it
        if not following and index + 1 == len(numbers):  # the render ends with this placeholder
            end = (len(text) if limit >= len(text) else None) if whole else position
            if end is None:
                return None
            values[number] = text[position:end]
            return end
        end = position
        while end <= limit:
            if following:
                end = text.find(following, end, limit + len(following))
                if end < 0:
                    break
            values[number] = text[position:end]
            found = self._match_from(literals, numbers, index + 1, end, values, whole)
            if found is not None:
                return found
            del values[number]
            end += 1
        return None
