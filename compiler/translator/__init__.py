"""Translate a parsed chat template into Python, in passes.

1. :mod:`.scopes`: which names each Jinja scope binds and reads (Jinja's ``Frame`` rules);
2. :mod:`.lower`: the jinja2 AST lowered to a small typed IR (:mod:`.ir`);
3. :mod:`.cleanups`: IR passes (fold literals, drop dead branches, merge identical ones);
4. :mod:`.resumable`: the message loop made resumable by the bridge where that is exact;
5. :mod:`.emit_py`: the IR printed as Python (expressions through ``ast.unparse``).
"""

from __future__ import annotations

from jinja2 import nodes

from . import ir
from ..template_tags import tag_texts
from .cleanups import clean
from .lower import RESERVED_NAMES, TEMPLATE_INPUTS, Lowering, TemplateNames
from .resumable import make_resumable

__all__ = ["RESERVED_NAMES", "TEMPLATE_INPUTS", "TemplateNames", "translate", "ir"]


def translate(
    template: nodes.Template, template_name: str, names: TemplateNames, source: str | None = None
) -> ir.Program:
    """The template as IR: the body of ``render_template`` and the class's other methods, cleaned,
    with its message loop resumable where that is exact (``program.resumption`` says). With the
    template's ``source``, comments quote its statements (``{% if tools %}``)."""
    program = clean(Lowering(template_name, names, tag_texts(template, source)).lower_template(template))
    program.resumption = make_resumable(program, set(TEMPLATE_INPUTS) | set(names.knobs.values()))
    return program
