"""The reference renderer: transformers' ``apply_chat_template`` with an explicit template.

The compiler checks every generated renderer against this oracle. Nothing here
re-implements Jinja: with a tokenizer the oracle calls
``tokenizer.apply_chat_template`` itself, and without one it calls
``transformers.utils.chat_template_utils.render_jinja_template`` after the same
pre-processing that ``apply_chat_template`` (transformers 5.23,
``tokenization_utils_base.py``) does:

* an empty conversation is rejected with a ValueError;
* every message loses its top-level keys whose value is None (nested None
  values, e.g. inside tool-call arguments, are kept);
* the template sees ``{**special_tokens_map, **kwargs}`` as extra variables, so
  a knob named like a special token overrides it;
* ``documents=None``, ``continue_final_message=False``, no assistant mask.

``render_jinja_template`` then (in both modes) rebuilds the inputs out of plain
JSON types and aliases reasoning fields: a message with a non-None
``reasoning_content``, ``thinking`` or ``reasoning`` (first one wins) gets both
``reasoning_content`` and ``thinking`` set to it.

Any exception raised while rendering (``raise_exception`` in the template,
undefined-variable errors, TypeErrors, the empty-conversation check, ...) comes
out as :class:`OracleRejected` carrying ``str(exc)``, so callers can compare it
with the ValueError message of a generated renderer.
"""

from __future__ import annotations

import inspect
from contextlib import contextmanager
from typing import Any

import transformers
from transformers.tokenization_utils_base import PreTrainedTokenizerBase
from transformers.utils.chat_template_utils import _compile_jinja_template, render_jinja_template

from .template_faults import limit_jinja_output

ORACLE_VERSION: str = transformers.__version__
"""The transformers version whose ``apply_chat_template`` is the reference."""

EMPTY_CONVERSATION_MESSAGE = "Cannot apply chat template to an empty conversation. Provide at least one message."

# Knob names that can't reach the template as variables: apply_chat_template's own parameters, and the
# names render_jinja_template passes itself.
_APPLY_PARAMETERS = frozenset(inspect.signature(PreTrainedTokenizerBase.apply_chat_template).parameters)
RESERVED_KNOBS = (_APPLY_PARAMETERS - {"self", "kwargs"}) | {"messages", "conversations"}


class OracleRejected(Exception):
    """The template (or apply_chat_template's own checks) refused to render a conversation.

    ``message`` is ``str()`` of the original exception and ``exc_type_name`` its
    class name (e.g. ``"TemplateError"`` for ``raise_exception``); the original
    exception is chained as ``__cause__``.
    """

    def __init__(self, message: str, exc_type_name: str):
        super().__init__(message)
        self.message = message
        self.exc_type_name = exc_type_name

    def __repr__(self) -> str:
        return f"OracleRejected({self.message!r}, {self.exc_type_name!r})"


class TemplateOracle:
    """Renders conversations with one chat template exactly as transformers does.

    Args:
        template_source: the Jinja chat template. It is compiled here, so a
            syntax error raises (jinja2.TemplateSyntaxError) at construction.
        tokenizer: a transformers tokenizer; needed for :meth:`render_ids`.
            ``render_text`` then calls ``tokenizer.apply_chat_template``.
        special_tokens: template variables such as ``{"bos_token": "<s>"}``.
            Defaults to the tokenizer's ``special_tokens_map``; given together
            with a tokenizer they override its values (passed as template
            kwargs, which apply_chat_template lets win over special tokens).
    """

    #: Refusals are Jinja's own (``raise_exception`` messages, error kinds) and compared as such.
    is_template = True

    def __init__(
        self,
        template_source: str,
        *,
        tokenizer: Any = None,
        special_tokens: dict[str, str] | None = None,
    ):
        # fail early on a broken template; inside a render budget, stop a render writing without end
        limit_jinja_output(_compile_jinja_template(template_source))
        self.template_source = template_source
        self.tokenizer = tokenizer
        self._special_overrides = dict(special_tokens or {})
        base = dict(tokenizer.special_tokens_map) if tokenizer is not None else {}
        self.special_tokens: dict[str, str] = {**base, **self._special_overrides}

    def render_text(
        self,
        messages: list[dict],
        *,
        tools: list[dict] | None = None,
        add_generation_prompt: bool = False,
        knobs: dict | None = None,
    ) -> str:
        """The rendered prompt: what ``apply_chat_template(..., tokenize=False)`` returns."""
        knobs = _checked_knobs(knobs)
        if self.tokenizer is not None:
            return self._apply(messages, tools, add_generation_prompt, knobs, tokenize=False)
        with _rejections():
            if len(messages) == 0:
                raise ValueError(EMPTY_CONVERSATION_MESSAGE)
            conversation = [{k: v for k, v in message.items() if v is not None} for message in messages]
            rendered, _ = render_jinja_template(
                conversations=[conversation],
                tools=tools,
                documents=None,
                chat_template=self.template_source,
                return_assistant_tokens_mask=False,
                continue_final_message=False,
                add_generation_prompt=add_generation_prompt,
                **{**self.special_tokens, **knobs},
            )
        return rendered[0]

    def render_ids(
        self,
        messages: list[dict],
        *,
        tools: list[dict] | None = None,
        add_generation_prompt: bool = False,
        knobs: dict | None = None,
    ) -> list[int]:
        """The token ids: ``apply_chat_template(..., tokenize=True, return_dict=False)``."""
        if self.tokenizer is None:
            raise ValueError("render_ids needs a tokenizer; this oracle was built in text-only mode")
        ids = self._apply(messages, tools, add_generation_prompt, _checked_knobs(knobs), tokenize=True)
        return list(ids)

    def _apply(self, messages, tools, add_generation_prompt, knobs, *, tokenize):
        with _rejections():
            return self.tokenizer.apply_chat_template(
                messages,
                tools=tools,
                chat_template=self.template_source,
                add_generation_prompt=add_generation_prompt,
                tokenize=tokenize,
                return_dict=False,
                **{**self._special_overrides, **knobs},
            )


def _checked_knobs(knobs: dict | None) -> dict:
    """Copy the knobs, refusing names that apply_chat_template would swallow itself."""
    knobs = dict(knobs or {})
    clashes = sorted(RESERVED_KNOBS & knobs.keys())
    if clashes:
        raise ValueError(f"knob names {clashes} are apply_chat_template parameters, not template variables")
    return knobs


@contextmanager
def _rejections():
    """Turn any exception raised inside into OracleRejected (message and type name kept)."""
    try:
        yield
    except OracleRejected:
        raise
    except Exception as exc:
        raise OracleRejected(str(exc), type(exc).__name__) from exc
