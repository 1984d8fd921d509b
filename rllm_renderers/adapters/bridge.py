"""The guarded bridge and token attribution shared by the tinker and chat-template adapters.

A backend that can only render whole conversations (tinker-cookbook renderers,
``apply_chat_template``) still gets a correct ``bridge_to_next_turn``:

1. every prompt the adapter renders with the generation prompt is remembered, with the messages
   behind it, in a small bounded memo (:class:`PromptMemo`);
2. to bridge, the adapter looks the previous prompt up, cuts the completion at its first stop
   token (or appends the close token when it was truncated), parses it back into an assistant
   message with the backend's own parser, and renders history + that message + the new messages
   with the generation prompt;
3. the result is returned only if it starts with ``previous_prompt_ids + completion`` token for
   token; otherwise (unknown prompt, an assistant turn among the new messages, a template that
   rewrites history, a completion that does not re-tokenize to itself) the answer is ``None``.

Never a third outcome: a returned bridge always extends the previous ids byte for byte.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from .. import forksafe
from ..turns.parsing import as_token_ids
from ..turns.boundaries import cut_at_stop, tool_names
from ..types import Message, ParsedResponse, RenderedTokens, ToolSpec

logger = logging.getLogger(__name__)

__all__ = ["BridgedAdapter", "PromptMemo", "attribute_tokens", "cut_at_stop", "tool_names"]

RenderIds = Callable[[list[Message], bool], list[int]]


class PromptMemo:
    """Bounded, thread-safe map from rendered prompt ids to the conversation that produced them."""

    def __init__(self, capacity: int = 256) -> None:
        self.capacity = capacity
        self._lock = threading.Lock()
        self._items: OrderedDict[tuple[int, ...], tuple[list[Message], list[ToolSpec] | None]] = OrderedDict()
        forksafe.track(self)

    def _after_fork(self) -> None:
        """In a forked child (rllm_renderers.forksafe): a new lock, nothing remembered."""
        self._lock = threading.Lock()
        self._items = OrderedDict()

    def remember(self, ids: Sequence[int], messages: list[Message], tools: list[ToolSpec] | None) -> None:
        entry = (copy.deepcopy(list(messages)), copy.deepcopy(tools))
        with self._lock:
            key = tuple(ids)
            self._items[key] = entry
            self._items.move_to_end(key)
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)

    def recall(self, ids: Sequence[int]) -> tuple[list[Message], list[ToolSpec] | None] | None:
        with self._lock:
            entry = self._items.get(tuple(ids))
        return None if entry is None else copy.deepcopy(entry)

    def __len__(self) -> int:
        return len(self._items)


def _starts_with(ids: list[int], prefix: list[int]) -> bool:
    return len(ids) >= len(prefix) and ids[: len(prefix)] == prefix


def attribute_tokens(
    render: RenderIds, messages: list[Message], full_ids: list[int], *, first: int = 0, floor: int = 0
) -> tuple[list[int], bool]:
    """Message index of each token of ``full_ids``, found by rendering growing prefixes.

    Tokens from ``floor`` up to the end of ``render(messages[:k+1])`` that no earlier message
    claimed belong to message ``k`` (``k >= first``), reported relative to ``first``; all other
    tokens are -1. Attribution stops, leaving -1, at the first prefix render that ``full_ids``
    does not start with: a template that renders a message differently when it is last (Qwen3's
    reasoning block) or rewrites earlier turns. Returns the indices and whether every message
    from ``first`` on was attributed.
    """
    indices = [-1] * len(full_ids)
    position = floor
    for k in range(first, len(messages)):
        try:
            prefix = render(messages[: k + 1], False)
        except Exception:  # noqa: BLE001 - a prefix the template rejects just ends attribution
            return indices, False
        if len(prefix) < position or not _starts_with(full_ids, prefix):
            return indices, False
        for p in range(position, len(prefix)):
            indices[p] = k - first
        position = len(prefix)
    return indices, True


def sampled_tokens(
    render: RenderIds, messages: list[Message], full_ids: list[int], indices: list[int], stop_ids: Sequence[int]
) -> list[bool]:
    """True for the tokens the model produces: an assistant message's tokens after the generation
    prompt that precedes it, up to and including its first stop token."""
    mask = [False] * len(full_ids)
    stops = set(stop_ids)
    for k, message in enumerate(messages):
        if k == 0 or message.get("role") != "assistant" or k not in indices:
            continue
        start, end = indices.index(k), len(indices) - indices[::-1].index(k)
        try:
            prompt = render(messages[:k], True)
        except Exception:  # noqa: BLE001
            continue
        if not _starts_with(full_ids, prompt) or not start <= len(prompt) <= end:
            continue
        for p in range(len(prompt), end):
            mask[p] = True
            if full_ids[p] in stops:
                break
    return mask


class BridgedAdapter(ABC):
    """Protocol methods for a backend that renders whole conversations and parses completions.

    Subclasses implement :meth:`_render_ids` (the backend's render), :meth:`_parse` (its parser),
    :meth:`_completion_messages` (the assistant message(s) a completion may stand for, tried in
    order when bridging), :meth:`get_stop_token_ids` and :attr:`close_token_id`.
    """

    #: Vocabulary size for id sanitising (None: no upper bound).
    vocab_size: int | None = None

    def __init__(self) -> None:
        self._memo = PromptMemo()

    # --- what a backend supplies ---------------------------------------------------

    @abstractmethod
    def _render_ids(
        self, messages: list[Message], tools: list[ToolSpec] | None, add_generation_prompt: bool
    ) -> list[int]:
        """Supplied by each backend."""

    @abstractmethod
    def _parse(self, token_ids: list[int], tools: list[ToolSpec] | None) -> ParsedResponse:
        """Supplied by each backend."""

    @abstractmethod
    def _completion_messages(self, completion_ids: list[int]) -> list[Message]:
        """Supplied by each backend."""

    @abstractmethod
    def get_stop_token_ids(self) -> list[int]:
        """Supplied by each backend."""

    @property
    def close_token_id(self) -> int | None:
        """The token that closes an assistant turn (appended to truncated completions)."""
        stops = self.get_stop_token_ids()
        return stops[0] if stops else None

    @property
    def is_prefix_stable(self) -> bool:
        return False

    # --- the protocol ------------------------------------------------------------------

    def render_ids(
        self, messages: list[Message], *, tools: list[ToolSpec] | None = None, add_generation_prompt: bool = False
    ) -> list[int]:
        ids = [int(t) for t in self._render_ids(list(messages), tools, add_generation_prompt)]
        if add_generation_prompt:
            self._memo.remember(ids, messages, tools)
        return ids

    def render(
        self, messages: list[Message], *, tools: list[ToolSpec] | None = None, add_generation_prompt: bool = False
    ) -> RenderedTokens:
        """Token ids with attribution from prefix renders.

        ``sampled_mask`` is filled when every message could be attributed and is empty otherwise
        (``renderers``' convention for "no signal"); ``is_content`` is always empty: a whole-
        conversation backend cannot tell body bytes from scaffolding.
        """
        messages = list(messages)
        ids = self.render_ids(messages, tools=tools, add_generation_prompt=add_generation_prompt)
        render = self._prefix_render(tools)
        indices, complete = attribute_tokens(render, messages, ids)
        sampled = sampled_tokens(render, messages, ids, indices, self.get_stop_token_ids()) if complete else []
        return RenderedTokens(
            token_ids=ids,
            message_indices=indices,
            sampled_mask=sampled,
            is_content=[],
            message_roles=[str(m.get("role", "")) for m in messages],
            message_tool_names=tool_names(messages),
        )

    def parse_response(
        self, token_ids: list[int], *, tools: list[ToolSpec] | None = None, prompt_ids: list[int] | None = None
    ) -> ParsedResponse:
        """The backend's parse of the completion; never raises on ids of the vocabulary (a parser
        failure yields the best-effort decoded text as content). Anything else is refused as a
        generated renderer refuses it: a TypeError, or a ValueError naming an id outside the vocabulary."""
        ids = as_token_ids(token_ids, "token_ids", self.vocab_size)
        try:
            return self._parse(ids, tools)
        except Exception as exc:  # noqa: BLE001 - the contract is "never raises"
            logger.debug("%s: parser failed (%s); returning the raw text", type(self).__name__, exc)
            return ParsedResponse(content=self._decode_lenient(ids), reasoning_complete=None)

    def _decode_lenient(self, ids: list[int]) -> str:
        return ""

    def bridge_to_next_turn(
        self,
        previous_prompt_ids: list[int],
        previous_completion_ids: list[int],
        new_messages: list[Message],
        *,
        tools: list[ToolSpec] | None = None,
        messages: list[Message] | None = None,  # accepted as generated renderers do; the memory below is used
    ) -> RenderedTokens | None:
        new_messages = list(new_messages)
        if not new_messages or any(m.get("role") == "assistant" for m in new_messages):
            return None
        prompt = as_token_ids(previous_prompt_ids, "previous_prompt_ids", self.vocab_size)
        completion_ids = as_token_ids(previous_completion_ids, "previous_completion_ids", self.vocab_size)
        recalled = self._memo.recall(prompt)
        if recalled is None:
            return None
        history, prompt_tools = recalled
        if tools is not None and tools != prompt_tools:
            return None
        completion = cut_at_stop(completion_ids, self.get_stop_token_ids(), self.close_token_id)
        if completion is None:
            return None
        expected = prompt + completion
        try:
            candidates = self._completion_messages(completion)
        except Exception:  # noqa: BLE001
            return None
        for assistant in candidates:
            conversation = history + [assistant] + new_messages
            try:
                ids = [int(t) for t in self._render_ids(conversation, prompt_tools, True)]
            except Exception:  # noqa: BLE001 - the template rejects this history: re-render
                continue
            if len(ids) <= len(expected) or ids[: len(expected)] != expected:
                continue
            self._memo.remember(ids, conversation, prompt_tools)
            indices, _ = attribute_tokens(
                self._prefix_render(prompt_tools), conversation, ids, first=len(history) + 1, floor=len(expected)
            )
            return RenderedTokens(
                token_ids=ids,
                message_indices=indices,
                sampled_mask=[False] * len(ids),  # nothing in a prompt was sampled (prime's convention)
                is_content=[],
                message_roles=[str(m.get("role", "")) for m in new_messages],
                message_tool_names=tool_names(new_messages),
            )
        return None

    def _prefix_render(self, tools: list[ToolSpec] | None) -> RenderIds:
        return lambda messages, generation_prompt: self._render_ids(messages, tools, generation_prompt)

    # --- pickling: the memo is per process --------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_memo"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._memo = PromptMemo()
