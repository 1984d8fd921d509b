"""The translator's intermediate representation: a small typed tree of Python statements.

Lowering (:mod:`.lower`) turns the Jinja AST into these statements; clean-up passes
(:mod:`.cleanups`) rewrite them; :mod:`.emit_py` prints them. Expressions are Python
``ast`` expressions, so every pass can ask what an expression reads or calls without
looking at code text.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Union


@dataclass
class Comment:
    """``# <text>``: where a statement came from in the template (its own text, ``{% if tools %}``;
    ``line`` is kept for error messages only, never printed: it moves when the template gains a line)."""

    line: int
    text: str


@dataclass
class Piece:
    """One operand of an output concatenation; ``content`` when it writes message content (appended on
    its own, not concatenated: its caller-text marks then need no concatenation to travel)."""

    value: ast.expr
    content: bool = False


@dataclass
class Append:
    """``{{ ... }}`` / template text: ``<output>.append(a + b + ...)``."""

    output: str
    pieces: list[Piece]


@dataclass
class Assign:
    target: ast.expr  # Name, Tuple of Names, or Attribute (a namespace attribute)
    value: ast.expr
    note: str | None = None  # why the target is renamed, when a Jinja scoping rule forces it


@dataclass
class ExprStmt:
    value: ast.expr


@dataclass
class Raise:
    """``raise_exception(message)`` as a statement: the template refuses the input."""

    exception: ast.expr  # the exception class
    message: ast.expr


@dataclass
class If:
    test: ast.expr
    body: list["Stmt"]
    orelse: list["Stmt"] = field(default_factory=list)
    line: int | None = None
    label: str = "{% if %}"
    pure_test: bool = False  # evaluating the test cannot raise: a pass may drop it


@dataclass
class For:
    target: ast.expr
    iter: ast.expr
    body: list["Stmt"]
    line: int | None = None
    label: str = "{% for %}"


@dataclass
class Break:
    pass


@dataclass
class Continue:
    pass


@dataclass
class Return:
    value: ast.expr


@dataclass
class Parameter:
    name: str
    default: ast.expr | None = None


@dataclass
class Function:
    """A nested ``def`` (a ``caller`` body, a filter block's helper)."""

    name: str
    parameters: list[Parameter]
    body: list["Stmt"]
    line: int | None = None
    label: str = ""
    varargs: str | None = None
    kwargs: str | None = None


@dataclass
class Method:
    """A method of the generated class: a role branch of the message loop, or a macro."""

    name: str
    parameters: list[Parameter]  # after ``self``
    body: list["Stmt"]
    docstring: str
    varargs: str | None = None
    kwargs: str | None = None
    memoized: bool = False  # a pure macro: ``@jinja.memoized_macro``
    role_branch: bool = False  # a branch of the message loop's role dispatch (its parameters are the caller's names)


Stmt = Union[Comment, Append, Assign, ExprStmt, Raise, If, For, Break, Continue, Return, Function]


@dataclass
class Program:
    """What lowering produces: the body of ``render_template`` and the class's other methods."""

    body: list[Stmt]
    methods: list[Method]
    resumption: object = None  # the resumable pass's verdict (compiler.translator.resumable.Resumption)


# --- expression builders --------------------------------------------------------------


def name(identifier: str) -> ast.Name:
    return ast.Name(id=identifier, ctx=ast.Load())


def store(identifier: str) -> ast.Name:
    return ast.Name(id=identifier, ctx=ast.Store())


def const(value: object) -> ast.Constant:
    return ast.Constant(value=value)


def dotted(path: str) -> ast.expr:
    """``jinja.trim`` -> Attribute(Name('jinja'), 'trim')."""
    head, *rest = path.split(".")
    node: ast.expr = name(head)
    for part in rest:
        node = ast.Attribute(value=node, attr=part, ctx=ast.Load())
    return node


def attribute(value: ast.expr, attr: str) -> ast.Attribute:
    return ast.Attribute(value=value, attr=attr, ctx=ast.Load())


def subscript(value: ast.expr, index: ast.expr) -> ast.Subscript:
    return ast.Subscript(value=value, slice=index, ctx=ast.Load())


def call(function: ast.expr | str, *args: ast.expr, **keywords: ast.expr) -> ast.Call:
    if isinstance(function, str):
        function = dotted(function)
    return ast.Call(
        func=function, args=list(args), keywords=[ast.keyword(arg=key, value=value) for key, value in keywords.items()]
    )


def jinja(helper: str) -> ast.expr:
    return dotted(f"jinja.{helper}")


def names_read(node: ast.AST) -> set[str]:
    """Python names an expression (or statement) reads."""
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def walk_statements(body: list[Stmt]):
    """Every statement under ``body``, depth first, in order."""
    for statement in body:
        yield statement
        if isinstance(statement, If):
            yield from walk_statements(statement.body)
            yield from walk_statements(statement.orelse)
        elif isinstance(statement, (For, Function)):
            yield from walk_statements(statement.body)


def expressions_of(statement: Stmt) -> list[ast.AST]:
    """The Python expressions a statement itself holds (not those of nested statements)."""
    if isinstance(statement, Append):
        return [piece.value for piece in statement.pieces]
    if isinstance(statement, Assign):
        return [statement.target, statement.value]
    if isinstance(statement, (ExprStmt, Return)):
        return [statement.value]
    if isinstance(statement, Raise):
        return [statement.exception, statement.message]
    if isinstance(statement, If):
        return [statement.test]
    if isinstance(statement, For):
        return [statement.target, statement.iter]
    if isinstance(statement, Function):
        return [parameter.default for parameter in statement.parameters if parameter.default is not None]
    return []
