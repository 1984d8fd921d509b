"""Family ladders: a generated class inherits the methods it shares with an earlier one.

Upstream templates are often near copies (Llama 3.1 and 3.2 differ in the system
block only), and so are their translations. Rather than checking in the same
method twice, a new class subclasses the class in its output folder it shares the most
identical methods with (or an explicitly named one) and keeps only the methods that differ, as
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

MINIMUM_SHARED_LINES = 15  # below this, a subclass relation costs a reader more than it saves


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
    lines = LINE_BREAKS.split(code)
    constants = tuple(source_segment(lines, node) for node in tree.body if isinstance(node, ast.Assign))
    methods = {}
    for node in cls.body:
        if isinstance(node, ast.FunctionDef):
            methods[node.name] = (node.lineno, node.end_lineno, source_segment(lines, node))
    return ModuleShape(module, cls.name, ast.unparse(cls.bases[0]), constants, methods)


#: Where Python's tokenizer breaks lines (ast.get_source_segment's rule), the break kept.
LINE_BREAKS = re.compile(r"(?<=\r\n)|(?<=\r)(?!\n)|(?<=\n)")


def source_segment(lines: list[str], node: ast.AST) -> str:
    """``ast.get_source_segment`` over lines split once (it splits the whole module per call:
    quadratic in the size of the module)."""
    first, last = node.lineno - 1, node.end_lineno - 1
    if first == last:
        return lines[first].encode()[node.col_offset : node.end_col_offset].decode()
    head = lines[first].encode()[node.col_offset :].decode()
    tail = lines[last].encode()[: node.end_col_offset].decode()
    return head + "".join(lines[first + 1 : last]) + tail


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


@dataclass(frozen=True)
class Parent:
    """The class a generated module inherits from, and the methods it takes from it unchanged."""

    module: str
    class_name: str
    inherited: tuple[str, ...]


def choose_ladder_parent(module: str, code: str, folder: Path | None) -> Parent | None:
    """The parent for ``code`` among the modules in ``folder`` (the output folder), or None.

    Only ``folder`` is consulted, never the checkout's ``generated/``, so the same template and
    output folder give the same bytes whatever the checkout holds.
    """
    child = module_shape(module, code)
    if child is None or folder is None or not folder.is_dir():
        return None
    chosen = choose_parent(child, folder)
    if chosen is None:
        return None
    parent, inherited = chosen
    return Parent(parent.module, parent.class_name, tuple(sorted(inherited)))


def named_parent(module: str, code: str, folder: Path, parent_module: str) -> Parent:
    """An explicitly named parent module in ``folder``: inherits the methods it shares with ``code``."""
    child = module_shape(module, code)
    path = folder / f"{parent_module}.py"
    parent = module_shape(parent_module, path.read_text(encoding="utf-8")) if path.is_file() else None
    if child is None or parent is None or parent.base != "GeneratedRenderer":
        raise ValueError(f"{path} is not a generated root class to inherit from")
    return Parent(parent.module, parent.class_name, tuple(sorted(shared_methods(child, parent))))
