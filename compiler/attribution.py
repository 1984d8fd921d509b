"""The attribution property: a message's own text is marked as its content, exactly, wherever it is written.

``render()`` says per token which message it belongs to and whether it is that message's own text
(``is_content``); the control-token-safe mode encodes exactly that text as plain text. Both rest on
the caller-text marks of :mod:`rllm_renderers.jinja.caller_text`. This module checks them against the
template's own text, independently of how the marks are made:

* :func:`needle_conversation` replaces every string a message carries but its role and the
  ``type`` of a part or call (content, content parts, reasoning, names, tool-call ids, names,
  argument keys and values) by a *needle*: a short string of letters and digits that is unique in
  the conversation, that no template transformation of a message's text changes (``strip``,
  ``split`` on a marker, ``trim``), and that the template writes as it is. Call ids keep their
  length (Mistral's templates check it) and stay paired: a tool message's ``tool_call_id`` is the
  needle of the call it answers (Gemma-4 looks the call up by it), so an id's needle is the text
  of each message that carries it, and written, it may be marked as either's. An id's needle ends
  with what makes it unique (``wwwwwwW3``), so the end of an id a template slices off
  (``tool_call.id[-9:]``, vLLM's Mistral template) is found as that id's text too. Empty strings stay
  empty (templates test emptiness).
* "Where the template writes a message's text" is then where its needles occur in the render;
  :func:`attribution_mismatch` compares that, character by character, with the marks: every
  character of a needle of message k is marked as caller text of message k; nothing else is
  marked, except the JSON punctuation of tool-call arguments the template serialises (the JSON of
  a call's arguments is the model's text, and is marked whole).

``compiler verify`` runs it on the needle version of every generated conversation (so a template
is covered when it is compiled); ``tests/test_attribution.py`` on every checked-in renderer, at the
token level too.
"""

from __future__ import annotations

import json
import re
from typing import Any

#: What a template may write around argument needles when it serialises arguments as JSON.
JSON_PUNCTUATION = frozenset('{}[]":, \n')
#: Values kept as they are: templates dispatch on them.
KEPT_FIELDS = ("role", "type")
#: Fields holding a call id (its length is kept).
ID_FIELDS = ("id", "tool_call_id")
#: The needle of a call id (see Needles.call_id).
ID_NEEDLE = re.compile(r"w+W[0-9]+")


class Needles:
    """Hands out needles, remembering whose each is (the set of message indices it may be marked as)."""

    def __init__(self) -> None:
        self.owner: dict[str, frozenset[int]] = {}
        self.ids: dict[str, str] = {}  # a call id -> its needle (the same for the call and its result)

    def text(self, message_index: int) -> str:
        needle = f"Zq{message_index}x{len(self.owner)}Q"
        self.owner[needle] = frozenset((message_index,))
        return needle

    def call_id(self, message_index: int, original: str) -> str:
        needle = self.ids.get(original)
        if needle is None:
            serial, length = str(len(self.ids)), len(original)
            needle = ("w" * length + "W" + serial)[-length:] if length > len(serial) + 1 else original
            self.ids[original] = needle
        if needle != original:
            self.owner[needle] = self.owner.get(needle, frozenset()) | {message_index}
        return needle


def needle_conversation(messages: list[dict]) -> tuple[list[dict], dict[str, frozenset[int]]]:
    """``messages`` with every string of a message (but its role and the ``type`` fields) a needle;
    and each needle's message indices (one, but for a call id)."""
    needles = Needles()
    converted = [_needled(message, index, needles, None) for index, message in enumerate(messages)]
    return converted, needles.owner


def _needled(value: Any, index: int, needles: Needles, key: Any, in_arguments: bool = False) -> Any:
    """The needle version of ``value`` (the field ``key`` of message ``index``); inside tool-call
    arguments keys and scalars too, so that their JSON is needles and punctuation only."""
    if isinstance(value, dict):
        result = {}
        for field, item in value.items():
            if field in KEPT_FIELDS and isinstance(item, str) and not in_arguments:
                result[field] = item
            elif field == "arguments" and isinstance(item, str) and not in_arguments:
                result[field] = _needled_json(item, index, needles)
            else:
                name = needles.text(index) if in_arguments else field
                result[name] = _needled(item, index, needles, field, in_arguments or field == "arguments")
        return result
    if isinstance(value, (list, tuple)):
        return [_needled(item, index, needles, key, in_arguments) for item in value]
    if isinstance(value, str) and value:
        return needles.call_id(index, value) if key in ID_FIELDS and not in_arguments else needles.text(index)
    if in_arguments and not isinstance(value, str):  # numbers, booleans, null: a needle too
        return needles.text(index)
    return value


def _needled_json(text: str, index: int, needles: Needles) -> str:
    """JSON-string arguments: the needle version of the data they hold, as JSON again."""
    try:
        data = json.loads(text)
    except ValueError:
        return needles.text(index) if text else text
    return json.dumps(_needled(data, index, needles, "arguments", True))


def expected_marks(text: str, owners: dict[str, frozenset[int]]) -> dict[int, frozenset[int]]:
    """Character offset -> the message indices it may be marked as, for every occurrence of every
    needle in ``text``."""
    marks: dict[int, frozenset[int]] = {}
    for needle, index in owners.items():
        pieces = {needle}
        if ID_NEEDLE.fullmatch(needle):  # the end of an id, from its last w on (`id[-9:]`)
            pieces |= {needle[start:] for start in range(needle.index("W"))}
        forms = {form for piece in pieces for form in (piece, piece.upper(), piece.lower())}  # (a template may change its case)
        for written in forms:
            at = text.find(written)
            while at >= 0:
                for offset in range(at, at + len(written)):
                    marks[offset] = index
                at = text.find(written, at + 1)
    return marks


def actual_marks(caller_ranges: list[tuple[int, int, int]]) -> dict[int, int]:
    """Character offset -> message index, from ``RenderOutput.caller_ranges()``."""
    return {offset: index for low, high, index in caller_ranges for offset in range(low, high)}


def attribution_mismatch(
    text: str, caller_ranges: list[tuple[int, int, int]], owners: dict[str, frozenset[int]]
) -> str | None:
    """None when the marks are exactly where the needles are (see the module docstring), else what
    differs: a wrong mark first (text marked as another message's, or marked though it is not caller
    text), then caller text left unmarked (see :func:`only_unmarked`)."""
    expected, actual = expected_marks(text, owners), actual_marks(caller_ranges)
    for offset in sorted(expected):
        if offset in actual and actual[offset] not in expected[offset]:
            whose = " or ".join(map(str, sorted(expected[offset])))
            return f"character {offset} ({_around(text, offset)}) is message {whose}'s text but marked as message {actual[offset]}'s"
    spelled = _needles_written_in_pieces(text, actual, expected, owners)
    for offset in sorted(actual):
        if (
            offset not in expected
            and offset not in spelled
            and text[offset] not in JSON_PUNCTUATION
            and not _slice_of_own_needle(text, actual, offset, owners)
        ):
            return (
                f"character {offset} ({_around(text, offset)}) is marked as message {actual[offset]}'s text but is not"
            )
    for offset in sorted(expected):
        if offset not in actual:
            whose = " or ".join(map(str, sorted(expected[offset])))
            return f"character {offset} ({_around(text, offset)}) is message {whose}'s text but {UNMARKED}"
    return None


def _needles_written_in_pieces(
    text: str, actual: dict[int, int], expected: dict[int, frozenset[int]], owners: dict[str, frozenset[int]]
) -> set[int]:
    """The marked characters that are a needle written in pieces: runs marked as one message's, with
    only unmarked template text between them, that spell one of its needles in order. A template
    that iterates over a message's string writes it a character at a time, each in text of its own
    (Command-A's tool results: ``{% for r in content %}"{{ loop.index0 }}": {{ r|tojson }}``): every
    piece is that message's text. Anything else marked between the pieces breaks the spelling."""
    runs: list[tuple[int, int, int]] = []  # (low, high, message) of marked text no whole needle covers
    for offset in sorted(actual):
        if offset in expected:
            continue
        if runs and runs[-1][1] == offset and runs[-1][2] == actual[offset]:
            runs[-1] = (runs[-1][0], offset + 1, actual[offset])
        else:
            runs.append((offset, offset + 1, actual[offset]))
    forms = {
        index: {form for needle, owner in owners.items() if index in owner for form in (needle, needle.upper(), needle.lower())}
        for index in {index for _, _, index in runs}
    }
    spelled: set[int] = set()
    pieces: list[tuple[int, int, int]] = []  # the runs spelling the start of a needle so far
    for run in runs:
        if pieces and pieces[-1][2] != run[2]:
            pieces = []  # another message's text between two pieces: not one needle
        word = "".join(text[low:high] for low, high, _ in pieces + [run])
        if not any(form.startswith(word) for form in forms[run[2]]):
            pieces, word = [], text[run[0] : run[1]]
            if not any(form.startswith(word) for form in forms[run[2]]):
                continue
        pieces.append(run)
        if word in forms[run[2]]:
            spelled.update(offset for low, high, _ in pieces for offset in range(low, high))
            pieces = []
    return spelled


def _slice_of_own_needle(text: str, actual: dict[int, int], offset: int, owners: dict[str, frozenset[int]]) -> bool:
    """Whether the marked run of text around ``offset`` is the start or the end of a needle of the
    message it is marked as: a template that cuts a message's string (``value[:n]``, ``id[-9:]``)
    writes that much of it, and it is that message's text."""
    index = actual[offset]
    low, high = offset, offset + 1
    while low > 0 and actual.get(low - 1) == index:
        low -= 1
    while actual.get(high) == index:
        high += 1
    piece = text[low:high]
    return any(
        written.startswith(piece) or written.endswith(piece)
        for needle, owner in owners.items()
        if index in owner
        for written in (needle, needle.upper(), needle.lower())
    )


UNMARKED = "unmarked"


def only_unmarked(problem: str) -> bool:
    """Whether an :func:`attribution_mismatch` is caller text the runtime lost the mark of (an
    operation it does not carry marks through): the render is exact, its ``is_content`` incomplete.
    ``verify`` counts these; a wrong mark fails it."""
    return problem.endswith(f"but {UNMARKED}")


def _around(text: str, offset: int) -> str:
    return f"{text[max(0, offset - 20):offset]!r} >>{text[offset]!r}<< {text[offset + 1:offset + 20]!r}"
