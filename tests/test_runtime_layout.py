"""The runtime's layout: no import circles, and generated code bound to one small surface.

Every import counts here, also one inside a function or under ``if TYPE_CHECKING:``: a circle
that only a lazy import keeps from failing is still a circle a reader has to untangle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGE = "rllm_renderers"
SURFACE = "rllm_renderers.compiled"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def runtime_modules() -> dict[str, Path]:
    return {module_name(path): path for path in (REPO / PACKAGE).rglob("*.py")}


def imported_modules(name: str, path: Path, modules: set[str]) -> set[str]:
    """The runtime modules ``name`` imports, wherever the import statement stands."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = ".".join(package[: len(package) - node.level + 1] + [node.module or ""]) if node.level else node.module
            base = (base or "").rstrip(".")
            candidates = [f"{base}.{alias.name}" for alias in node.names] + [base]
        elif isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        else:
            continue
        found |= {candidate for candidate in candidates if candidate in modules and candidate != name}
    return found


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        circles.append(sorted(component))
    return circles


def test_no_import_circle_in_the_runtime():
    modules = runtime_modules()
    graph = {name: imported_modules(name, path, set(modules)) for name, path in modules.items()}
    assert sum(map(len, graph.values())) > 50  # the graph was read (an empty one has no circles either)
    assert import_circles(graph) == []


def test_the_circle_finder_finds_circles():
    assert import_circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert import_circles({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize("path", sorted((REPO / "generated").glob("[!_]*.py")), ids=lambda path: path.stem)
def test_generated_modules_import_only_the_surface(path):
    runtime_imports = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ImportFrom) and node.level == 0:
            runtime_imports.add(node.module)
        elif isinstance(node, ast.Import):
            runtime_imports |= {alias.name for alias in node.names}
    assert runtime_imports <= {SURFACE}, f"{path.name} imports {sorted(runtime_imports - {SURFACE})}"


def test_the_surface_is_small_and_complete():
    import rllm_renderers.compiled as surface

    assert sorted(surface.__all__) == ["GeneratedRenderer", "ReasoningFormat", "ToolCallFormat", "TurnFormat", "jinja"]
    assert all(getattr(surface, name) is not None for name in surface.__all__)
