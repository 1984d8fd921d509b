"""Token offsets against character ranges: which tokens fall in which part of a rendered text.

A render knows, per character, which message wrote it and whether the model samples it; the
encoder gives each token's starting character. These two turn one into the other.
"""

from __future__ import annotations

import bisect

__all__ = ["inside_ranges", "span_values"]


def inside_ranges(offsets: list[int], ranges: list[tuple[int, int]]) -> list[bool]:
    """Per offset (ascending), whether it falls in one of the half-open character ranges."""
    flags = [False] * len(offsets)
    for start, end in ranges:  # the offsets in a range are one slice of them
        low, high = bisect.bisect_left(offsets, start), bisect.bisect_left(offsets, end)
        if low < high:
            flags[low:high] = [True] * (high - low)
    return flags


def span_values(offsets: list[int], spans: list[tuple[int, int]]) -> list[int]:
    """Per offset (ascending), the value of the span it falls in; ``spans`` are ``(start, value)``
    pairs in ascending order, each reaching to the next start, the first starting at or before
    the first offset."""
    values = [0] * len(offsets)
    first = max(bisect.bisect_right(spans, (offsets[0], float("inf"))) - 1, 0) if offsets else 0
    low = 0
    for position in range(first, len(spans)):
        start, value = spans[position]
        high = bisect.bisect_left(offsets, spans[position + 1][0], low) if position + 1 < len(spans) else len(offsets)
        if low < high:
            values[low:high] = [value] * (high - low)
        low = max(low, high)
        if low == len(offsets):
            break
    return values
