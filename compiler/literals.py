"""The one way outside data reaches generated source.

Model ids, file names, manifest fields, template strings and special-token values come from
files and command lines the compiler does not control. In code they appear only as ``repr``
literals; in docstrings and comments through :func:`docstring_text` / :func:`docstring_repr`,
which can neither end the docstring nor hold a line break; a name the code uses as an
identifier is refused unless it is one (:func:`require_identifier`).
"""

from __future__ import annotations

from .errors import CompileError

TRIPLE_QUOTE = '"""'


def is_plain_text(value: str) -> bool:
    """Printable text with no quote or backslash: safe verbatim in any docstring or comment."""
    return value.isprintable() and '"' not in value and "\\" not in value


def docstring_repr(value: object) -> str:
    """``repr(value)`` made safe inside a docstring: a ``"`` becomes ``\\x22`` when the repr holds
    three in a row (the docstring's end); repr already escapes line breaks and other controls."""
    text = repr(value)
    return text.replace('"', "\\x22") if TRIPLE_QUOTE in text or not text.isprintable() else text


def docstring_text(value: str) -> str:
    """``value`` in prose: verbatim when it is plain text (every ordinary model id or file name),
    else its escaped literal (``'evil\\x22\\x22\\x22\\nimport os'``), never raw quotes or line breaks."""
    return value if is_plain_text(value) else ascii(value).replace('"', "\\x22")


def require_identifier(value: str, what: str) -> str:
    """``value`` when the generated code can use it as a Python name; else a CompileError naming it."""
    if not isinstance(value, str) or not value.isidentifier() or not value.isascii():
        raise CompileError(f"{what} {docstring_text(str(value))} cannot be a Python name in the generated code")
    return value
