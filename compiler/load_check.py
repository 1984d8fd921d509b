"""What loading a generated module may run: its imports, its literal constants and its class body.

The compiler imports each module it emits (to probe and verify it), and ``check`` / ``verify``
import the files of an output folder. Before either executes a module, :func:`check_load_safe`
reads its syntax tree and refuses anything that would run at import time beyond that: a
statement outside the class, a call that is not a format record's constructor, a decorator other
than ``jinja.memoized_macro``, an annotation or default that is not a literal. Method bodies run
only when called, so they are not restricted here.
"""

from __future__ import annotations

import ast

from .errors import CompileError

#: The one module a generated renderer imports from: the runtime's stable surface for generated code.
#: Nothing else, not even a sibling module: every generated module is self-contained.
RUNTIME_MODULES = frozenset({"rllm_renderers.compiled"})
#: Callables a class constant may be built with: the format records rllm_renderers.compiled exports.
RECORD_MODULE = "rllm_renderers.compiled"
RECORDS = frozenset({"ReasoningFormat", "ToolCallFormat", "TurnFormat"})
DECORATORS = frozenset({"jinja.memoized_macro"})


def check_load_safe(code: str, where: str) -> ast.Module:
    """The parsed module, or a CompileError naming the first statement that would run at import."""
    try:
        tree = ast.parse(code, filename=where)
    except SyntaxError as exc:
        raise CompileError(f"{where}:{exc.lineno}: not valid Python ({exc.msg})") from None
    except ValueError as exc:  # NUL bytes
        raise CompileError(f"{where}: not valid Python ({exc})") from None
    records: set[str] = set()
    for statement in tree.body:
        if isinstance(statement, ast.ImportFrom):
            if not (statement.level == 0 and statement.module in RUNTIME_MODULES):
                refuse(statement, where, f"an import from outside {', '.join(sorted(RUNTIME_MODULES))}")
            if statement.module == RECORD_MODULE:
                records |= {alias.asname or alias.name for alias in statement.names if alias.name in RECORDS}
        elif is_docstring(statement):
            pass
        elif isinstance(statement, ast.Assign):
            check_assignment(statement, where, records, literal_only=True)
        elif isinstance(statement, ast.ClassDef):
            check_class(statement, where, records)
        else:
            refuse(statement, where, "a statement that runs at import (only imports, literal constants and the class may)")
    return tree


def check_class(node: ast.ClassDef, where: str, records: set[str]) -> None:
    if node.decorator_list or node.keywords or not all(isinstance(base, ast.Name) for base in node.bases):
        refuse(node, where, "a class with decorators, keywords or computed bases")
    for statement in node.body:
        if is_docstring(statement):
            continue
        if isinstance(statement, ast.Assign):
            check_assignment(statement, where, records, literal_only=False)
        elif isinstance(statement, ast.FunctionDef):
            check_method(statement, where)
        else:
            refuse(statement, where, "a statement that runs in the class body (only constants and methods may)")


def check_method(node: ast.FunctionDef, where: str) -> None:
    for decorator in node.decorator_list:
        if ast.unparse(decorator) not in DECORATORS:
            refuse(decorator, where, f"decorator {ast.unparse(decorator)} on {node.name}")
    arguments = node.args
    annotated = [arg for arg in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs) if arg.annotation]
    annotated += [arg for arg in (arguments.vararg, arguments.kwarg) if arg is not None and arg.annotation]
    if annotated or node.returns is not None:
        refuse(node, where, f"annotations on {node.name} (they run when the method is defined)")
    for default in (*arguments.defaults, *(d for d in arguments.kw_defaults if d is not None)):
        if not (is_literal(default) or is_undefined_default(default)):
            refuse(default, where, f"a default of {node.name} that is not a literal")


def check_assignment(node: ast.Assign, where: str, records: set[str], *, literal_only: bool) -> None:
    if len(node.targets) != 1 or not isinstance(node.targets[0], ast.Name):
        refuse(node, where, "an assignment to something other than one name")
    if not (is_literal(node.value) if literal_only else is_constant_value(node.value, records)):
        refuse(node, where, f"a constant {node.targets[0].id} that is not a literal")


def is_literal(node: ast.expr) -> bool:
    try:
        ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


def is_undefined_default(node: ast.expr) -> bool:
    """``jinja.Undefined("name")``: a macro parameter the caller may leave out."""
    return (
        isinstance(node, ast.Call)
        and ast.unparse(node.func) == "jinja.Undefined"
        and not node.keywords
        and len(node.args) == 1
        and isinstance(node.args[0], ast.Constant)
    )


def is_constant_value(node: ast.expr, records: set[str]) -> bool:
    """A class constant: literals, names of module constants, and format records built from them."""
    if isinstance(node, (ast.Constant, ast.Name)):
        return True
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return all(is_constant_value(element, records) for element in node.elts)
    if isinstance(node, ast.Dict):
        return all(key is not None and is_constant_value(key, records) for key in node.keys) and all(
            is_constant_value(value, records) for value in node.values
        )
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        return isinstance(node.operand, ast.Constant)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in records:
        return all(not isinstance(arg, ast.Starred) and is_constant_value(arg, records) for arg in node.args) and all(
            keyword.arg is not None and is_constant_value(keyword.value, records) for keyword in node.keywords
        )
    return False


def is_docstring(statement: ast.stmt) -> bool:
    return (
        isinstance(statement, ast.Expr)
        and isinstance(statement.value, ast.Constant)
        and isinstance(statement.value.value, str)
    )


def refuse(node: ast.AST, where: str, what: str) -> None:
    raise CompileError(f"{where}:{getattr(node, 'lineno', '?')}: not loaded: it has {what}")
