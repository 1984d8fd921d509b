"""Reference implementations that are code, not a Jinja template, used as verification oracles.

Some models have no chat template: their reference is a Python encoder (DeepSeek-V4) or a
message-level renderer (the Fireworks cookbook). The compiler verifies a renderer against
such a reference exactly as against a template: an oracle object has the interface of
:class:`compiler.oracle.TemplateOracle` (``render_text`` / ``render_ids`` with ``tools``,
``add_generation_prompt`` and ``knobs``, :class:`~compiler.oracle.OracleRejected` where the
reference refuses, ``special_tokens``).

Names (``--oracle NAME``):

* ``deepseek-encoder:v4``: DeepSeek's official ``encoding_dsv4.py`` (:mod:`.deepseek`);
* ``fireworks:<renderer>``: a Fireworks cookbook renderer, e.g. ``fireworks:minimax_m3``
  (:mod:`.fireworks`);
* ``harmony``: OpenAI's ``openai-harmony`` encoder for gpt-oss (:mod:`.harmony`).

The reference code is third-party and is never copied into the project: it is imported in
place from the oracles folder, ``$RLLM_ORACLES`` or by default ``../shared/oracles`` next to
the repository.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from typing import Any

from ..errors import CompileError
from ..source import REPO_ROOT

ORACLES_ENV = "RLLM_ORACLES"

DEEPSEEK_V4 = "deepseek-encoder:v4"
HARMONY = "harmony"
FIREWORKS_PREFIX = "fireworks:"
ORACLE_NAMES = (DEEPSEEK_V4, FIREWORKS_PREFIX + "<renderer>", HARMONY)


class TokenOracle:
    """A reference that renders token ids (a Fireworks renderer, OpenAI's harmony encoder) behind
    ``TemplateOracle``'s interface: a subclass defines ``render_ids`` and ``decode``; its text is
    the decoding of its ids."""

    #: A Python reference: its refusals are not worded as the template's, only both must refuse.
    is_template = False

    def render_text(
        self,
        messages: list[dict],
        *,
        tools: list[dict] | None = None,
        add_generation_prompt: bool = False,
        knobs: dict | None = None,
    ) -> str:
        ids = self.render_ids(messages, tools=tools, add_generation_prompt=add_generation_prompt, knobs=knobs)
        return self.decode(ids)


class OracleUnavailable(CompileError):
    """The oracle's code (or what it imports) is not present on this machine."""


def oracles_root() -> Path:
    """The folder holding the third-party reference code (``$RLLM_ORACLES``)."""
    configured = os.environ.get(ORACLES_ENV)
    return Path(configured) if configured else REPO_ROOT.parent / "shared" / "oracles"


def oracle_folder(*parts: str) -> Path:
    """A folder under the oracles root; OracleUnavailable naming it when it is absent."""
    folder = oracles_root().joinpath(*parts)
    if not folder.is_dir():
        raise OracleUnavailable(f"oracle code not found at {folder} (set {ORACLES_ENV} to the oracles folder)")
    return folder


def import_in_place(folder: Path, module: str) -> Any:
    """Import ``module`` from ``folder`` (put first on sys.path, once), without copying anything."""
    entry = str(folder)
    if entry not in sys.path:
        sys.path.insert(0, entry)
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise OracleUnavailable(f"cannot import {module!r} from {folder}: {exc}") from exc


def load_oracle(name: str, tokenizer: Any = None) -> Any:
    """The oracle called ``name`` (see the module docstring), rendering token ids with ``tokenizer``."""
    if name == DEEPSEEK_V4:
        return _adapter("deepseek", "DeepSeekV4EncoderOracle")(tokenizer)
    if name.startswith(FIREWORKS_PREFIX) and len(name) > len(FIREWORKS_PREFIX):
        return _adapter("fireworks", "FireworksOracle")(name[len(FIREWORKS_PREFIX) :], tokenizer)
    if name == HARMONY:
        return _adapter("harmony", "HarmonyOracle")(tokenizer)
    raise CompileError(f"unknown oracle {name!r}; the oracles are: {', '.join(ORACLE_NAMES)}")


def _adapter(module: str, class_name: str) -> type:
    """An adapter class of this package, imported only when its oracle is asked for."""
    qualified = f"{__name__}.{module}"
    try:
        return getattr(importlib.import_module(qualified), class_name)
    except ModuleNotFoundError as exc:
        if exc.name != qualified:
            raise
        raise OracleUnavailable(f"this build has no {qualified} adapter") from None
