"""How deep a template nests, read from its tokens: what to name when jinja2 or Python gives up on it.

jinja2's parser recurses once per nested block and per nested bracket, and its code generator
writes one indented Python block per nested block: 1000 nested ``{% if %}`` exhaust the parser's
recursion, 150 the indentation Python compiles, 25 nested ``{% for %}`` Python's limit of static
blocks. transformers fails on such a template too; the compiler says which construct nests how deep
(:func:`deepest_nesting`), in one line, rather than a traceback. The lexer is a loop (no recursion),
so it reads any template the parser cannot.
"""

from __future__ import annotations

from dataclasses import dataclass

from jinja2 import Environment, TemplateSyntaxError

#: Block tags that open a body closed by ``end<tag>`` (``set`` only in its block form, no ``=``).
OPENERS = frozenset(["if", "for", "macro", "call", "filter", "with", "block", "autoescape", "set"])
BRACKETS = {"(": ")", "[": "]", "{": "}"}


@dataclass(frozen=True)
class Nesting:
    construct: str  # "{% if %}", "(" ...
    depth: int
    line: int  # where the deepest one opens

    def describe(self) -> str:
        return f"{self.construct} nested {self.depth} deep"


def deepest_nesting(source: str) -> Nesting | None:
    """The block tag or bracket nested deepest in ``source`` (blocks of one keyword counted apart from
    brackets), or None when it does not even lex."""
    blocks: list[str] = []
    brackets: list[str] = []
    deepest: Nesting | None = None
    tokens = _tokens(source)
    for index, (line, kind, value) in enumerate(tokens):
        opened = None
        if kind == "block_begin" and index + 1 < len(tokens) and tokens[index + 1][1] == "name":
            keyword = tokens[index + 1][2]
            if keyword in OPENERS and not (keyword == "set" and _assigns(tokens, index + 2)):
                blocks.append(keyword)
                opened = (f"{{% {keyword} %}}", blocks.count(keyword))
            elif keyword.startswith("end") and blocks:
                blocks.pop()
        elif kind == "operator" and value in BRACKETS:
            brackets.append(value)
            opened = (value, len(brackets))
        elif kind == "operator" and value in BRACKETS.values() and brackets:
            brackets.pop()
        if opened is not None and (deepest is None or opened[1] > deepest.depth):
            deepest = Nesting(opened[0], opened[1], line)
    return deepest


def _tokens(source: str) -> list[tuple[int, str, str]]:
    try:
        return [token for token in Environment().lex(source) if token[1] != "whitespace"]
    except TemplateSyntaxError:
        return []


def _assigns(tokens: list[tuple[int, str, str]], start: int) -> bool:
    """Whether the ``{% set ... %}`` tag whose name follows ``start`` assigns (``=``) on its line."""
    for _, kind, value in tokens[start:]:
        if kind == "block_end":
            return False
        if kind == "operator" and value == "=":
            return True
    return False


def too_deep_message(source: str, exc: BaseException) -> tuple[str, int | None]:
    """(message, template line) for a template jinja2 or Python cannot take (``exc``: RecursionError,
    SyntaxError, IndentationError, MemoryError)."""
    reason = exc.msg if isinstance(exc, SyntaxError) else str(exc) or type(exc).__name__
    deepest = deepest_nesting(source)
    what = f"{deepest.describe()}: " if deepest is not None else ""
    return (
        f"{what}the template nests deeper than jinja2 and Python can take ({type(exc).__name__}: {reason})",
        deepest.line if deepest is not None else None,
    )
