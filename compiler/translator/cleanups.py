"""Clean-up passes over the IR: what a careful person would tidy when porting a template by hand.

Each pass keeps the renderer's behaviour exactly: it only folds what is constant, drops
what can never run, and merges what is the same.
"""

from __future__ import annotations

import ast

from rllm_renderers.jinja import runtime as template_runtime

from . import ir

# Globals transformers always defines: `is defined` on them is always true.
ALWAYS_DEFINED = {f"jinja.{helper.__name__}" for helper in template_runtime.GLOBALS.values()}
IS_DEFINED = f"jinja.{template_runtime.TESTS['defined'].__name__}"


def clean(program: ir.Program) -> ir.Program:
    program.body = drop_dead_stores(clean_block(program.body))
    for method in program.methods:
        method.body = drop_dead_stores(clean_block(method.body))
    return program


#: Statements after which nothing in the same block runs.
TERMINAL = (ir.Raise, ir.Return, ir.Break, ir.Continue)


def clean_block(body: list[ir.Stmt]) -> list[ir.Stmt]:
    result: list[ir.Stmt] = []
    for statement in body:
        result += clean_statement(statement)
        if result and isinstance(result[-1], TERMINAL):
            break  # `{{ raise_exception(...) }}` then more text: the text can never be written
    return result


#: Expression nodes whose evaluation cannot fail or have an effect.
PURE_NODES = (
    ast.Constant,
    ast.Name,
    ast.Load,
    ast.Tuple,
    ast.List,
    ast.Set,
    ast.Dict,
    ast.UnaryOp,
    ast.USub,
    ast.UAdd,
    ast.Not,
)


def drop_dead_stores(body: list[ir.Stmt]) -> list[ir.Stmt]:
    """``body`` without assignments of a side-effect-free value to a name nothing in it reads (a
    ``set`` inside a loop that Jinja's scoping makes local and nothing reads afterwards)."""
    while True:
        read: set[str] = set()
        for statement in ir.walk_statements(body):
            for expression in ir.expressions_of(statement):
                read |= ir.names_read(expression)
            if isinstance(statement, ir.Append):
                read.add(statement.output.split(".")[0])
        dead = [
            statement
            for statement in ir.walk_statements(body)
            if isinstance(statement, ir.Assign)
            and isinstance(statement.target, ast.Name)
            and statement.target.id not in read
            and all(isinstance(node, PURE_NODES) for node in ast.walk(statement.value))
        ]
        if not dead:
            return body
        body = without(body, {id(statement) for statement in dead})


def without(body: list[ir.Stmt], dropped: set[int]) -> list[ir.Stmt]:
    kept: list[ir.Stmt] = []
    for statement in body:
        if id(statement) in dropped:
            if statement.note:  # say why the template's `set` has no code: Jinja keeps it local here
                kept.append(ir.Comment(0, statement.note.split(", hence")[0] + ", and nothing reads it"))
            continue
        if isinstance(statement, ir.If):
            statement.body, statement.orelse = without(statement.body, dropped), without(statement.orelse, dropped)
        elif isinstance(statement, (ir.For, ir.Function)):
            statement.body = without(statement.body, dropped)
        kept.append(statement)
    return kept


def clean_statement(statement: ir.Stmt) -> list[ir.Stmt]:
    if isinstance(statement, ir.If):
        return clean_if(statement)
    if isinstance(statement, (ir.For, ir.Function)):
        for expression in ir.expressions_of(statement):
            fold_literals(expression)
        statement.body = clean_block(statement.body)
        return [statement]
    if isinstance(statement, ir.Append):
        statement.pieces = folded_pieces(statement.pieces)
        return [statement] if statement.pieces else []
    if isinstance(statement, ir.Assign):
        statement.value = fold_literals(statement.value)
    elif isinstance(statement, (ir.ExprStmt, ir.Return)):
        statement.value = fold_literals(statement.value)
    elif isinstance(statement, ir.Raise):
        statement.message = fold_literals(statement.message)
    return [statement]


def clean_if(statement: ir.If) -> list[ir.Stmt]:
    statement.test = fold_literals(statement.test)
    statement.body = clean_block(statement.body)
    statement.orelse = clean_block(statement.orelse)
    known = constant_test(statement.test)
    if known is not None:
        # `{% if strftime_now is defined %}`: transformers always defines it, so one branch is dead.
        kept = statement.body if known else statement.orelse
        if kept and statement.line is not None:
            return [ir.Comment(statement.line, f"{statement.label}: always {'true' if known else 'false'}"), *kept]
        return kept
    if statement.pure_test and not code_of(statement.body) and not code_of(statement.orelse):
        return []  # `{% if not loop.last %}{% endif %}`: nothing to do either way
    if statement.pure_test and statement.orelse and same_block(statement.body, statement.orelse):
        # both branches do the same and the test has no effect: keep one copy
        if statement.line is not None:
            return [ir.Comment(statement.line, f"{statement.label}: both branches are the same"), *statement.body]
        return statement.body
    return [statement]


def constant_test(test: ast.expr) -> bool | None:
    """True/False when ``test`` is ``jinja.defined(<always-defined global>)`` (or its negation)."""
    negated = False
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test, negated = test.operand, True
    if (
        isinstance(test, ast.Call)
        and dotted_name(test.func) == IS_DEFINED
        and len(test.args) == 1
        and dotted_name(test.args[0]) in ALWAYS_DEFINED
    ):
        return not negated
    return None


def dotted_name(node: ast.expr) -> str | None:
    """``jinja.defined`` for Attribute(Name('jinja'), 'defined'); None for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = dotted_name(node.value)
        return f"{head}.{node.attr}" if head else None
    return None


def code_of(body: list[ir.Stmt]) -> list[ir.Stmt]:
    """The statements of a block that are not comments."""
    return [statement for statement in body if not isinstance(statement, ir.Comment)]


def same_block(first: list[ir.Stmt], second: list[ir.Stmt]) -> bool:
    return block_key(first) == block_key(second)


def block_key(body: list[ir.Stmt]) -> tuple:
    """A structural key of a block, ignoring template line comments (the same code at other lines)."""
    key = []
    for statement in body:
        if isinstance(statement, ir.Comment):
            continue
        fields = [type(statement).__name__]
        for value in vars(statement).values():
            if isinstance(value, ast.AST):
                fields.append(ast.dump(value))
            elif isinstance(value, list) and value and isinstance(value[0], ir.Piece):
                fields.append(
                    tuple((ast.dump(piece.value), piece.content) for piece in value)
                )
            elif isinstance(value, list) and all(not isinstance(item, ast.AST) for item in value):
                fields.append(block_key(value) if value and not isinstance(value[0], ir.Parameter) else repr(value))
            elif isinstance(value, (str, int, bool, type(None))):
                fields.append(value)
        key.append(tuple(fields))
    return tuple(key)


def is_text(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def split_pieces(pieces: list[ir.Piece]) -> list[ir.Piece]:
    """``"a" + (b + "c")`` as the pieces ``"a"``, ``b``, ``"c"``: a ``+`` chain that starts with a
    literal is a string concatenation, and appending its operands in a row is the same."""
    result = []
    for piece in pieces:
        operands = add_operands(piece.value)
        if not piece.content and len(operands) > 1 and is_text(operands[0]):
            result += [ir.Piece(operand) for operand in operands]
        else:
            result.append(piece)
    return result


def add_operands(node: ast.expr) -> list[ast.expr]:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return add_operands(node.left) + add_operands(node.right)
    return [node]


def folded_pieces(pieces: list[ir.Piece]) -> list[ir.Piece]:
    """Adjacent literal pieces joined into one; empty literals dropped."""
    result: list[ir.Piece] = []
    for piece in split_pieces(pieces):
        piece.value = fold_literals(piece.value)
        if is_text(piece.value) and not piece.value.value:
            continue
        if result and is_text(piece.value) and not piece.content and not result[-1].content:
            previous = result[-1].value
            if is_text(previous):
                result[-1] = ir.Piece(ir.const(previous.value + piece.value.value))
                continue
            if isinstance(previous, ast.BinOp) and isinstance(previous.op, ast.Add) and is_text(previous.right):
                # `x + "a"` then `"b"`: `x + "ab"` (string `+` is associative)
                joined = ir.const(previous.right.value + piece.value.value)
                result[-1] = ir.Piece(ast.BinOp(left=previous.left, op=ast.Add(), right=joined))
                continue
        result.append(piece)
    return result


class _LiteralFolder(ast.NodeTransformer):
    """``"a" + "b"`` -> ``"ab"`` and ``x + "a" + "b"`` -> ``x + "ab"`` (``+`` on str is associative)."""

    def visit_BinOp(self, node: ast.BinOp) -> ast.expr:
        self.generic_visit(node)
        if not isinstance(node.op, ast.Add) or not is_text(node.right):
            return node
        if is_text(node.left):
            return ir.const(node.left.value + node.right.value)
        left = node.left
        if isinstance(left, ast.BinOp) and isinstance(left.op, ast.Add) and is_text(left.right):
            return ast.BinOp(left=left.left, op=ast.Add(), right=ir.const(left.right.value + node.right.value))
        return node


def fold_literals(expression: ast.expr) -> ast.expr:
    return _LiteralFolder().visit(expression)
