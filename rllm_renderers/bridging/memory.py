"""What a renderer remembers of the prompts it produced, so that the bridge can go on from them.

A prompt's :class:`History` is the conversation behind it as the template saw it, the template's
text for it, and the message loop's checkpoint (:mod:`rllm_renderers.bridging.resume`); the renderer keeps
the histories of its recent prompts in :class:`PromptHistories`, keyed by the prompt's ids. The text
of a bridged prompt is a :class:`PromptText`: the previous prompt's text up to where the bridge's
render resumed, then the new text, with no copy of the shared part.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, NamedTuple

from .. import forksafe

#: Tokens at the end of a prompt that key it in memory (with its length).
PROMPT_TAIL_TOKENS = 16
#: Prompts kept under one key (equal length and last tokens: almost always the same prompt again).
BUCKET_SIZE = 4


class PromptText:
    """The text of ``head`` up to character ``cut``, then ``tail``: a prompt's text that shares its
    beginning with an earlier prompt's (``head``, a str or another PromptText)."""

    __slots__ = ("head", "cut", "tail", "_text")

    def __init__(self, head: "str | PromptText", cut: int, tail: str) -> None:
        self.head, self.cut, self.tail = head, cut, tail
        self._text: str | None = None

    def __len__(self) -> int:
        return self.cut + len(self.tail)

    def __str__(self) -> str:
        """The whole text, joined once (walking the chain of heads, not recursing down it)."""
        if self._text is None:
            pieces, node = [], self
            while isinstance(node, PromptText) and node._text is None:
                pieces.append((node.cut, node.tail))
                node = node.head
            text = node if isinstance(node, str) else node._text
            for cut, tail in reversed(pieces):
                text = text[:cut] + tail
            self._text = text
        return self._text

    def text_from(self, offset: int) -> str:
        """The text from character ``offset`` on."""
        return self.tail[offset - self.cut :] if offset >= self.cut else str(self)[offset:]

    def endswith(self, suffix: str) -> bool:
        return self.tail.endswith(suffix) if len(suffix) <= len(self.tail) else str(self).endswith(suffix)


def text_from(text: "str | PromptText", offset: int) -> str:
    """``text[offset:]`` of a str or a :class:`PromptText`."""
    return text[offset:] if isinstance(text, str) else text.text_from(offset)


class History(NamedTuple):
    """A conversation as the template sees it (converted messages and tools), and, when known, the
    template's text for it with the generation prompt.  (A named tuple: one is made per
    ``render_ids`` with the generation prompt, and a frozen dataclass costs four times as much.)"""

    messages: list
    tools: Any
    prompt_text: "str | PromptText | None" = None
    checkpoint: Any = None  # where a render of a longer conversation may resume (rllm_renderers.resume)


class Recalled(NamedTuple):
    """A remembered prompt: its ids are ``store[:length]`` (the store is the renderer's own list, which
    later prompts of the same episode may have grown past ``length``) and ``history`` is behind them."""

    store: list
    length: int
    history: History
    #: the other histories remembered for the same ids (another session whose messages render to the
    #: same prompt: a user who typed the control tokens that spell another conversation's turns)
    others: tuple = ()

    def ids(self) -> list[int]:
        """A fresh list of the prompt's ids (the renderer's own ints)."""
        return self.store[: self.length]


class PromptHistories:
    """The conversations behind the prompts a renderer produced, so that the bridge can go on
    from a prompt without being handed its messages.

    Found by the prompt's length and last ids, then confirmed by comparing the whole prompt with
    the renderer's own copy of it (one C pass; the caller's list usually shares its int objects
    with the renderer's result, so each comparison is an identity check): no hash of the whole
    prompt is computed on either side. The copies of an episode's prompts share one list: a bridged
    prompt that extends the latest one stored there is remembered by growing that list in place,
    with no copy of what the two share. Bounded (least recently used prompts go first) and
    thread-safe; a copied or unpickled renderer starts empty.
    """

    def __init__(self, size: int = 256) -> None:
        self.size = size
        self._entries: OrderedDict = OrderedDict()  # (length, last ids) -> [Recalled, ...]
        self._count = 0
        self._lock = threading.Lock()
        forksafe.track(self)

    def _after_fork(self) -> None:
        """In a forked child (rllm_renderers.forksafe): a new lock; the prompts are forgotten (an
        entry a thread of the parent was writing is never read)."""
        self._lock = threading.Lock()
        self._entries = OrderedDict()
        self._count = 0

    def __reduce__(self):
        return (PromptHistories, (self.size,))

    @staticmethod
    def _key(ids: list[int]) -> tuple[int, tuple]:
        return (len(ids), tuple(ids[-PROMPT_TAIL_TOKENS:]))

    def remember(self, ids: list[int], history: History, *, extends: Recalled | None = None) -> None:
        """Remember ``history`` for ``ids`` (kept as the renderer's own copy: the caller may go on to
        change its list). ``extends``: the remembered prompt ``ids`` starts with, whose store grows in
        place when that prompt is still the latest in it."""
        key, length = self._key(ids), len(ids)
        own = None
        if extends is None or len(extends.store) != extends.length:
            own = ids.copy() if type(ids) is list else list(ids)
        with self._lock:
            if own is None and len(extends.store) == extends.length:
                own = extends.store
                own += ids[extends.length :]
            elif own is None:  # another prompt was stored after it meanwhile
                own = extends.store[: extends.length] + ids[extends.length :]
            entry = Recalled(own, length, history)
            bucket = self._entries.get(key)
            if bucket is None:  # the common case: a prompt not seen before
                self._entries[key] = [entry]
                self._count += 1
            else:  # most recent first: recall finds it before an older entry of equal ids
                self._entries.move_to_end(key)
                self._count -= len(bucket)
                bucket[:] = [entry, *bucket[: BUCKET_SIZE - 1]]
                self._count += len(bucket)
            while self._count > self.size:
                _, dropped = self._entries.popitem(last=False)
                self._count -= len(dropped)

    def recall(self, ids: list[int]) -> Recalled | None:
        """The remembered prompt equal to ``ids`` (the latest), or None for ids the renderer does not
        know. Every other history remembered for the same ids and unlike the latest's is in its
        ``others``: the prompt alone does not say which one it holds (the bridge goes on only where
        they all give the same tokens)."""
        try:
            key = self._key(ids)
            hash(key)
        except TypeError:  # unhashable elements: not a prompt this renderer produced
            return None
        found = []
        with self._lock:
            bucket = self._entries.get(key, ())
            for position, entry in enumerate(bucket):
                if len(entry.store) != entry.length:  # a later prompt grew its store: give it its own
                    entry = bucket[position] = Recalled(entry.ids(), entry.length, entry.history)
                if entry.store == ids:
                    found.append(entry)
            if found:
                self._entries.move_to_end(key)
        if not found:
            return None
        latest = found[0]
        others = []
        for entry in found[1:]:
            if not same_history(entry.history, latest.history) and not any(
                same_history(entry.history, other) for other in others
            ):
                others.append(entry.history)
        return latest._replace(others=tuple(others)) if others else latest


def same_history(first: History, second: History) -> bool:
    """Whether two remembered histories are the same conversation and tools."""
    return first.messages == second.messages and (first.tools is second.tools or first.tools == second.tools)
