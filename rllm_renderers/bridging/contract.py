"""What the bridge needs of a renderer, as a protocol.

:class:`~rllm_renderers.core.base.GeneratedRenderer` satisfies it. The bridge is written against
this protocol rather than the class, so the renderer core imports the bridge and never the other
way round.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

from ..turns.formats import ReasoningFormat, ToolCallFormat, TurnFormat
from .memory import PromptHistories

__all__ = ["BridgeableRenderer"]


class BridgeableRenderer(Protocol):
    """The renderer a bridge extends: its learned facts, its encoder and the template it runs."""

    # Facts the compiler learned (class constants of a generated renderer).
    TURN: TurnFormat
    REASONING: ReasoningFormat | None
    TOOL_CALLS: ToolCallFormat | None
    ROLES: tuple[str, ...]
    UNLEARNED: dict[str, str]

    # This instance's settings and state.
    thinking_retention: str
    plain_content_roles: Any
    prompt_histories: PromptHistories
    encoder: Any
    vocab_size: int
    generation_prompt: str
    turn_opening: str

    # Rendering and parsing, as the renderer does them.
    template_messages: Callable[..., list]
    template_tools: Callable[..., Any]
    get_stop_token_ids: Callable[[], list[int]]
    _run_template: Callable[..., Any]
    _plain_ranges: Callable[..., Any]
    _decode: Callable[[list[int]], str]
    _parse_turn: Callable[..., Any]
    _parse_facts: Callable[[], Any]
    _reasoning_prefilled: Callable[[str], bool]
