"""Imports between `sessions_app`'s modules flow one way: no module imports, even inside a
function, a module that imports it back (directly or through others)."""

from __future__ import annotations

import ast
from pathlib import Path

import sessions_app

APP = Path(sessions_app.__file__).parent


def _module_name(path: Path) -> str:
    parts = ("sessions_app", *path.relative_to(APP).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_only(tree: ast.Module) -> set[ast.AST]:
    """Imports under `if TYPE_CHECKING:`, which never run."""
    skipped: set[ast.AST] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for inner in node.body:
                skipped.update(ast.walk(inner))
    return skipped


def import_graph() -> dict[str, set[str]]:
    paths = {
        _module_name(p): p
        for p in APP.rglob("*.py")
        if "migrations" not in p.relative_to(APP).parts
    }
    graph: dict[str, set[str]] = {name: set() for name in paths}
    for name, path in paths.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skipped = _type_checking_only(tree)
        for node in ast.walk(tree):
            if node in skipped:
                continue
            if isinstance(node, ast.Import):
                graph[name].update(a.name for a in node.names if a.name in paths)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in paths:
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    graph[name].add(sub if sub in paths else node.module)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that reach each other (Tarjan's strongly connected components)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph[node] - {node}:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_graph_sees_imports_inside_functions():
    graph = import_graph()
    assert "sessions_app.live_protocol" in graph["sessions_app.live.listener"]
    assert "sessions_app.agent" in graph["sessions_app.web.views"]  # imported in a function
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_circles():
    assert circles(import_graph()) == []
