"""The last resort: a renderer over ``tokenizer.apply_chat_template``.

Token ids are exactly the tokenizer's own; everything else is derived from the template by
rendering: the turn-close token is found by rendering a needle reply, attribution by rendering
growing prefixes, and the bridge is the guarded one of :mod:`.bridge`. The parser is generic
(``<think>`` splitting only; tool calls stay in the content as text) because the format is
unknown. ``resolve`` logs a warning whenever it falls back to this adapter.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from ..types import Message, ParsedResponse, ToolSpec
from .bridge import BridgedAdapter

__all__ = ["ChatTemplateAdapter", "chat_template_of", "template_sha256"]

_NEEDLE = "Zebra quartz"

#: Names ``apply_chat_template`` binds itself (its own parameters and the variables it passes).
RESERVED_KWARGS = frozenset(
    {
        "conversation", "messages", "tools", "documents", "add_generation_prompt", "continue_final_message",
        "chat_template", "tokenize", "padding", "truncation", "max_length", "return_tensors", "return_dict",
        "return_assistant_tokens_mask", "tokenizer_kwargs",
    }
)  # fmt: skip


def check_template_kwargs(template: str, kwargs: dict[str, Any]) -> None:
    """Refuse kwargs the template cannot read: a name absent from its source, or one that
    ``apply_chat_template`` would take as its own argument instead of passing it on."""
    for name in kwargs:
        if name in RESERVED_KWARGS:
            raise ValueError(
                f"chat_template_kwargs {name!r} is an argument of apply_chat_template / render, not a template variable"
            )
        if not re.search(rf"(?<![\w.]){re.escape(name)}(?!\w)", template):
            raise ValueError(f"unknown chat_template_kwargs {name!r}: the tokenizer's chat template never reads it")


def chat_template_of(tokenizer: Any) -> str | None:
    """The tokenizer's chat template source (its ``default`` one when it ships several), or None."""
    template = getattr(tokenizer, "chat_template", None) if tokenizer is not None else None
    if isinstance(template, dict):
        template = template.get("default")
    return template if isinstance(template, str) and template else None


def template_sha256(template: str) -> str:
    """sha256 hex of the UTF-8 template source (what generated renderers record)."""
    return hashlib.sha256(template.encode("utf-8")).hexdigest()


class ChatTemplateAdapter(BridgedAdapter):
    """Renders with ``tokenizer.apply_chat_template(..., **template_kwargs)``."""

    def __init__(self, tokenizer: Any, **template_kwargs: Any) -> None:
        super().__init__()
        if chat_template_of(tokenizer) is None:
            raise ValueError("the tokenizer has no chat_template; ChatTemplateAdapter has nothing to render with")
        check_template_kwargs(chat_template_of(tokenizer), template_kwargs)
        self.tokenizer = tokenizer
        self.template_kwargs = dict(template_kwargs)
        self.vocab_size = len(tokenizer)
        self._added_ids = {int(i) for i in getattr(tokenizer, "added_tokens_decoder", {})} | set(
            getattr(tokenizer, "all_special_ids", []) or []
        )
        self._close = self._probe_close_token()
        eos = getattr(tokenizer, "eos_token_id", None)
        eos_ids = eos if isinstance(eos, list) else [eos]
        self._stop_ids = list(dict.fromkeys(int(t) for t in [self._close, *eos_ids] if t is not None))

    def __repr__(self) -> str:
        return f"ChatTemplateAdapter({getattr(self.tokenizer, 'name_or_path', '?')!r}, {self.template_kwargs!r})"

    # --- backend primitives ------------------------------------------------------------

    def _render_ids(
        self, messages: list[Message], tools: list[ToolSpec] | None, add_generation_prompt: bool
    ) -> list[int]:
        if not messages:
            raise ValueError("Cannot apply chat template to an empty conversation. Provide at least one message.")
        try:
            ids = self.tokenizer.apply_chat_template(
                messages,
                tools=tools,
                add_generation_prompt=add_generation_prompt,
                tokenize=True,
                return_dict=False,
                **self.template_kwargs,
            )
        except Exception as exc:  # jinja2's TemplateError and friends: the template rejected the input
            if isinstance(exc, ValueError):
                raise
            raise ValueError(f"the chat template failed on this input: {exc}") from exc
        if hasattr(ids, "keys"):  # a BatchEncoding from an older transformers
            ids = ids["input_ids"]
        return [int(t) for t in ids]

    def _probe_close_token(self) -> int | None:
        """The first added token after a needle reply: what the template writes to close a turn."""
        user = {"role": "user", "content": "Hi"}
        try:
            prompt = self._render_ids([user], None, True)
            full = self._render_ids([user, {"role": "assistant", "content": _NEEDLE}], None, False)
        except ValueError:
            return None
        if full[: len(prompt)] != prompt:
            return None
        tail = full[len(prompt) :]
        for end in range(1, len(tail) + 1):
            if _NEEDLE in self.tokenizer.decode(tail[:end]):
                return next((t for t in tail[end:] if t in self._added_ids), None)
        return None

    def get_stop_token_ids(self) -> list[int]:
        return list(self._stop_ids)

    @property
    def close_token_id(self) -> int | None:
        return self._close if self._close is not None else (self._stop_ids[0] if self._stop_ids else None)

    def _body(self, ids: list[int]) -> list[int]:
        stops = set(self._stop_ids)
        for index, token in enumerate(ids):
            if token in stops:
                return ids[:index]
        return ids

    def _parse(self, token_ids: list[int], tools: list[ToolSpec] | None) -> ParsedResponse:
        text = self.tokenizer.decode(self._body(token_ids), skip_special_tokens=True)
        if "</think>" in text:
            reasoning, content = text.split("</think>", 1)
            return ParsedResponse(
                content=content.lstrip("\n"),
                reasoning_content=reasoning.split("<think>")[-1].strip("\n"),
                reasoning_complete=True,
            )
        if "<think>" in text:
            before, reasoning = text.split("<think>", 1)
            return ParsedResponse(content=before, reasoning_content=reasoning.strip("\n"), reasoning_complete=False)
        return ParsedResponse(content=text, reasoning_complete=True)  # no reasoning block left open

    def _decode_lenient(self, ids: list[int]) -> str:
        try:
            return self.tokenizer.decode(ids, skip_special_tokens=True)
        except Exception:  # noqa: BLE001
            return ""

    def _completion_messages(self, completion_ids: list[int]) -> list[Message]:
        """The completion as raw content (most templates re-render it byte for byte), then parsed."""
        raw = self.tokenizer.decode(self._body(completion_ids), skip_special_tokens=False)
        parsed = self._parse(completion_ids, None)
        candidates: list[Message] = [{"role": "assistant", "content": raw}]
        if parsed.reasoning_content is not None:
            candidates.append(
                {"role": "assistant", "content": parsed.content, "reasoning_content": parsed.reasoning_content}
            )
        return candidates
