"""Result types and the renderer protocol.

Names and field layout follow PrimeIntellect's ``renderers`` package (0.1.12), so a
generated renderer also satisfies that package's runtime-checkable ``Renderer``
protocol and its results convert field by field.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol, runtime_checkable

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
