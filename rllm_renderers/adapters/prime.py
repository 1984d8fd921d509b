"""PrimeIntellect's ``renderers`` package (the ``prime`` extra), both ways round.

**As a backend.** :func:`family_for_model` looks ``model`` up in ``renderers``' static
``MODEL_RENDERER_MAP`` only: its ``create_renderer`` auto-resolution would probe the Hugging
Face Hub for an unknown model (and retry for ~23 s) before settling on ``DefaultRenderer``,
which ``resolve`` does not count as a match anyway. :func:`create` builds the renderer from an
explicit typed config, a path with no network access. gpt-oss renders through
``openai_harmony``, which downloads the o200k vocabulary on first use; :func:`ensure_harmony_vocab`
writes it from the gpt-oss tokenizer's own BPE table instead (checked against the published
sha256) and points ``TIKTOKEN_ENCODINGS_BASE`` at it. :class:`PrimeAdapter` wraps the renderer so
results come back as our types, ``parse_response`` never raises and a bridge is re-checked.

**As a host.** prime-rl's ``custom`` renderer config loads ``import_path`` with
``renderers.load_custom_renderer``, which wants a class with a ``config_class`` (a
``BaseRendererConfig``) constructed as ``cls(tokenizer, config)``. Every generated renderer is
available in that shape from this module under its class name, with the template knobs as
config fields::

    [renderer]
    name = "custom"
    import_path = "rllm_renderers.adapters.prime:Qwen3Renderer"
    enable_thinking = false
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

from .. import forksafe
from ..types import ParsedResponse, ParsedToolCall, RenderedTokens, ToolCallParseStatus
from ..turns.parsing import as_token_ids
from .bridge import cut_at_stop

logger = logging.getLogger(__name__)

__all__ = ["PrimeAdapter", "create", "ensure_harmony_vocab", "family_for_model", "prime_renderer_class"]

#: Renderer families that render through openai_harmony (and so need the o200k vocabulary).
HARMONY_FAMILIES = frozenset({"gpt-oss"})
#: sha256 of o200k_base.tiktoken as openai_harmony expects it.
O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"


# --- the backend ------------------------------------------------------------------------


def family_for_model(model: str) -> str | None:
    """The family ``renderers`` maps ``model`` to, by exact name (ImportError without the extra)."""
    from renderers.base import MODEL_RENDERER_MAP

    return MODEL_RENDERER_MAP.get(model)


def config_for(family: str, chat_template_kwargs: dict[str, Any] | None = None) -> Any:
    """The typed config of ``family`` with the template kwargs applied.

    Raises LookupError for an unknown family, ValueError for a kwarg the family does not take.
    """
    from renderers import config_from_name, merge_chat_template_kwargs

    try:
        config = config_from_name(family)
    except ValueError as exc:
        raise LookupError(str(exc)) from None
    if config is None or family in ("default", "custom"):
        raise LookupError(f"{family!r} is not a model-specific renderers family")
    return merge_chat_template_kwargs(config, chat_template_kwargs or None)


def create(family: str, tokenizer: Any, chat_template_kwargs: dict[str, Any] | None = None) -> PrimeAdapter:
    """Build ``renderers``' renderer for ``family`` from an explicit config (never auto-resolution)."""
    from renderers import create_renderer

    config = config_for(family, chat_template_kwargs)
    if family in HARMONY_FAMILIES:
        ensure_harmony_vocab(tokenizer)
    return PrimeAdapter(create_renderer(tokenizer, config), family=family, config=config)


# --- openai_harmony's vocabulary, offline -----------------------------------------------

_harmony_lock = threading.Lock()


def _new_harmony_lock() -> None:
    global _harmony_lock
    _harmony_lock = threading.Lock()


forksafe.in_child(_new_harmony_lock)


def _byte_decoder() -> dict[str, int]:
    """Inverse of GPT-2's bytes_to_unicode: the byte behind each character of a BPE token string."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = list(printable)
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars)}


def tiktoken_vocab(tokenizer: Any) -> bytes:
    """The tokenizer's byte-level BPE table in tiktoken's file format (``base64 rank`` lines)."""
    model = json.loads(tokenizer.backend_tokenizer.to_str())["model"]
    decoder = _byte_decoder()
    lines = []
    for token, rank in sorted(model["vocab"].items(), key=lambda item: item[1]):
        lines.append(base64.b64encode(bytes(decoder[ch] for ch in token)) + b" " + str(rank).encode() + b"\n")
    return b"".join(lines)


def ensure_harmony_vocab(tokenizer: Any) -> None:
    """Make openai_harmony load o200k_base from disk instead of downloading it.

    Leaves a user's ``TIKTOKEN_ENCODINGS_BASE`` alone. Otherwise writes the vocabulary derived
    from ``tokenizer`` (after checking its sha256) to ``$XDG_CACHE_HOME/rllm_renderers/tiktoken``
    and sets ``TIKTOKEN_ENCODINGS_BASE`` there. Raises RuntimeError when the tokenizer's table is
    not o200k_base.
    """
    if os.environ.get("TIKTOKEN_ENCODINGS_BASE"):
        return
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rllm_renderers" / "tiktoken"
    target = cache / "o200k_base.tiktoken"
    with _harmony_lock:
        if not (target.is_file() and hashlib.sha256(target.read_bytes()).hexdigest() == O200K_SHA256):
            try:
                data = tiktoken_vocab(tokenizer)
            except Exception as exc:  # noqa: BLE001 - not a byte-level BPE tokenizer
                raise RuntimeError(f"cannot derive the o200k vocabulary from this tokenizer: {exc}") from exc
            if hashlib.sha256(data).hexdigest() != O200K_SHA256:
                raise RuntimeError("the tokenizer's BPE table is not o200k_base; openai_harmony would download it")
            cache.mkdir(parents=True, exist_ok=True)
            partial = target.with_suffix(f".{os.getpid()}.partial")
            partial.write_bytes(data)
            partial.replace(target)
        os.environ["TIKTOKEN_ENCODINGS_BASE"] = str(cache)
        logger.info("openai_harmony reads o200k_base from %s (derived from the tokenizer)", cache)


# --- result conversion and the wrapper --------------------------------------------------


def _rendered(result: Any) -> RenderedTokens:
    return RenderedTokens(
        token_ids=[int(t) for t in result.token_ids],
        message_indices=list(result.message_indices),
        sampled_mask=list(getattr(result, "sampled_mask", []) or []),
        is_content=list(getattr(result, "is_content", []) or []),
        message_roles=list(getattr(result, "message_roles", []) or []),
        message_tool_names=list(getattr(result, "message_tool_names", []) or []),
        multi_modal_data=getattr(result, "multi_modal_data", None),
    )


def _parsed(result: Any) -> ParsedResponse:
    calls = [
        ParsedToolCall(
            raw=call.raw,
            name=call.name,
            arguments=call.arguments,
            token_span=call.token_span,
            status=ToolCallParseStatus(str(call.status)),
            id=call.id,
        )
        for call in result.tool_calls
    ]
    return ParsedResponse(
        content=result.content,
        reasoning_content=result.reasoning_content,
        tool_calls=calls,
        reasoning_complete=result.reasoning_complete,
    )


class PrimeAdapter:
    """A ``renderers`` renderer (``inner``) returning our result types.

    ``parse_response`` drops ids outside the vocabulary and never raises; a bridge is returned
    only if it starts with the previous prompt + completion (cut at its first stop token).
    """

    def __init__(self, inner: Any, *, family: str, config: Any) -> None:
        self.inner = inner
        self.family = family
        self.config = config
        self.tokenizer = getattr(inner, "tokenizer", None) or getattr(inner, "_tokenizer", None)

    def __repr__(self) -> str:
        return f"PrimeAdapter({self.family!r}, {type(self.inner).__name__})"

    @property
    def is_prefix_stable(self) -> bool:
        return bool(self.inner.is_prefix_stable)

    def render(self, messages, *, tools=None, add_generation_prompt=False) -> RenderedTokens:
        return _rendered(self.inner.render(messages, tools=tools, add_generation_prompt=add_generation_prompt))

    def render_ids(self, messages, *, tools=None, add_generation_prompt=False) -> list[int]:
        return [
            int(t) for t in self.inner.render_ids(messages, tools=tools, add_generation_prompt=add_generation_prompt)
        ]

    def get_stop_token_ids(self) -> list[int]:
        return [int(t) for t in self.inner.get_stop_token_ids()]

    def parse_response(self, token_ids, *, tools=None, prompt_ids=None) -> ParsedResponse:
        vocab = len(self.tokenizer) if self.tokenizer is not None else None
        ids = as_token_ids(token_ids, "token_ids", vocab)  # a TypeError, or a ValueError naming an id outside
        try:
            return _parsed(self.inner.parse_response(ids, tools=tools, prompt_ids=prompt_ids))
        except Exception as exc:  # noqa: BLE001 - the contract is "never raises"
            logger.debug("renderers %s parser failed (%s); returning the raw text", self.family, exc)
            try:
                text = self.tokenizer.decode(ids, skip_special_tokens=True)
            except Exception:  # noqa: BLE001
                text = ""
            return ParsedResponse(content=text, reasoning_complete=None)

    def bridge_to_next_turn(self, previous_prompt_ids, previous_completion_ids, new_messages, *, tools=None, messages=None):
        # ``messages`` is accepted as generated renderers do; prime's bridge works from ids alone
        vocab = len(self.tokenizer) if self.tokenizer is not None else None
        prompt = as_token_ids(previous_prompt_ids, "previous_prompt_ids", vocab)
        completion = as_token_ids(previous_completion_ids, "previous_completion_ids", vocab)
        result = self.inner.bridge_to_next_turn(list(prompt), list(completion), new_messages, tools=tools)
        if result is None:
            return None
        cut = cut_at_stop(completion, self.get_stop_token_ids(), None) or completion
        expected = prompt + cut
        ids = [int(t) for t in result.token_ids]
        if ids[: len(expected)] != expected:
            logger.warning("renderers %s returned a bridge that does not extend the previous ids; ignored", self.family)
            return None
        return _rendered(result)

    def __getstate__(self) -> dict[str, Any]:
        return {"family": self.family, "config": self.config, "tokenizer": self.tokenizer}

    def __setstate__(self, state: dict[str, Any]) -> None:
        from renderers import create_renderer

        if state["family"] in HARMONY_FAMILIES:
            ensure_harmony_vocab(state["tokenizer"])
        self.__init__(
            create_renderer(state["tokenizer"], state["config"]), family=state["family"], config=state["config"]
        )


# --- generated renderers in prime-rl's custom-renderer shape ------------------------------

_prime_classes: dict[type, type] = {}
_prime_classes_lock = threading.Lock()


def _new_prime_classes_lock() -> None:
    global _prime_classes_lock
    _prime_classes_lock = threading.Lock()


forksafe.in_child(_new_prime_classes_lock)


def config_class_for(generated_cls: type) -> type:
    """A ``renderers`` config class whose fields are ``generated_cls``'s template knobs (None: unset).

    ``GeneratedRenderer.config_class`` returns it, so prime-rl's ``custom`` renderer config can
    load a generated class by its own import path (``rllm_renderers.generated.qwen3.Qwen3Renderer``).
    """
    from renderers.configs import BaseRendererConfig

    name = generated_cls.__name__
    with _prime_classes_lock:
        if generated_cls not in _prime_classes:
            knobs = tuple(generated_cls.KNOBS)
            _prime_classes[generated_cls] = type(
                f"{name}Config",
                (BaseRendererConfig,),
                {
                    "__module__": __name__,
                    "__doc__": f"Template knobs of {generated_cls.__module__}.{name} (None: the template default).",
                    "__annotations__": {knob: Any for knob in knobs},
                    **{knob: None for knob in knobs},
                    "_template_fields": frozenset(knobs),
                    "_internal_fields": frozenset(),
                },
            )
        return _prime_classes[generated_cls]


def to_prime_result(result: RenderedTokens | ParsedResponse) -> Any:
    """Our ``RenderedTokens`` / ``ParsedResponse`` as ``renderers``' own dataclasses (field by field).

    A generated renderer built as prime-rl builds a custom renderer (``cls(tokenizer, config)``)
    returns these, so prime-rl's ``isinstance`` checks hold.
    """
    import dataclasses

    from renderers import base as prime

    if isinstance(result, (prime.RenderedTokens, prime.ParsedResponse)):
        return result
    if isinstance(result, RenderedTokens):
        return prime.RenderedTokens(**{f.name: getattr(result, f.name) for f in dataclasses.fields(result)})
    if isinstance(result, ParsedResponse):
        calls = [
            prime.ParsedToolCall(
                raw=call.raw,
                name=call.name,
                arguments=call.arguments,
                token_span=call.token_span,
                status=prime.ToolCallParseStatus(str(call.status)),
                id=call.id,
            )
            for call in result.tool_calls
        ]
        return prime.ParsedResponse(
            content=result.content,
            reasoning_content=result.reasoning_content,
            tool_calls=calls,
            reasoning_complete=result.reasoning_complete,
        )
    raise TypeError(f"no renderers type for {type(result).__name__}")


def prime_renderer_class(generated_cls: type) -> type:
    """The generated class itself: it has ``config_class`` and a ``(tokenizer, config)`` constructor."""
    return generated_cls


def __getattr__(name: str) -> type:
    """``rllm_renderers.adapters.prime:<GeneratedClassName>`` for prime-rl's custom config."""
    if name.startswith("_") or not name[:1].isupper():
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from ..core.generated_index import generated_index

    for entry in generated_index():
        if entry.class_name == name:  # imports only this module
            return prime_renderer_class(entry.cls)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
