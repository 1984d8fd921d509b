"""``create_renderer(tokenizer, renderer="auto", **config)``: the factory an engine calls.

The shape of PrimeIntellect's ``renderers.create_renderer`` as rLLM's model gateway calls it
(``create_renderer(tokenizer, renderer=config.renderer_family)``), so an engine switches with one
import change::

    from rllm_renderers import create_renderer      # was: from renderers import create_renderer
    renderer = create_renderer(tokenizer, renderer="auto")

``renderer``: ``"auto"`` (or None) resolves by the tokenizer alone: its chat template, else what
it holds (its fingerprint) and the name it was loaded under (``name_or_path``); any other string
is what ``resolve(..., renderer=...)`` takes: a generated module (``"qwen3_5"``), a PrimeIntellect
family name the project renders itself (``"qwen3.5"``, ``"deepseek-v4"``), ``"prime:<family>"``,
``"chat_template"``... ``**config``: template knobs (``enable_thinking=False``),
``thinking_retention`` (``"template"`` / ``"verbatim"``), ``chat_template_kwargs`` (the same
knobs as a dict, as PrimeIntellect's factory takes them) and ``allow_fallback``.

Returns the renderer itself; :func:`rllm_renderers.resolve` returns it with where it came from.
"""

from __future__ import annotations

from typing import Any

from .names import name_or_path
from .registry import resolve

__all__ = ["AUTO", "create_renderer"]

#: The ``renderer`` value that resolves by the tokenizer (PrimeIntellect's default family name).
AUTO = "auto"


def create_renderer(tokenizer: Any, renderer: str | None = AUTO, **config: Any) -> Any:
    """The renderer for ``tokenizer`` (see the module docstring); errors as ``resolve`` raises them."""
    if tokenizer is None:
        raise TypeError("create_renderer needs a tokenizer; for text-only use call resolve(model, None)")
    return resolve(name_or_path(tokenizer), tokenizer, renderer=renderer, **config).renderer
