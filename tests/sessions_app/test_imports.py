"""Imports between `sessions_app`'s modules flow one way: no module imports, even inside a
function, a module that imports it back (directly or through others); and the folders are
layers (DESIGN §9), each importing only the layers below it:

    doors      web/  api/  live/  audit/  admin.py  management/
    services   services/
    agent      agent/
    reads      selectors/
    projectors projectors/ (asynchronous projections: they read the store, selectors read them)
    write      store/
    ground     the modules at the root (models, events, errors, limits, pg, ...), templatetags/,
               and any folder's `models` (the tables, which Django loads with `models`)
"""

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


def import_graph(type_checking: bool = False) -> dict[str, set[str]]:
    """Module → the modules of ours it imports; with `type_checking`, also those imported
    only for type checkers (which a reader follows all the same)."""
    paths = {
        _module_name(p): p
        for p in APP.rglob("*.py")
        if "migrations" not in p.relative_to(APP).parts
    }
    graph: dict[str, set[str]] = {name: set() for name in paths}
    for name, path in paths.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skipped = set() if type_checking else _type_checking_only(tree)
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


# --- layers --------------------------------------------------------------------------------

DOORS = {"web", "api", "live", "audit", "admin", "management"}
RANKS = {
    **dict.fromkeys(DOORS, 6),
    "services": 5,
    "agent": 4,
    "selectors": 3,
    "projectors": 2,
    "store": 1,
}
GROUND = 0  # every module at the root but admin.py, and templatetags/

# The door Django's admin discovers (`sessions_app.admin`) registers the audit desk's admin.
DOOR_TO_DOOR = {("admin", "audit")}


def folder_of(module: str) -> str:
    """The layer folder a module is in: its first package under `sessions_app`, or for a
    module at the root its own name (`admin`) or the ground (`""`)."""
    parts = module.split(".")[1:]
    if not parts:
        return ""
    if len(parts) == 1 and not (APP / parts[0]).is_dir():
        return "admin" if parts[0] == "admin" else ""
    if parts[-1] == "models":
        return ""
    return "" if parts[0] == "templatetags" else parts[0]


def rank(folder: str) -> int:
    return RANKS.get(folder, GROUND)


def layer_breaches(graph: dict[str, set[str]]) -> list[str]:
    found = []
    for module, imported in sorted(graph.items()):
        for other in sorted(imported):
            here, there = folder_of(module), folder_of(other)
            if here == there or (here, there) in DOOR_TO_DOOR:
                continue
            if rank(here) <= rank(there):
                found.append(f"{module} imports {other}")
    return found


def test_the_folders_are_layers_each_importing_only_those_below() -> None:
    graph = import_graph(type_checking=True)
    assert {folder_of(name) for name in graph} == {"", *DOORS, *RANKS}
    assert folder_of("sessions_app.models") == folder_of("sessions_app.templatetags.strand") == ""
    assert folder_of("sessions_app.live.wire.frames_shared") == "live"
    assert layer_breaches(graph) == []


def test_a_layer_breach_is_seen() -> None:
    graph = {
        "sessions_app.store": {"sessions_app.selectors.events"},  # the store reading up
        "sessions_app.agent.log": {"sessions_app.services.replay"},  # the agent above
        "sessions_app.api.base": {"sessions_app.web.views"},  # a door through another
        "sessions_app.events": {"sessions_app.store"},  # the ground through the store
        "sessions_app.admin": {"sessions_app.audit.admin"},  # allowed
        "sessions_app.web.views": {"sessions_app.agent", "sessions_app.models"},  # down: fine
    }
    assert layer_breaches(graph) == [
        "sessions_app.agent.log imports sessions_app.services.replay",
        "sessions_app.api.base imports sessions_app.web.views",
        "sessions_app.events imports sessions_app.store",
        "sessions_app.store imports sessions_app.selectors.events",
    ]


def test_no_import_circles_through_type_checking_imports() -> None:
    # The turn lock, a turn's place and the log adapter name what they need of the engine
    # as protocols of their own; the engine, which builds them, is the only one to import.
    assert circles(import_graph(type_checking=True)) == []
