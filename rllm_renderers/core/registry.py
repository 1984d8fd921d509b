"""``resolve(model, tokenizer)``: which renderer a rollout engine should use.

Precedence (first match wins):

1. ``renderer=``, an explicit override: ``"generated:<family>"``, ``"prime:<family>"``,
   ``"tinker:<name>"``, ``"fireworks:<name>"`` or ``"chat_template"``; an unprefixed name is tried
   as a generated family (module name, class name or ``rllm_renderers.generated.<module>:<Class>``),
   then as a PrimeIntellect family name the project renders itself (``"qwen3.5"``, ``"gpt-oss"``:
   :data:`~rllm_renderers.core.names.PRIME_FAMILIES`), then as a ``renderers`` family, then as a
   tinker/Fireworks renderer name.
2. A generated renderer, chosen by content. The candidates come from the static index the
   compiler writes beside the generated modules (``rllm_renderers.generated._index``), so
   resolution imports only the module it uses.

   a. The tokenizer carries a chat template: the renderer whose ``TEMPLATE_SHA256`` equals the
      template's sha256 (whatever the checkpoint is called). Drift guard: a ``model`` listed by a
      generated renderer whose template hashes differently logs a warning naming both hashes and
      falls through to step 3 (a template other than the one compiled is never rendered by it).
   b. It carries none (DeepSeek-V4 ships none; a stripped local copy): what it holds, its
      fingerprint (:func:`~rllm_renderers.encoding.fingerprint.tokenizer_fingerprint`: vocabulary size,
      added tokens, a vocabulary sample) against the fingerprint the index records of the
      tokenizer each renderer was verified with, together with the name. A renderer the name
      points to (``model`` or a Hub id its path spells, in ``MODEL_IDS``, or mapped by
      PrimeIntellect's ``MODEL_RENDERER_MAP`` to a family the project has) wins when the
      tokenizer does not contradict it (same fingerprint, or none recorded). Otherwise a name
      PrimeIntellect maps to a family the project lacks goes to step 3 (their renderer for that
      exact model). Otherwise the one renderer verified with this tokenizer wins, whatever the
      name (a name that points elsewhere is logged). When several were (two templates share one
      tokenizer: Qwen3 and Qwen3-Coder), steps 3 and 4 may still match the name exactly;
      if they do not, :class:`AmbiguousRendererError` lists the candidates and how to choose.
      No fingerprint match and a name that points to a renderer: that renderer, by name.
   c. ``tokenizer=None`` (text-only use): the name alone, as in b.

   A model whose inference servers render prompts with another reference than its HF template
   follows that reference by default (``SERVED_BY``): gpt-oss gets ``gpt_oss_harmony``, exact to
   OpenAI's harmony encoder, which vLLM and SGLang render gpt-oss with; ``renderer="gpt_oss"``
   still gives the renderer exact to the HF template.
   A generated renderer that matches but cannot be imported or built is an error, not a silent
   change of tokens: ``allow_fallback=True`` lets resolution continue down this list instead,
   with an error-level log.
3. PrimeIntellect's ``renderers``: an exact match in its static model map.
4. A tinker-cookbook renderer (the cookbooks' recommended name for ``model``, Fireworks' first
   when ``training.renderer`` imports), behind :class:`~rllm_renderers.adapters.tinker.TinkerAdapter`.
5. :class:`~rllm_renderers.adapters.chat_template.ChatTemplateAdapter` over
   ``tokenizer.apply_chat_template``, with a warning.

``tokenizer=None`` (text-only use) admits only generated renderers. Template knobs come as
keywords (``resolve(model, tok, enable_thinking=False)``) or in ``chat_template_kwargs`` (the same
knob in both is a ValueError); they become constructor knobs of a generated renderer (an unknown
knob is a ValueError), the typed config of a ``renderers`` family (an unsupported kwarg is a
ValueError), and template variables for ``apply_chat_template`` (a name its template never reads
is a ValueError); tinker renderers take none (their variants are names), so a tinker match with
kwargs is skipped with a warning. ``thinking_retention`` (``"template"`` or ``"verbatim"``, see
:mod:`rllm_renderers.bridging.bridge`) reaches a generated renderer's constructor; ``"verbatim"`` with any
other backend is a ValueError (their bridges follow the template). Arguments of the wrong type (a
model name passed as the tokenizer, non-dict kwargs) are a TypeError before anything is resolved.
Nothing here touches the network.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..adapters.chat_template import ChatTemplateAdapter, chat_template_of, template_sha256
from ..bridging.bridge import RETENTION_POLICIES
from ..encoding.fingerprint import tokenizer_fingerprint
from .named_templates import DEFAULT, TOOL_USE, NamedTemplates
from .names import generated_family_for_prime, model_spellings, prime_family_of
from .generated_index import (
    SERVED_BY,
    GeneratedEntry,
    GeneratedRendererError,
    ResolutionError,
    generated_index,
    served_by,
)
from ..encoding.tokenization import check_encoder_settings

logger = logging.getLogger(__name__)

__all__ = [
    "AmbiguousRendererError",
    "SERVED_BY",
    "GeneratedEntry",
    "GeneratedRendererError",
    "Resolution",
    "ResolutionError",
    "SOURCES",
    "generated_index",
    "get_renderer",
    "resolve",
    "served_by",
]

SOURCES = ("generated", "prime", "tinker", "chat_template")


class AmbiguousRendererError(ResolutionError):
    """Several generated renderers fit the tokenizer and nothing tells them apart; ``candidates``
    holds their module names (pass one as ``renderer=``)."""

    def __init__(self, message: str, candidates: tuple[str, ...]) -> None:
        super().__init__(message)
        self.candidates = candidates


@dataclass(frozen=True)
class Resolution:
    """The chosen renderer, the backend it came from (one of ``SOURCES``) and its name there."""

    renderer: Any
    source: str
    name: str


def _generated_by_template(model: str, template: str) -> GeneratedEntry | None:
    """Step 2a of the precedence, with the drift guard."""
    entries = generated_index()
    names = model_spellings(model)
    digest = template_sha256(template)
    same = [e for e in entries if e.sha256 == digest]
    if same:
        return next((e for e in same if any(name in e.model_ids for name in names)), same[0])
    for entry in entries:
        if any(name in entry.model_ids for name in names):
            logger.warning(
                "chat template drift for %s: the tokenizer's template has sha256 %s but generated renderer %s "
                "was compiled from sha256 %s; not using it (regenerate it, or pass renderer=%r to force it)",
                model,
                digest,
                entry.import_path,
                entry.sha256,
                entry.family,
            )
    return None


def _named_entries(model: str) -> list[GeneratedEntry]:
    """The generated renderers ``model``'s name points to: those listing one of its spellings in
    ``MODEL_IDS``, else the one PrimeIntellect's model map names the family of."""
    entries = generated_index()
    names = model_spellings(model)
    listed = [e for e in entries if any(name in e.model_ids for name in names)]
    if listed:
        return listed
    family = generated_family_for_prime(_prime_family(model) or "")
    return [e for e in entries if e.family == family]


def _prime_family(model: str) -> str | None:
    """The family PrimeIntellect's model map gives ``model`` (its first spelling there), or None."""
    return next(filter(None, map(prime_family_of, model_spellings(model))), None)


@dataclass(frozen=True)
class _ContentMatch:
    """Step 2b/2c: the generated renderer chosen, or the candidates that tie (then ``entry`` is None)."""

    entry: GeneratedEntry | None
    tied: tuple[GeneratedEntry, ...] = ()


def _generated_without_template(model: str, tokenizer: Any) -> _ContentMatch:
    """Step 2b (a tokenizer without a chat template) and 2c (no tokenizer)."""
    fingerprint = tokenizer_fingerprint(tokenizer) if tokenizer is not None else None
    named = _named_entries(model)
    agreeing = [e for e in named if fingerprint is None or e.tokenizer_fingerprint in (None, fingerprint)]
    if agreeing:
        return _ContentMatch(agreeing[0])
    family = _prime_family(model)
    if tokenizer is not None and family is not None and generated_family_for_prime(family) is None:
        return _ContentMatch(None)  # their renderer for this exact model (step 3) beats a tokenizer match
    fitting = [e for e in generated_index() if fingerprint is not None and e.tokenizer_fingerprint == fingerprint]
    fitting = list(dict.fromkeys(map(served_by, fitting)))  # (gpt_oss is served by gpt_oss_harmony: one renderer)
    if len(fitting) == 1:
        if named:
            logger.warning(
                "%s names generated renderer %s, but the tokenizer is the one %s was verified with (and not %s's); "
                "using %s (pass renderer=%r to force the other)",
                model,
                named[0].family,
                fitting[0].family,
                named[0].family,
                fitting[0].family,
                named[0].family,
            )
        return _ContentMatch(fitting[0])
    if len(fitting) > 1:
        return _ContentMatch(None, tuple(fitting))
    if named:
        logger.info("%s resolves to %s by name: no renderer was verified with this tokenizer", model, named[0].family)
        return _ContentMatch(named[0])
    return _ContentMatch(None)


def _ambiguity(model: str, tied: tuple[GeneratedEntry, ...]) -> AmbiguousRendererError:
    listed = "; ".join(f"{e.family} ({', '.join(e.model_ids)})" for e in tied)
    choices = " or ".join(f"renderer={e.family!r}" for e in tied)
    return AmbiguousRendererError(
        f"cannot tell which renderer {model or 'this tokenizer'!r} needs: the tokenizer carries no chat_template, "
        f"its name matches none, and what it holds (vocabulary and added tokens) fits {len(tied)} generated "
        f"renderers verified with the same tokenizer: {listed}. Choose with {choices} (resolve(..., renderer=...) "
        "or create_renderer(tokenizer, renderer=...)), or load the tokenizer with its chat template",
        tuple(e.family for e in tied),
    )


def _build_generated(
    entry: GeneratedEntry, tokenizer: Any, kwargs: dict[str, Any], retention: str | None = None
) -> Resolution:
    """The renderer of ``entry`` (``retention``: its ``thinking_retention``, None for the class
    default); GeneratedRendererError when it cannot be imported or built.

    An unknown knob is the caller's mistake, not the renderer's: it stays a ValueError.
    """
    cls = entry.cls
    unknown = sorted(set(kwargs) - set(cls.KNOBS))
    if unknown:
        raise ValueError(
            f"unknown template knob {unknown[0]!r} for {entry.class_name}; "
            f"the template reads these knobs: {', '.join(cls.KNOBS) or 'none'}"
        )
    try:
        renderer = cls(tokenizer, thinking_retention=retention, **kwargs)
    except Exception as exc:  # noqa: BLE001
        raise GeneratedRendererError(
            f"generated renderer {entry.import_path} could not be built for this tokenizer: {exc}"
        ) from exc
    return Resolution(renderer, "generated", entry.family)


def _with_named_templates(
    resolution: Resolution, model: str, tokenizer: Any, kwargs: dict[str, Any], retention: str | None = None
) -> Resolution:
    """A generated renderer of a tokenizer that also ships a different ``tool_use`` template:
    calls with tools go to the renderer compiled from that one, as apply_chat_template's do, or
    raise when none was (see :mod:`rllm_renderers.core.named_templates`)."""
    templates = getattr(tokenizer, "chat_template", None) if tokenizer is not None else None
    if not isinstance(templates, Mapping) or not isinstance(templates.get(TOOL_USE), str):
        return resolution
    tool_use = templates[TOOL_USE]
    if tool_use == templates.get(DEFAULT):
        return resolution
    digest = template_sha256(tool_use)
    entry = next((e for e in generated_index() if e.sha256 == digest), None)
    if entry is None:
        missing = {
            TOOL_USE: f"no generated renderer was compiled from it (sha256 {digest}); compile it "
            f"(python -m compiler generate --model {model} --tokenizer <folder>, which compiles every named "
            "template) or pass renderer='chat_template'"
        }
        return Resolution(NamedTemplates({DEFAULT: resolution.renderer}, missing), resolution.source, resolution.name)
    knobs = {name: value for name, value in kwargs.items() if name in entry.cls.KNOBS}  # a template ignores the rest
    tool_renderer = _build_generated(entry, tokenizer, knobs, retention).renderer
    renderers = {DEFAULT: resolution.renderer, TOOL_USE: tool_renderer}
    return Resolution(NamedTemplates(renderers, {}), resolution.source, f"{resolution.name}+{entry.family}")


# --- the other backends ---------------------------------------------------------------------


def _try_prime(model: str, tokenizer: Any, kwargs: dict[str, Any]) -> Resolution | None:
    family = _prime_family(model)
    if family is None:  # (known without importing renderers)
        return None
    try:
        from ..adapters import prime
    except ImportError:
        return None
    try:
        prime.config_for(family, kwargs)  # an unsupported kwarg raises ValueError, as for generated
    except ImportError:
        logger.debug("renderers (the prime extra) is not installed")
        return None
    try:
        return Resolution(prime.create(family, tokenizer, kwargs), "prime", family)
    except Exception as exc:  # noqa: BLE001 - e.g. a tokenizer the family cannot use: fall through
        logger.warning("renderers family %r for %s could not be built (%s); falling through", family, model, exc)
        return None


def _try_tinker(model: str, tokenizer: Any, kwargs: dict[str, Any]) -> Resolution | None:
    try:
        from ..adapters import tinker

        name = tinker.recommended_name(model)
    except ImportError:
        logger.debug("tinker-cookbook (the tinker extra) is not installed")
        return None
    if name is None:
        return None
    if kwargs:
        logger.warning(
            "tinker renderer %r for %s takes no chat_template_kwargs (%s); its variants are names "
            "(pass renderer='tinker:<variant>'); falling through",
            name,
            model,
            sorted(kwargs),
        )
        return None
    try:
        return Resolution(tinker.create(name, tokenizer, model), "tinker", name)
    except Exception as exc:  # noqa: BLE001
        logger.warning("tinker renderer %r for %s could not be built (%s); falling through", name, model, exc)
        return None


def _chat_template(model: str, tokenizer: Any, kwargs: dict[str, Any], *, explicit: bool = False) -> Resolution:
    if chat_template_of(tokenizer) is None:
        raise ResolutionError(
            f"no renderer for {model!r}: no generated, renderers or tinker renderer matches, and the tokenizer "
            "has no chat_template to fall back on"
        )
    if not explicit:
        logger.warning(
            "FALLBACK: no generated, renderers or tinker renderer matches %s; rendering with "
            "tokenizer.apply_chat_template (generic parser, guarded bridge). Compile a renderer for this template.",
            model,
        )
    return Resolution(ChatTemplateAdapter(tokenizer, **kwargs), "chat_template", "chat_template")


def _generated_named(name: str) -> GeneratedEntry | None:
    """The generated renderer ``name`` names: its module, class or import path, or a PrimeIntellect
    family the project renders itself."""
    entries = generated_index()
    entry = next((e for e in entries if e.matches(name)), None)
    alias = generated_family_for_prime(name)
    return entry if entry is not None or alias is None else next((e for e in entries if e.family == alias), None)


def _explicit(
    override: str, model: str, tokenizer: Any, kwargs: dict[str, Any], retention: str | None = None
) -> Resolution:
    """Step 1: the backend and name the caller asked for."""
    backend, sep, name = override.partition(":")
    if not sep or backend not in ("generated", "prime", "tinker", "fireworks", "chat_template"):
        backend, name = "", override
    if backend == "chat_template" or override == "chat_template":
        if tokenizer is None:
            raise ResolutionError("renderer='chat_template' needs a tokenizer")
        return _chat_template(model, tokenizer, kwargs, explicit=True)
    if backend in ("", "generated"):
        entry = _generated_named(name)
        if entry is not None:
            template = chat_template_of(tokenizer)
            if template is not None and template_sha256(template) != entry.sha256:
                logger.warning(
                    "renderer=%r forced although the tokenizer's chat template (sha256 %s) differs from the one "
                    "%s was compiled from (sha256 %s)",
                    override,
                    template_sha256(template),
                    entry.import_path,
                    entry.sha256,
                )
            return _build_generated(entry, tokenizer, kwargs, retention)
        if backend == "generated":
            known = ", ".join(e.family for e in generated_index()) or "none"
            raise ResolutionError(f"no generated renderer named {name!r} (known: {known})")
    if tokenizer is None:
        raise ResolutionError(f"renderer={override!r} is not a generated renderer; other backends need a tokenizer")
    if backend in ("", "prime"):
        try:
            from ..adapters import prime

            return Resolution(prime.create(name, tokenizer, kwargs), "prime", name)
        except (ImportError, LookupError) as exc:
            if backend == "prime":
                raise ResolutionError(f"renderer={override!r}: {exc}") from exc
    if backend in ("", "tinker", "fireworks"):
        try:
            from ..adapters import tinker

            adapter = tinker.create(name, tokenizer, model)
        except (ImportError, LookupError) as exc:
            if backend:
                raise ResolutionError(f"renderer={override!r}: {exc}") from exc
        else:
            if kwargs:
                raise ValueError(
                    f"tinker renderers take no chat_template_kwargs; choose a variant by name ({override!r})"
                )
            return Resolution(adapter, "tinker", name)
    raise ResolutionError(
        f"renderer={override!r} names no generated renderer, renderers family or tinker renderer "
        "(installed backends only; prefix with generated:, prime:, tinker: or use 'chat_template')"
    )


# --- the entry points -------------------------------------------------------------------


def _check_arguments(
    model: Any, tokenizer: Any, renderer: Any, chat_template_kwargs: Any, knobs: dict[str, Any], retention: Any
) -> dict[str, Any]:
    """Wrong arguments fail here, naming the argument, rather than at the first render: types
    (TypeError), a retention policy that does not exist or a knob given twice (ValueError).
    Returns the template knobs, keywords and ``chat_template_kwargs`` merged."""
    if not isinstance(model, str):
        raise TypeError(f"model must be a model id string, got {type(model).__name__} {model!r}")
    if tokenizer is not None and not (
        callable(getattr(tokenizer, "encode", None)) and callable(getattr(tokenizer, "decode", None))
    ):
        raise TypeError(
            f"tokenizer must be a tokenizer object (e.g. rllm_renderers.encoding.loading.load_tokenizer(folder) or "
            f"transformers.AutoTokenizer.from_pretrained(...)) or None, got {type(tokenizer).__name__} {tokenizer!r:.80}"
        )
    if renderer is not None and not isinstance(renderer, str):
        raise TypeError(f"renderer must be a string such as 'generated:qwen3', got {type(renderer).__name__}")
    if retention is not None and retention not in RETENTION_POLICIES:
        raise ValueError(
            f"thinking_retention must be one of {RETENTION_POLICIES} (or None for the renderer's default), got "
            f"{retention!r}"
            + (" (PrimeIntellect's name; 'verbatim' keeps sampled reasoning)" if retention == "all" else "")
        )
    if chat_template_kwargs is None:
        return dict(knobs)
    if not isinstance(chat_template_kwargs, Mapping):
        raise TypeError(
            "chat_template_kwargs must be a dict of template variables (e.g. {'enable_thinking': False}), "
            f"got {type(chat_template_kwargs).__name__} {chat_template_kwargs!r:.80}"
        )
    bad = [key for key in chat_template_kwargs if not isinstance(key, str) or not key.isidentifier()]
    if bad:
        raise TypeError(f"chat_template_kwargs keys must be variable names, got {bad[0]!r}")
    twice = sorted(set(knobs) & set(chat_template_kwargs))
    if twice:
        raise ValueError(
            f"template knob {twice[0]!r} is given twice, as a keyword and in chat_template_kwargs; give it once"
        )
    return {**chat_template_kwargs, **knobs}


def _with_retention(resolution: Resolution, retention: str | None) -> Resolution:
    """``resolution``, unless it cannot honour ``retention``: only generated renderers keep sampled
    reasoning (``"verbatim"``); the other backends' bridges follow the template."""
    if retention == "verbatim" and resolution.source != "generated":
        raise ValueError(
            f"thinking_retention='verbatim' needs a generated renderer, but resolution chose "
            f"{resolution.source}:{resolution.name}, whose bridge follows the template"
        )
    return resolution


def resolve(
    model: str,
    tokenizer: Any,
    *,
    renderer: str | None = None,
    chat_template_kwargs: dict[str, Any] | None = None,
    allow_fallback: bool = False,
    thinking_retention: str | None = None,
    **knobs: Any,
) -> Resolution:
    """Choose the renderer for ``model`` / ``tokenizer`` (see the module docstring for the order).

    ``**knobs``: template knobs (``enable_thinking=False``), as ``chat_template_kwargs`` gives them.
    ``thinking_retention``: the bridge's policy, ``"template"`` or ``"verbatim"`` (None: the
    renderer's default).
    ``allow_fallback=True``: a generated renderer that matches but cannot be imported or built
    is logged as an error and resolution continues with the other backends (a change of
    tokens: only for callers that prefer some renderer to none).
    """
    kwargs = _check_arguments(model, tokenizer, renderer, chat_template_kwargs, knobs, thinking_retention)
    check_encoder_settings()  # a bad RLLM_RENDERERS_ENCODER fails here, not at the first render
    if renderer is not None and renderer != "auto":  # "auto": PrimeIntellect's name for no override
        return _with_retention(_explicit(renderer, model, tokenizer, kwargs, thinking_retention), thinking_retention)
    template = chat_template_of(tokenizer)
    match = _ContentMatch(_generated_by_template(model, template)) if template is not None else None
    if match is None:
        match = _generated_without_template(model, tokenizer)
    entry = served_by(match.entry)
    if entry is not None:
        try:
            return _with_named_templates(
                _build_generated(entry, tokenizer, kwargs, thinking_retention), model, tokenizer, kwargs, thinking_retention
            )
        except GeneratedRendererError as exc:
            if not allow_fallback or tokenizer is None:  # without a tokenizer there is nothing to fall back to
                raise GeneratedRendererError(
                    f"{exc}. It matches {model!r} and its tokenizer; refusing to fall back to a lower-fidelity "
                    "backend (pass allow_fallback=True to accept that)"
                ) from exc
            logger.error("DOWNGRADE for %s: %s; allow_fallback=True, trying the other backends", model, exc)
    if tokenizer is None:
        raise ResolutionError(
            f"no generated renderer lists {model!r}; without a tokenizer only generated renderers qualify "
            "(pass the tokenizer to use renderers, tinker or the chat-template fallback)"
        )
    for attempt in (_try_prime, _try_tinker):
        resolution = attempt(model, tokenizer, kwargs)
        if resolution is not None:
            return _with_retention(resolution, thinking_retention)
    if match.tied:
        raise _ambiguity(model, match.tied)
    return _with_retention(_chat_template(model, tokenizer, kwargs), thinking_retention)


def get_renderer(
    model: str,
    tokenizer: Any,
    *,
    renderer: str | None = None,
    chat_template_kwargs: dict[str, Any] | None = None,
    allow_fallback: bool = False,
    thinking_retention: str | None = None,
    **knobs: Any,
) -> Any:
    """``resolve(...).renderer``."""
    return resolve(
        model,
        tokenizer,
        renderer=renderer,
        chat_template_kwargs=chat_template_kwargs,
        allow_fallback=allow_fallback,
        thinking_retention=thinking_retention,
        **knobs,
    ).renderer
