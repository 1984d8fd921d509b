"""What a generated renderer imports: the one small surface ``generated/*.py`` depends on.

Generated modules import only from here (``from rllm_renderers.compiled import ...``), so the
runtime's own layout can change without touching a checked-in renderer or its diff.
"""

from .core.base import GeneratedRenderer
from .turns.formats import ReasoningFormat, ToolCallFormat, TurnFormat
from .jinja import runtime as jinja

__all__ = ["GeneratedRenderer", "ReasoningFormat", "ToolCallFormat", "TurnFormat", "jinja"]
