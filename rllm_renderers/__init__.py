"""Exact token-level chat renderers for RL rollouts.

Importing this package is cheap: it loads no jinja2, transformers or torch.
"""

from .types import ParsedResponse, ParsedToolCall, RenderedTokens, Renderer, ToolCallParseStatus

__all__ = ["ParsedResponse", "ParsedToolCall", "RenderedTokens", "Renderer", "ToolCallParseStatus"]
