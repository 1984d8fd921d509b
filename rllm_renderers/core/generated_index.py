"""The generated-renderer index: which compiled renderers exist, read without importing them.

The compiler writes ``generated/_index.py`` (module name -> class, template sha256, model ids, and
the fingerprint of the tokenizer it was verified with). :func:`generated_index` reads it;
:class:`GeneratedEntry` imports one renderer's module only when its class is asked for. The
registry (:mod:`.registry`) and PrimeIntellect's adapters both read it from here.
"""

from __future__ import annotations

import functools
import importlib
import logging
from dataclasses import dataclass

logger = logging.getLogger(__name__)

__all__ = [
    "GENERATED_PACKAGE",
    "SERVED_BY",
    "GeneratedEntry",
    "GeneratedRendererError",
    "ResolutionError",
    "generated_index",
    "served_by",
]

GENERATED_PACKAGE = "rllm_renderers.generated"
#: The module (inside the generated package) holding the index the compiler writes.
INDEX_MODULE = "_index"
#: Generated renderer (compiled from a model's HF template) -> the one resolution picks instead by
#: default, because the servers render that model's prompts with another reference and the tokens it
#: samples follow it: vLLM and SGLang render gpt-oss with OpenAI's harmony encoder.
SERVED_BY = {"gpt_oss": "gpt_oss_harmony"}


class ResolutionError(LookupError):
    """No renderer qualifies for this model / tokenizer / override."""


class GeneratedRendererError(ResolutionError):
    """A generated renderer matches, but it cannot be imported or built (or the index is stale)."""


@dataclass(frozen=True)
class GeneratedEntry:
    """One generated renderer, as listed in the index; ``cls`` imports its module on first use."""

    family: str  # the module name, e.g. "qwen3"
    class_name: str
    sha256: str
    model_ids: tuple[str, ...]
    package: str = GENERATED_PACKAGE
    #: The fingerprint of the tokenizer it was verified with (None: verified without a real one).
    tokenizer_fingerprint: str | None = None

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
    name = f"{package}.{INDEX_MODULE}"
    try:
        index = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name == package or (exc.name and package.startswith(exc.name + ".")):
            logger.warning("no generated renderers: package %r is not importable", package)
            return ()
        if exc.name != name:
            raise _unreadable_index(name, exc) from exc
        raise GeneratedRendererError(
            f"{package} has no index ({name}); regenerate a renderer with the compiler "
            "(python -m compiler generate) to write it"
        ) from None
    except Exception as exc:  # noqa: BLE001 - a damaged file (half-written, hand-edited): whatever it raises
        raise _unreadable_index(name, exc) from exc
    try:
        fingerprints = getattr(index, "TOKENIZER_FINGERPRINTS", {})  # an index written before fingerprints has none
        return tuple(
            GeneratedEntry(family, class_name, sha256, tuple(model_ids), package, fingerprints.get(family))
            for family, (class_name, sha256, model_ids) in sorted(index.RENDERERS.items())
        )
    except Exception as exc:  # noqa: BLE001 - not {module: (class, sha256, model ids)}
        raise _unreadable_index(name, exc) from exc


def _unreadable_index(name: str, exc: Exception) -> GeneratedRendererError:
    return GeneratedRendererError(
        f"the generated index {name} cannot be read ({type(exc).__name__}: {exc}); run python -m compiler "
        "check to find what is stale, and regenerate (python -m compiler generate) to rewrite it"
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


def served_by(entry: GeneratedEntry | None) -> GeneratedEntry | None:
    """``entry``, or the generated renderer that ``SERVED_BY`` names in its place."""
    if entry is None or entry.family not in SERVED_BY:
        return entry
    target = SERVED_BY[entry.family]
    served = next((e for e in generated_index(entry.package) if e.family == target), None)
    if served is None:
        raise GeneratedRendererError(
            f"{entry.import_path} is served by generated renderer {target!r}, which the index does not list"
        )
    return served
