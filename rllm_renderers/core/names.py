"""What a name tells ``resolve``: the spellings of a model id, and PrimeIntellect's family names.

Names come after content (a template's sha256, a tokenizer's fingerprint); they choose between
renderers the content allows, and they are all a tokenizer without a template, or no tokenizer,
has to offer. Nothing here reads files or the network.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["PRIME_FAMILIES", "generated_family_for_prime", "model_spellings", "prime_family_of", "prime_model_map"]

#: PrimeIntellect ``renderers`` family (its ``MODEL_RENDERER_MAP`` values and config names) -> the
#: generated modules rendering its chat templates. A family is listed only where its model
#: map and our ``MODEL_IDS`` share a model (checked by tests/test_engine_entry_points.py), or, for
#: the two below, where its reference is what our module was verified against:
#: ``deepseek-v4`` (DeepSeek's Python encoder; their map lists only ``DeepSeek-V4-Flash-0731``)
#: and ``gpt-oss`` (OpenAI's harmony encoder, which ``gpt_oss_harmony`` follows; ``gpt_oss``
#: follows the HF template and is available by its own name).
#: Not listed, as the project has no renderer for their templates: prime-qwen3, qwen3.6, qwen3.8,
#: qwen3-vl, glm-4.5, glm-5.1, glm-5.3, deepseek-r1, kimi-k2.5, nemotron-3-ultra, nemotron-3.5,
#: laguna-m.1, laguna-s-2.1, inkling, hy3.
#: The first module of a family is the one its name alone gives; the prime-suite factory
#: (``adapters/prime_config.py``) picks among them by the tokenizer's chat template.
PRIME_FAMILIES: dict[str, tuple[str, ...]] = {
    "qwen3": ("qwen3",),
    "qwen3.5": ("qwen3_5",),
    "gemma4": ("gemma_4",),
    "glm-5": ("glm_4_7_flash",),
    "minimax-m2": ("minimax_m2",),
    "deepseek-v3": ("deepseek_v3",),
    "deepseek-v4": ("deepseek_v4",),
    "kimi-k2": ("kimi_k2",),
    "nemotron-3": ("nvidia_nemotron_3_nano",),
    "llama-3": ("llama_3_2", "llama_3_1"),
    "laguna-xs.2": ("laguna_xs_2",),
    "laguna-xs-2.1": ("laguna_xs_2_1",),
    "gpt-oss": ("gpt_oss_harmony",),
}


def generated_family_for_prime(family: str) -> str | None:
    """The generated module of a PrimeIntellect family name, or None when the project has none."""
    return PRIME_FAMILIES.get(family, (None,))[0]


def prime_family_of(model: str) -> str | None:
    """The family PrimeIntellect's ``MODEL_RENDERER_MAP`` gives ``model`` (exact name), or None,
    also when ``renderers`` is not installed."""
    return prime_model_map().get(model)


def prime_model_map() -> Mapping[str, str]:
    """PrimeIntellect's ``MODEL_RENDERER_MAP`` ({} without ``renderers``).

    Importing ``renderers`` takes about 2 s, so unless it is imported already the map is read as a
    literal from its ``base.py`` (about 40 ms, cached; never executed), and only a map that is
    not a literal there costs the import."""
    loaded = sys.modules.get("renderers.base")
    if loaded is not None:
        return loaded.MODEL_RENDERER_MAP
    try:
        spec = importlib.util.find_spec("renderers")
    except (ImportError, ValueError):
        return {}
    if spec is None or not spec.submodule_search_locations:
        return {}
    return _model_map_from_source(Path(next(iter(spec.submodule_search_locations))) / "base.py")


@functools.lru_cache(maxsize=None)
def _model_map_from_source(path: Path) -> Mapping[str, str]:
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in tree.body:
            target = node.target if isinstance(node, ast.AnnAssign) else getattr(node, "targets", [None])[0]
            if getattr(target, "id", None) == "MODEL_RENDERER_MAP" and node.value is not None:
                value = ast.literal_eval(node.value)
                if isinstance(value, dict) and all(isinstance(v, str) for v in value.values()):
                    return value
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        pass
    try:  # not a literal in this version: the import it is
        from renderers.base import MODEL_RENDERER_MAP
    except ImportError:
        return {}
    return MODEL_RENDERER_MAP


def model_spellings(model: str) -> tuple[str, ...]:
    """``model`` and the Hub ids a local path spells: ``.../models--Org--Name/snapshots/<rev>`` (the
    Hugging Face cache) gives ``Org/Name``, and a path of three or more parts its last two
    (``/models/Qwen/Qwen3-8B`` gives ``Qwen/Qwen3-8B``). Exact spellings only, no prefixes."""
    spellings = [model]
    parts = [part for part in model.replace("\\", "/").split("/") if part not in ("", ".", "~")]
    for part in parts:
        if part.startswith("models--") and part.count("--") >= 2:
            spellings.append(part[len("models--") :].replace("--", "/", 1))
    if len(parts) >= 3 or (len(parts) == 2 and model.startswith(("/", ".", "~"))):
        spellings.append("/".join(parts[-2:]))
    return tuple(dict.fromkeys(spellings))


def name_or_path(tokenizer: Any) -> str:
    """The name a tokenizer was loaded under (HF's ``name_or_path``), or ``""``."""
    value = getattr(tokenizer, "name_or_path", "") if tokenizer is not None else ""
    return value if isinstance(value, str) else str(value)
