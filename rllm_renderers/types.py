"""Result types and the renderer protocol.

Names and field layout follow PrimeIntellect's ``renderers`` package (0.1.12), so a
generated renderer also satisfies that package's runtime-checkable ``Renderer``
protocol and its results convert field by field.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any, Callable, Protocol, runtime_checkable

Message = dict[str, Any]
ToolSpec = dict[str, Any]


@dataclass
class RenderedTokens:
    """Token ids of a render plus per-token attribution.

    ``message_indices[k]`` is the index of the message token ``k`` was rendered
    for, or -1 for scaffolding outside any message (e.g. the generation prompt).
    ``sampled_mask[k]`` is True when the model itself produces token ``k`` in an
    assistant turn (content, reasoning, tool calls, the close token it samples).
    ``is_content[k]`` is True when token ``k`` comes from message-body bytes.
    """

    token_ids: list[int] = field(default_factory=list)
    message_indices: list[int] = field(default_factory=list)
    sampled_mask: list[bool] = field(default_factory=list)
    is_content: list[bool] = field(default_factory=list)
    message_roles: list[str] = field(default_factory=list)
    message_tool_names: list[str | None] = field(default_factory=list)
    multi_modal_data: Any = None

    def tokens_per_message(self, n_messages: int | None = None, *, sampled_only: bool = False) -> list[int]:
        """Number of tokens attributed to each message (optionally only sampled ones)."""
        if n_messages is None:
            n_messages = len(self.message_roles)
        counts = [0] * n_messages
        for k, index in enumerate(self.message_indices):
            if 0 <= index < n_messages and (not sampled_only or self.sampled_mask[k]):
                counts[index] += 1
        return counts


class BridgedTokens(RenderedTokens):
    """A bridge's result (``bridge_to_next_turn``).

    By contract its attribution over the previous prompt and completion is uniform: message index
    -1, not sampled, not content (the bridge gets those tokens as bare ids). Those per-token lists
    are as long as the whole conversation, and most callers never read them, so they are built when
    first read, with the attribution of the tokens the bridge added (``added_attribution()``: their
    message indices and content flags). ``token_ids`` is a plain list like any render's. Equal to a
    :class:`RenderedTokens` with the same lists, and converted field by field like one.
    """

    def __init__(
        self,
        token_ids: list[int] | None = None,
        message_indices: list[int] | None = None,
        sampled_mask: list[bool] | None = None,
        is_content: list[bool] | None = None,
        message_roles: list[str] | None = None,
        message_tool_names: list[str | None] | None = None,
        multi_modal_data: Any = None,
        *,
        added: int = 0,
        added_attribution: Callable[[], tuple[list[int], list[bool]]] | None = None,
    ) -> None:
        self.token_ids = [] if token_ids is None else token_ids
        self.message_roles = [] if message_roles is None else message_roles
        self.message_tool_names = [] if message_tool_names is None else message_tool_names
        self.multi_modal_data = multi_modal_data
        # (lists given by name, as dataclasses.replace passes them, are taken as they are)
        self._lists = {"message_indices": message_indices, "sampled_mask": sampled_mask, "is_content": is_content}
        self._added = added
        self._added_attribution = added_attribution or (lambda: ([-1] * added, [False] * added))

    def _list(self, name: str) -> list:
        value = self._lists[name]
        if value is None:
            known = len(self.token_ids) - self._added
            if name == "sampled_mask":
                value = [False] * len(self.token_ids)
            else:
                if callable(self._added_attribution):  # (asked once, for both lists)
                    self._added_attribution = self._added_attribution()
                indices, content = self._added_attribution
                value = [-1] * known + indices if name == "message_indices" else [False] * known + content
            self._lists[name] = value
        return value

    message_indices = property(lambda self: self._list("message_indices"), lambda self, v: self._set("message_indices", v))
    sampled_mask = property(lambda self: self._list("sampled_mask"), lambda self, v: self._set("sampled_mask", v))
    is_content = property(lambda self: self._list("is_content"), lambda self, v: self._set("is_content", v))

    def _set(self, name: str, value: list) -> None:
        self._lists[name] = value

    def __reduce__(self):
        """Pickled (and copied) with its lists built: what builds them lives in the renderer."""
        return (type(self), tuple(getattr(self, item.name) for item in fields(RenderedTokens)))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RenderedTokens):
            return NotImplemented
        return all(getattr(self, item.name) == getattr(other, item.name) for item in fields(RenderedTokens))

    __hash__ = None  # type: ignore[assignment]  (mutable, as RenderedTokens)

    def __repr__(self) -> str:
        values = ", ".join(f"{item.name}={getattr(self, item.name)!r}" for item in fields(RenderedTokens))
        return f"{type(self).__name__}({values})"


class ToolCallParseStatus(str, Enum):
    """Outcome of parsing one tool-call attempt (values as in ``renderers``)."""

    OK = "ok"
    INVALID_JSON = "invalid_json"
    UNCLOSED_BLOCK = "unclosed_block"
    MISSING_NAME = "missing_name"
    MALFORMED_STRUCTURE = "malformed_structure"
    UNKNOWN_TOOL = "unknown_tool"

    def __str__(self) -> str:
        return self.value


@dataclass
class ParsedToolCall:
    """One tool-call attempt as the model emitted it, successful or not."""

    raw: str
    name: str | None = None
    arguments: dict[str, Any] | str | None = None
    token_span: tuple[int, int] | None = None
    status: ToolCallParseStatus = ToolCallParseStatus.OK
    id: str | None = None
    #: Why the call could not be read, where its status alone does not say (arguments nested past
    #: the recursion limit); None otherwise.
    reason: str | None = None


@dataclass
class ParsedResponse:
    """A completion parsed back into an assistant message."""

    content: str
    reasoning_content: str | None = None
    tool_calls: list[ParsedToolCall] = field(default_factory=list)
    reasoning_complete: bool | None = True
    #: "ok", or "unlearned" when the renderer does not know the turn syntax needed to split the
    #: completion (its class's ``UNLEARNED`` says what and why): ``content`` is then the raw text.
    status: str = "ok"


@runtime_checkable
class Renderer(Protocol):
    """Message <-> token conversion for one chat template (prime-rl's shape)."""

    @property
    def is_prefix_stable(self) -> bool: ...

    def render(
        self, messages: list[Message], *, tools: list[ToolSpec] | None = None, add_generation_prompt: bool = False
    ) -> RenderedTokens: ...

    def render_ids(
        self, messages: list[Message], *, tools: list[ToolSpec] | None = None, add_generation_prompt: bool = False
    ) -> list[int]: ...

    def parse_response(
        self, token_ids: list[int], *, tools: list[ToolSpec] | None = None, prompt_ids: list[int] | None = None
    ) -> ParsedResponse: ...

    def get_stop_token_ids(self) -> list[int]: ...

    def bridge_to_next_turn(
        self,
        previous_prompt_ids: list[int],
        previous_completion_ids: list[int],
        new_messages: list[Message],
        *,
        tools: list[ToolSpec] | None = None,
    ) -> RenderedTokens | None: ...
