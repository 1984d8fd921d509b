"""The sandbox probe ``verify`` runs on every template it checks: the generated code keeps the sandbox.

transformers renders a template in jinja2's ``ImmutableSandboxedEnvironment``; a generated renderer
keeps the same checks by construction, because the translator reads every name the sandbox refuses
or intercepts (underscore names, methods that mutate, ``str.format`` / ``format_map``) through
``jinja.getattribute`` (:func:`rllm_renderers.jinja.values.sandbox_may_refuse`). The probe checks
that construction on the code itself, and renders what a hostile conversation sends:

* :func:`unchecked_lookups`: every such name in the generated code is read on ``self`` or ``jinja``
  (the renderer's own attributes) or is the renderer writing its output (a statement
  ``out.append(...)``: a template's own method calls are expressions, never statements), never a
  plain Python attribute of a template value; and no builtin that reaches past the data
  (``getattr``, ``eval``, ``open``...) is named;
* :data:`HOSTILE_CONTENTS`: message contents that are format strings and template syntax, for the
  differential check to render both ways (a template that formats or evaluates its input must
  give transformers' text, or refuse as it does).
"""

from __future__ import annotations

import ast

from rllm_renderers.jinja.values import sandbox_may_refuse

#: Names the generated code's own attributes live on.
OWN_NAMESPACES = frozenset({"self", "jinja", "cls"})
#: Builtins that reach past a template's data; no translation needs them.
ESCAPE_BUILTINS = frozenset(
    {"getattr", "setattr", "delattr", "eval", "exec", "compile", "open", "__import__", "globals", "locals", "vars"}
)

#: Contents a hostile caller might send: fields that reach Python internals when formatted, and
#: template syntax (a template never evaluates its input; both sides must write it as text).
HOSTILE_CONTENTS = (
    "{0.__class__}",
    "{0.__globals__[os].environ}",
    "{role.__class__.__mro__}",
    "{content!r:>9}{}",
    "{{ 7 * 7 }}{% if true %}x{% endif %}",
    "%(role)s %s",
)


def unchecked_lookups(code: str) -> list[str]:
    """Where ``code`` (a generated module) reads a name the sandbox refuses or intercepts as a plain
    attribute of a value, or names an escape builtin: ``"line 12: x.format"``; empty when none."""
    tree = ast.parse(code)
    output_writes = {
        id(statement.value.func)
        for statement in ast.walk(tree)
        if isinstance(statement, ast.Expr)
        and isinstance(statement.value, ast.Call)
        and isinstance(statement.value.func, ast.Attribute)
        and statement.value.func.attr == "append"
        and isinstance(statement.value.func.value, ast.Name)
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and sandbox_may_refuse(node.attr) and id(node) not in output_writes:
            owner = node.value
            if not (isinstance(owner, ast.Name) and owner.id in OWN_NAMESPACES):
                found.append((node.lineno, node.col_offset, ast.unparse(node)))
        elif isinstance(node, ast.Name) and node.id in ESCAPE_BUILTINS:
            found.append((node.lineno, node.col_offset, node.id))
    return [f"line {line}: {text}" for line, _, text in sorted(found)]


def generated_code_of(renderer_class: type) -> str | None:
    """The generated module ``renderer_class`` was loaded from (registered by the compiler's loaders)."""
    from compiler.template_faults import registered_code

    function = getattr(renderer_class, "render_template", None)
    code = getattr(function, "__code__", None)
    return None if code is None else registered_code(code.co_filename)
