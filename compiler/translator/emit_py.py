"""Print the IR as Python source lines (expressions through ``ast.unparse``); black formats them later."""

from __future__ import annotations

import ast

from ..template_tags import comment_text
from . import ir

INDENT = "    "


class _Unparser(ast._Unparser):  # type: ignore[name-defined]
    """``ast.unparse`` without the parentheses it puts around later operands of ``and`` / ``or``
    (``a and (not b)``), with those a reader wants around an ``and`` inside an ``or``."""

    def visit_BoolOp(self, node: ast.BoolOp) -> None:
        operator = self.boolops[node.op.__class__.__name__]
        precedence = self.boolop_precedence[operator]
        with self.require_parens(precedence, node):
            for position, value in enumerate(node.values):
                if position:
                    self.write(f" {operator} ")
                # `a or (b and c)`: parentheses Python does not need but a reader does
                self.set_precedence(precedence.next().next() if isinstance(value, ast.BoolOp) else precedence.next(), value)
                self.traverse(value)


def unparse(node: ast.AST) -> str:
    return _Unparser().visit(ast.fix_missing_locations(node))


def concatenation(pieces: list[ast.expr]) -> ast.expr:
    value = pieces[0]
    for piece in pieces[1:]:
        value = ast.BinOp(left=value, op=ast.Add(), right=piece)
    return value


def statement_lines(body: list[ir.Stmt], depth: int) -> list[str]:
    lines: list[str] = []
    for statement in body:
        lines += _statement(statement, depth)
    if not any(not line.lstrip().startswith("#") for line in lines):
        lines.append(INDENT * depth + "pass")
    return lines


def _parameters(parameters: list[ir.Parameter], varargs: str | None, kwargs: str | None, self_: bool) -> str:
    parts = ["self"] if self_ else []
    for parameter in parameters:
        parts.append(parameter.name if parameter.default is None else f"{parameter.name}={unparse(parameter.default)}")
    if varargs:
        parts.append(f"*{varargs}")
    if kwargs:
        parts.append(f"**{kwargs}")
    return ", ".join(parts)


def _statement(statement: ir.Stmt, depth: int) -> list[str]:
    pad = INDENT * depth
    if isinstance(statement, ir.Comment):
        return [f"{pad}# {comment_text(statement.text)}"]
    if isinstance(statement, ir.Append):
        lines = []
        plain: list[ast.expr] = []
        for piece in statement.pieces + [None]:
            if piece is not None and not piece.content:
                plain.append(piece.value)
                continue
            if plain:
                lines.append(f"{pad}{statement.output}.append({unparse(concatenation(plain))})")
                plain = []
            if piece is not None:
                lines.append(f"{pad}{statement.output}.append_content({unparse(piece.value)})")
        return lines
    if isinstance(statement, ir.Assign):
        lines = [f"{pad}# {statement.note}"] if statement.note else []
        return lines + [f"{pad}{unparse(statement.target)} = {unparse(statement.value)}"]
    if isinstance(statement, ir.ExprStmt):
        return [f"{pad}{unparse(statement.value)}"]
    if isinstance(statement, ir.Raise):
        return [f"{pad}raise {unparse(ir.call(statement.exception, statement.message))}"]
    if isinstance(statement, ir.Break):
        return [f"{pad}break"]
    if isinstance(statement, ir.Continue):
        return [f"{pad}continue"]
    if isinstance(statement, ir.Return):
        return [f"{pad}return {unparse(statement.value)}"]
    if isinstance(statement, ir.If):
        lines = [f"{pad}# {comment_text(statement.label)}"] if statement.line is not None else []
        lines.append(f"{pad}if {unparse(statement.test)}:")
        lines += statement_lines(statement.body, depth + 1)
        orelse = statement.orelse
        while len(orelse) == 1 and isinstance(orelse[0], ir.If) and orelse[0].line is None:
            lines.append(f"{pad}elif {unparse(orelse[0].test)}:")
            lines += statement_lines(orelse[0].body, depth + 1)
            orelse = orelse[0].orelse
        if orelse:
            lines.append(f"{pad}else:")
            lines += statement_lines(orelse, depth + 1)
        return lines
    if isinstance(statement, ir.For):
        lines = [f"{pad}# {comment_text(statement.label)}"] if statement.line is not None else []
        if isinstance(statement.target, ast.Tuple):  # `for i, (a, b) in ...`, not `for (i, (a, b)) in ...`
            target = ", ".join(unparse(element) for element in statement.target.elts)
        else:
            target = unparse(statement.target)
        lines.append(f"{pad}for {target} in {unparse(statement.iter)}:")
        return lines + statement_lines(statement.body, depth + 1)
    if isinstance(statement, ir.Function):
        lines = [f"{pad}# {comment_text(statement.label)}"] if statement.line is not None else []
        parameters = _parameters(statement.parameters, statement.varargs, statement.kwargs, False)
        lines.append(f"{pad}def {statement.name}({parameters}):")
        return lines + statement_lines(statement.body, depth + 1)
    raise TypeError(f"unknown IR statement {statement!r}")


def method_lines(method: ir.Method) -> list[str]:
    parameters = _parameters(method.parameters, method.varargs, method.kwargs, True)
    return [
        *([f"{INDENT}@jinja.memoized_macro"] if method.memoized else []),
        f"{INDENT}def {method.name}({parameters}):",
        f'{INDENT * 2}"""{method.docstring}"""',
        *statement_lines(method.body, 2),
    ]
