"""``resolve(model, tokenizer)``: which renderer a rollout engine should use.

Precedence (first match wins):

1. ``renderer=``, an explicit override: ``"generated:<family>"``, ``"prime:<family>"``,
   ``"tinker:<name>"``, ``"fireworks:<name>"`` or ``"chat_template"``; an unprefixed name is tried
   as a generated family (module name, class name or ``rllm_renderers.generated.<module>:<Class>``),
   then as a ``renderers`` family, then as a tinker/Fireworks renderer name.
2. A generated renderer, chosen by content: when the tokenizer carries a chat template, the one
   whose ``TEMPLATE_SHA256`` equals the template's sha256 (whatever the checkpoint is called);
   when it carries none (or ``tokenizer`` is None), the one whose ``MODEL_IDS`` include ``model``.
   The candidates come from the static index the compiler writes beside the generated modules
   (``rllm_renderers.generated._index``), so resolution imports only the module it uses.
   Drift guard: a ``model`` listed by a generated renderer whose tokenizer template hashes
   differently logs a warning naming both hashes and falls through.
   A generated renderer that matches but cannot be imported or built is an error, not a silent
   change of tokens: ``allow_fallback=True`` lets resolution continue down this list instead,
   with an error-level log.
3. PrimeIntellect's ``renderers``: an exact match in its static model map.
4. A tinker-cookbook renderer (the cookbooks' recommended name for ``model``, Fireworks' first
   when ``training.renderer`` imports), behind :class:`~rllm_renderers.adapters.tinker.TinkerAdapter`.
5. :class:`~rllm_renderers.adapters.chat_template.ChatTemplateAdapter` over
   ``tokenizer.apply_chat_template``, with a warning.

``tokenizer=None`` (text-only use) admits only generated renderers. ``chat_template_kwargs``
become constructor knobs of a generated renderer (an unknown knob is a ValueError), the typed
config of a ``renderers`` family (an unsupported kwarg is a ValueError), and template variables
for ``apply_chat_template`` (a name its template never reads is a ValueError); tinker renderers
take none (their variants are names), so a tinker match with kwargs is skipped with a warning.
Arguments of the wrong type (a model name passed as the tokenizer, non-dict kwargs) are a
TypeError before anything is resolved. Nothing here touches the network.
"""

from __future__ import annotations

import functools
import importlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .adapters.chat_template import ChatTemplateAdapter, chat_template_of, template_sha256
from .named_templates import DEFAULT, TOOL_USE, NamedTemplates

logger = logging.getLogger(__name__)

__all__ = [
    "GeneratedEntry",
    "GeneratedRendererError",
    "Resolution",
    "ResolutionError",
    "SOURCES",
    "generated_index",
    "get_renderer",
    "resolve",
]

SOURCES = ("generated", "prime", "tinker", "chat_template")
GENERATED_PACKAGE = "rllm_renderers.generated"
#: The module (inside the generated package) holding the index the compiler writes.
INDEX_MODULE = "_index"


class ResolutionError(LookupError):
    """No renderer qualifies for this model / tokenizer / override."""


class GeneratedRendererError(ResolutionError):
    """A generated renderer matches, but it cannot be imported or built (or the index is stale)."""


@dataclass(frozen=True)
class Resolution:
    """The chosen renderer, the backend it came from (one of ``SOURCES``) and its name there."""

    renderer: Any
    source: str
    name: str


# --- the generated-renderer index --------------------------------------------------------


@dataclass(frozen=True)
class GeneratedEntry:
    """One generated renderer, as listed in the index; ``cls`` imports its module on first use."""

    family: str  # the module name, e.g. "qwen3"
    class_name: str
    sha256: str
    model_ids: tuple[str, ...]
    package: str = GENERATED_PACKAGE

    @property
    def import_path(self) -> str:
        return f"{self.package}.{self.family}:{self.class_name}"

    @property
    def cls(self) -> type:
        """The renderer class (imports this one module; GeneratedRendererError when it cannot)."""
        return _load_class(self)

    def matches(self, name: str) -> bool:
        return name in (self.family, self.class_name, self.import_path)


@functools.lru_cache(maxsize=None)
def generated_index(package: str = GENERATED_PACKAGE) -> tuple[GeneratedEntry, ...]:
    """Every generated renderer listed in ``package``'s index, sorted by module name (cached).

    Reads the index only: no renderer module is imported. A package without an index is a
    GeneratedRendererError (regenerate, or run ``python -m compiler check``);
    ``generated_index.cache_clear()`` re-reads it.
    """
    try:
        index = importlib.import_module(f"{package}.{INDEX_MODULE}")
    except ModuleNotFoundError as exc:
        if exc.name == package or (exc.name and package.startswith(exc.name + ".")):
            logger.warning("no generated renderers: package %r is not importable", package)
            return ()
        raise GeneratedRendererError(
            f"{package} has no index ({package}.{INDEX_MODULE}); regenerate a renderer with the compiler "
            "(python -m compiler generate) to write it"
        ) from None
    return tuple(
        GeneratedEntry(family, class_name, sha256, tuple(model_ids), package)
        for family, (class_name, sha256, model_ids) in sorted(index.RENDERERS.items())
    )


_class_cache: dict[GeneratedEntry, type] = {}


def _load_class(entry: GeneratedEntry) -> type:
    if entry in _class_cache:
        return _class_cache[entry]
    module_name = f"{entry.package}.{entry.family}"
    try:
        module = importlib.import_module(module_name)
        cls = getattr(module, entry.class_name)
    except Exception as exc:  # noqa: BLE001 - whatever broke, the caller must hear of it
        raise GeneratedRendererError(
            f"generated renderer {entry.import_path} cannot be imported: {type(exc).__name__}: {exc}"
        ) from exc
    if getattr(cls, "TEMPLATE_SHA256", None) != entry.sha256:
        raise GeneratedRendererError(
            f"the generated index is stale: it lists {entry.import_path} with template sha256 {entry.sha256}, "
            f"the class says {getattr(cls, 'TEMPLATE_SHA256', None)}; run python -m compiler check"
        )
    _class_cache[entry] = cls
    return cls


def _generated_by_content(model: str, template: str | None) -> GeneratedEntry | None:
    """Step 2 of the precedence, with the drift guard."""
    entries = generated_index()
    if template is None:
        return next((e for e in entries if model in e.model_ids), None)
    digest = template_sha256(template)
    same = [e for e in entries if e.sha256 == digest]
    if same:
        return next((e for e in same if model in e.model_ids), same[0])
    for entry in entries:
        if model in entry.model_ids:
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


def _build_generated(entry: GeneratedEntry, tokenizer: Any, kwargs: dict[str, Any]) -> Resolution:
    """The renderer of ``entry``; GeneratedRendererError when it cannot be imported or built.

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
        renderer = cls(tokenizer, **kwargs)
    except Exception as exc:  # noqa: BLE001
        raise GeneratedRendererError(
            f"generated renderer {entry.import_path} could not be built for this tokenizer: {exc}"
        ) from exc
    return Resolution(renderer, "generated", entry.family)


def _with_named_templates(resolution: Resolution, model: str, tokenizer: Any, kwargs: dict[str, Any]) -> Resolution:
    """A generated renderer of a tokenizer that also ships a different ``tool_use`` template:
    calls with tools go to the renderer compiled from that one, as apply_chat_template's do, or
    raise when none was (see :mod:`rllm_renderers.named_templates`)."""
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
    tool_renderer = _build_generated(entry, tokenizer, knobs).renderer
    renderers = {DEFAULT: resolution.renderer, TOOL_USE: tool_renderer}
    return Resolution(NamedTemplates(renderers, {}), resolution.source, f"{resolution.name}+{entry.family}")


# --- the other backends ---------------------------------------------------------------------


def _try_prime(model: str, tokenizer: Any, kwargs: dict[str, Any]) -> Resolution | None:
    try:
        from .adapters import prime
    except ImportError:
        return None
    try:
        family = prime.family_for_model(model)
        if family is None:
            return None
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
        from .adapters import tinker

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


def _explicit(override: str, model: str, tokenizer: Any, kwargs: dict[str, Any]) -> Resolution:
    """Step 1: the backend and name the caller asked for."""
    backend, sep, name = override.partition(":")
    if not sep or backend not in ("generated", "prime", "tinker", "fireworks", "chat_template"):
        backend, name = "", override
    if backend == "chat_template" or override == "chat_template":
        if tokenizer is None:
            raise ResolutionError("renderer='chat_template' needs a tokenizer")
        return _chat_template(model, tokenizer, kwargs, explicit=True)
    if backend in ("", "generated"):
        entry = next((e for e in generated_index() if e.matches(name)), None)
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
            return _build_generated(entry, tokenizer, kwargs)
        if backend == "generated":
            known = ", ".join(e.family for e in generated_index()) or "none"
            raise ResolutionError(f"no generated renderer named {name!r} (known: {known})")
    if tokenizer is None:
        raise ResolutionError(f"renderer={override!r} is not a generated renderer; other backends need a tokenizer")
    if backend in ("", "prime"):
        try:
            from .adapters import prime

            return Resolution(prime.create(name, tokenizer, kwargs), "prime", name)
        except (ImportError, LookupError) as exc:
            if backend == "prime":
                raise ResolutionError(f"renderer={override!r}: {exc}") from exc
    if backend in ("", "tinker", "fireworks"):
        try:
            from .adapters import tinker

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


def _check_arguments(model: Any, tokenizer: Any, renderer: Any, chat_template_kwargs: Any) -> dict[str, Any]:
    """Wrong argument types fail here, naming the argument, rather than at the first render."""
    if not isinstance(model, str):
        raise TypeError(f"model must be a model id string, got {type(model).__name__} {model!r}")
    if tokenizer is not None and not (
        callable(getattr(tokenizer, "encode", None)) and callable(getattr(tokenizer, "decode", None))
    ):
        raise TypeError(
            f"tokenizer must be a tokenizer object (e.g. rllm_renderers.loading.load_tokenizer(folder) or "
            f"transformers.AutoTokenizer.from_pretrained(...)) or None, got {type(tokenizer).__name__} {tokenizer!r:.80}"
        )
    if renderer is not None and not isinstance(renderer, str):
        raise TypeError(f"renderer must be a string such as 'generated:qwen3', got {type(renderer).__name__}")
    if chat_template_kwargs is None:
        return {}
    if not isinstance(chat_template_kwargs, Mapping):
        raise TypeError(
            "chat_template_kwargs must be a dict of template variables (e.g. {'enable_thinking': False}), "
            f"got {type(chat_template_kwargs).__name__} {chat_template_kwargs!r:.80}"
        )
    bad = [key for key in chat_template_kwargs if not isinstance(key, str) or not key.isidentifier()]
    if bad:
        raise TypeError(f"chat_template_kwargs keys must be variable names, got {bad[0]!r}")
    return dict(chat_template_kwargs)


def resolve(
    model: str,
    tokenizer: Any,
    *,
    renderer: str | None = None,
    chat_template_kwargs: dict[str, Any] | None = None,
    allow_fallback: bool = False,
) -> Resolution:
    """Choose the renderer for ``model`` / ``tokenizer`` (see the module docstring for the order).

    ``allow_fallback=True``: a generated renderer that matches but cannot be imported or built
    is logged as an error and resolution continues with the other backends (a change of
    tokens: only for callers that prefer some renderer to none).
    """
    kwargs = _check_arguments(model, tokenizer, renderer, chat_template_kwargs)
    if renderer is not None:
        return _explicit(renderer, model, tokenizer, kwargs)
    entry = _generated_by_content(model, chat_template_of(tokenizer))
    if entry is not None:
        try:
            return _with_named_templates(_build_generated(entry, tokenizer, kwargs), model, tokenizer, kwargs)
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
            return resolution
    return _chat_template(model, tokenizer, kwargs)


def get_renderer(
    model: str,
    tokenizer: Any,
    *,
    renderer: str | None = None,
    chat_template_kwargs: dict[str, Any] | None = None,
    allow_fallback: bool = False,
) -> Any:
    """``resolve(...).renderer``."""
    return resolve(
        model, tokenizer, renderer=renderer, chat_template_kwargs=chat_template_kwargs, allow_fallback=allow_fallback
    ).renderer
