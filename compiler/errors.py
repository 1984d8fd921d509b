"""Errors the compiler reports to its user."""

from __future__ import annotations


class CompileError(Exception):
    """The compiler cannot turn this template into a renderer; names what and where."""

    def __init__(self, message: str, *, template: str | None = None, line: int | None = None) -> None:
        location = ""
        if template:
            location = f"{template}:{line}: " if line else f"{template}: "
        elif line:
            location = f"line {line}: "
        super().__init__(f"{location}{message}")
        self.template = template
        self.line = line


class SourceError(CompileError):
    """The template (or its tokenizer) could not be found or loaded."""


class VerificationError(CompileError):
    """The generated renderer disagrees with the template on some conversation."""
