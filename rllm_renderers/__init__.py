"""Exact token-level chat renderers for RL rollouts.

Importing this package is cheap: it loads no jinja2, transformers or torch.
"""

from .types import ParsedResponse, ParsedToolCall, RenderedTokens, Renderer, ToolCallParseStatus

__all__ = [
    "ParsedResponse",
    "ParsedToolCall",
    "RenderedTokens",
    "Renderer",
    "Resolution",
    "ToolCallParseStatus",
    "create_renderer",
    "get_renderer",
    "resolve",
]

# Loaded on first use (PEP 562), so `import rllm_renderers` stays free of the backends.
_LAZY = {
    "resolve": "core.registry",
    "get_renderer": "core.registry",
    "Resolution": "core.registry",
    "create_renderer": "core.factory",
}


def __getattr__(name: str):
    if name in _LAZY:
        from importlib import import_module

        value = getattr(import_module(f"{__name__}.{_LAZY[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
