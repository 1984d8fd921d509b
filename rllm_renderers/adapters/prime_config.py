"""A generated renderer for PrimeIntellect's ``RendererConfig``: the factory of their own test suite.

PrimeIntellect's ``create_renderer(tokenizer, config)`` picks a hand-written renderer by
``config.name`` (the family: ``qwen3``, ``llama-3``, ``gpt-oss``, ``deepseek-v4``, ...) and reads
the template knobs and ``thinking_retention`` from the config's fields. :func:`make_renderer`
does the same with this project's generated renderers, so their suite
(``../shared/tools/prime_suite``, ``scripts/prime_suite.sh``) can run against ours:

* the family names the generated renderers that implement it (``PRIME_FAMILIES``); which one is
  decided by the tokenizer's chat template, as ``resolve`` decides it (its template sha256, then
  ``registry.SERVED_BY``: PrimeIntellect's ``gpt-oss`` is harmony, and so is ours by default). A
  tokenizer without a template (DeepSeek-V4 ships an encoder, not one) gets the family's only
  renderer. ``default`` (their ``apply_chat_template`` wrapper) is whatever the template compiles to;
* a field the class reads as a template knob is passed to it; any other field must keep the
  config class's default, since the generated renderer cannot honour another value;
* ``thinking_retention="all"`` (keep sampled reasoning across user turns) is our ``"verbatim"``;
  ``None`` and ``"tool_cycle"`` are ``"template"`` (the bridge declines where the template rewrites).

What cannot be honoured raises ``NotImplementedError`` naming the reason, which the suite's plugin
counts as "declined", never as a pass. The renderer is built as prime-rl builds a custom one,
``cls(tokenizer, config)``, so it returns PrimeIntellect's result types and carries ``config``.
"""

from __future__ import annotations

from typing import Any

from ..core.names import PRIME_FAMILIES
from ..core.generated_index import generated_index, served_by
from .chat_template import chat_template_of, template_sha256

__all__ = ["PRIME_FAMILIES", "generated_entry_for", "make_renderer", "renderer_options"]

#: PrimeIntellect's apply_chat_template wrapper: any generated renderer of the tokenizer's template.
DEFAULT_FAMILY = "default"
#: PrimeIntellect's thinking_retention -> ours.
RETENTION = {None: "template", "tool_cycle": "template", "all": "verbatim"}


def generated_entry_for(tokenizer: Any, family: str):
    """The generated renderer (index entry) for PrimeIntellect ``family`` and this tokenizer.

    NotImplementedError when the family has none, or the tokenizer's template is not one of its.
    """
    if family != DEFAULT_FAMILY and family not in PRIME_FAMILIES:
        raise NotImplementedError(f"no generated renderer implements PrimeIntellect's {family!r} family")
    entries = generated_index()
    template = chat_template_of(tokenizer)
    if template is None:
        candidates = PRIME_FAMILIES.get(family, ())
        if len(candidates) != 1:
            raise NotImplementedError(
                f"the tokenizer has no chat template, and {family!r} has {len(candidates)} generated renderers "
                "to choose from by it"
            )
        return next(e for e in entries if e.family == candidates[0])
    digest = template_sha256(template)
    entry = served_by(next((e for e in entries if e.sha256 == digest), None))
    if entry is None:
        raise NotImplementedError(f"no generated renderer was compiled from this chat template (sha256 {digest})")
    if family != DEFAULT_FAMILY and entry.family not in PRIME_FAMILIES[family]:
        raise NotImplementedError(
            f"the tokenizer's chat template is {entry.family}'s, not one of {family!r}'s: {PRIME_FAMILIES[family]}"
        )
    return entry


def renderer_options(cls: type, config: Any) -> dict[str, Any]:
    """Constructor keywords for generated class ``cls`` from a PrimeIntellect config.

    Knob fields go through ``cls(tokenizer, config)`` itself; this checks that every other field
    keeps its default and maps the retention policy. NotImplementedError otherwise.
    """
    fields = type(config).model_fields
    values = {name: getattr(config, name) for name in fields if name not in ("name", "thinking_retention")}
    values.update(getattr(config, "model_extra", None) or {})  # DefaultRendererConfig's template kwargs
    for name, value in values.items():
        if name in cls.KNOBS:
            continue
        default = fields[name].default if name in fields else None
        if value != default:
            raise NotImplementedError(
                f"{cls.__name__} cannot honour {name}={value!r} (its template reads: {', '.join(cls.KNOBS) or 'none'})"
            )
    retention = getattr(config, "thinking_retention", None)
    if retention not in RETENTION:
        raise NotImplementedError(f"thinking_retention={retention!r} has no counterpart here")
    options: dict[str, Any] = {"thinking_retention": RETENTION[retention]}
    extra_knobs = {k: v for k, v in (getattr(config, "model_extra", None) or {}).items() if k in cls.KNOBS}
    options.update(extra_knobs)  # cls(tokenizer, config) reads declared fields only
    return options


def make_renderer(tokenizer: Any, config: Any) -> Any:
    """``PRIME_SUITE_FACTORY`` entry point: our renderer for PrimeIntellect's concrete ``config``."""
    cls = generated_entry_for(tokenizer, config.name).cls
    renderer = cls(tokenizer, config, **renderer_options(cls, config))
    renderer.config = config  # the suite reads renderer.config.<knob> and copies it
    return renderer
