"""Family ladders: a generated class inherits the methods it shares with an earlier one.

Upstream templates are often near copies (Llama 3.1 and 3.2 differ in the system
block only), and so are their translations. Rather than checking in the same
method twice, a new class subclasses the checked-in class it shares the most
identical methods with and keeps only the methods that differ, as
mistral-common's tokenizer versions do. The docstring says what is inherited.

The parent is always a root class (it inherits from ``GeneratedRenderer``) whose
module name sorts before the child's, so ladders have one rung and no cycles.
Method identity is textual and requires the same module-level constants, so an
inherited method behaves exactly as the child's own copy would; ``check`` marks
the child stale as soon as a regenerated parent stops matching.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import black

MINIMUM_SHARED_LINES = 15  # below this, a subclass relation costs a reader more than it saves
BASE_IMPORT = "from rllm_renderers.base import GeneratedRenderer"


@dataclass(frozen=True)
class ModuleShape:
    """The parts of a generated module that decide what can be inherited."""

    module: str
    class_name: str
    base: str
    constants: tuple[str, ...]  # module-level assignments, as source text
    methods: dict[str, tuple[int, int, str]]  # name -> (first line, last line, source)


def module_shape(module: str, code: str) -> ModuleShape | None:
    tree = ast.parse(code)
    classes = [node for node in tree.body if isinstance(node, ast.ClassDef)]
    if len(classes) != 1 or len(classes[0].bases) != 1:
        return None
    cls = classes[0]
    constants = tuple(ast.get_source_segment(code, node) for node in tree.body if isinstance(node, ast.Assign))
    methods = {}
    for node in cls.body:
        if isinstance(node, ast.FunctionDef):
            methods[node.name] = (node.lineno, node.end_lineno, ast.get_source_segment(code, node))
    return ModuleShape(module, cls.name, ast.unparse(cls.bases[0]), constants, methods)


TEMPLATE_LINE_COMMENT = re.compile(r"^\s*# L\d+: .*$\n?", re.MULTILINE)
TEMPLATE_LINE_RANGE = re.compile(r" \(lines \d+-\d+\)")


def comparable(source: str) -> str:
    """Method source without template line references (the same code may sit at other lines)."""
    return TEMPLATE_LINE_RANGE.sub("", TEMPLATE_LINE_COMMENT.sub("", source))


def shared_methods(child: ModuleShape, parent: ModuleShape) -> list[str]:
    if child.constants != parent.constants:
        return []
    return [
        name
        for name, (_, _, source) in child.methods.items()
        if name in parent.methods and comparable(parent.methods[name][2]) == comparable(source)
    ]


def choose_parent(child: ModuleShape, folder: Path) -> tuple[ModuleShape, list[str]] | None:
    """The checked-in root class sharing the most identical method lines with ``child``."""
    best: tuple[int, str, ModuleShape, list[str]] | None = None
    for path in sorted(folder.glob("*.py")):
        if path.stem.startswith("_") or path.stem >= child.module:
            continue
        parent = module_shape(path.stem, path.read_text(encoding="utf-8"))
        if parent is None or parent.base != "GeneratedRenderer":
            continue
        names = shared_methods(child, parent)
        lines = sum(child.methods[name][1] - child.methods[name][0] + 1 for name in names)
        if lines >= MINIMUM_SHARED_LINES and (best is None or lines > best[0]):
            best = (lines, path.stem, parent, names)
    return (best[2], best[3]) if best else None


def inherit(code: str, child: ModuleShape, parent: ModuleShape, inherited: list[str], mode: black.Mode) -> str:
    """``code`` with ``inherited`` methods removed and the class based on ``parent``'s class."""
    lines = code.split("\n")
    drop: set[int] = set()
    for name in inherited:
        first, last, _ = child.methods[name]
        drop.update(range(first - 1, last))
    kept = [line for number, line in enumerate(lines) if number not in drop]
    text = "\n".join(kept)
    # relative: the same line works in the checkout's generated/ and installed as rllm_renderers.generated
    text = text.replace(BASE_IMPORT, f"from .{parent.module} import {parent.class_name}", 1)
    text = text.replace(f"class {child.class_name}(GeneratedRenderer):", f"class {child.class_name}({parent.class_name}):", 1)
    note = (
        f"    Inherits from {parent.class_name} (same code): {', '.join(sorted(inherited))}.\n"
        '    """'
    )
    marker = '\n    """\n'
    at = text.index(marker, text.index(f"class {child.class_name}("))
    text = text[:at] + "\n" + note + "\n" + text[at + len(marker) :]
    return black.format_str(text, mode=mode)


def with_ladder(module: str, code: str, folder: Path, mode: black.Mode) -> str:
    """``code`` as a subclass of the best checked-in parent in ``folder``, or unchanged."""
    child = module_shape(module, code)
    if child is None or not folder.is_dir():
        return code
    chosen = choose_parent(child, folder)
    if chosen is None:
        return code
    parent, inherited = chosen
    return inherit(code, child, parent, inherited, mode)
