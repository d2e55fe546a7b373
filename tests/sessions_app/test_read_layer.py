"""The doors read sessions through the selectors: no SQL and no ORM query of their own.

The doors are the modules that answer people and programs: the pages (`web/`), the API,
the HTML export, the websocket consumer and the management commands. Each is parsed (never
imported) and searched for a database read of its own: a cursor, raw SQL, a model's manager,
a queryset method, a reload of a model, or one of the store's reads. Writes go through
`services`, `store.append_events` and the agent; reads through `sessions_app.selectors`.

The admin is a door too, with one allowance: Django admin hands its list filters and model
admins a queryset to narrow, and narrowing it (`queryset.filter(...)`) is how that framework
is used. Beyond that the admin follows the same rule: no manager, no SQL, no store read; its
own reads are selectors (`selectors/audit.py`).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parents[2] / "sessions_app"

DOORS = sorted(
    {
        *(APP / "web").glob("*.py"),
        APP / "live" / "consumers.py",
        APP / "management" / "base.py",
        *(APP / "management" / "commands").glob("*.py"),
        *([APP / "api.py"] if (APP / "api.py").exists() else (APP / "api").glob("*.py")),
    }
)
ADMIN = sorted([*APP.glob("admin*.py"), *(APP / "audit").glob("*.py")])

# Methods whose call runs SQL (`super().execute` is a command's own, and is not one).
SQL = {"cursor", "raw", "extra", "execute", "executemany", "RawSQL"}
# Attribute names that read through the ORM: managers, queryset methods, reloads.
ORM = {
    "objects",
    "filter",
    "exclude",
    "values_list",
    "select_related",
    "prefetch_related",
    "order_by",
    "annotate",
    "aggregate",
    "refresh_from_db",
}
# The store's reads (its writes and errors are for the doors to use).
STORE_READS = {
    "events_after",
    "events_of_turns",
    "entries_of",
    "entries_by_id",
    "path_to_root",
    "depth_of",
    "PATH_CTE",
}
# Names a door must not import: the database connection and query building.
IMPORTS = {"connection", "connections", "RawSQL", "Q", "QuerySet", "F", "Subquery", "Exists"}


@dataclass(frozen=True)
class Read:
    path: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.what}"


def reads_in(path: Path, forbidden: set[str], imports: set[str] = IMPORTS) -> list[Read]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    name = str(path.relative_to(APP.parent)) if path.is_relative_to(APP) else path.name
    found: list[Read] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            method, receiver = node.func.attr, node.func.value
            is_super = (
                isinstance(receiver, ast.Call) and getattr(receiver.func, "id", "") == "super"
            )
            if method in SQL and not is_super:
                found.append(Read(name, node.lineno, f".{method}()"))
        if isinstance(node, ast.Attribute):
            if node.attr in forbidden - SQL:
                found.append(Read(name, node.lineno, f".{node.attr}"))
            elif (
                node.attr in STORE_READS
                and isinstance(node.value, ast.Name)
                and node.value.id == "store"
            ):
                found.append(Read(name, node.lineno, f"store.{node.attr}"))
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                if node.module.startswith("django.db") and alias.name in imports:
                    found.append(Read(name, node.lineno, f"from {node.module} import {alias.name}"))
                if node.module == "sessions_app.store" and alias.name in STORE_READS:
                    found.append(Read(name, node.lineno, f"store's {alias.name}"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in SQL:
            found.append(Read(name, node.lineno, f"{node.func.id}()"))
    return found


def test_the_doors_are_found() -> None:
    names = {str(path.relative_to(APP)) for path in DOORS}
    assert {
        "web/views.py",
        "web/html_export.py",
        "live/consumers.py",
        "management/commands/context.py",
    } <= names
    assert any(name.startswith("api") for name in names)
    assert APP / "admin.py" in ADMIN


@pytest.mark.parametrize("path", DOORS, ids=lambda path: str(path.relative_to(APP)))
def test_a_door_reads_only_through_the_selectors(path: Path) -> None:
    assert [str(r) for r in reads_in(path, ORM)] == []


@pytest.mark.parametrize("path", ADMIN, ids=lambda path: str(path.relative_to(APP)))
def test_the_admin_narrows_the_querysets_it_is_given_and_reads_nothing_else(path: Path) -> None:
    allowed = {"QuerySet"}  # the type of what the admin hands over
    found = reads_in(path, {"objects", "refresh_from_db"}, IMPORTS - allowed)
    assert [str(r) for r in found] == []


def test_the_check_finds_each_kind_of_read(tmp_path: Path) -> None:
    door = tmp_path / "door.py"
    source = """
from django.db import connection
from django.db.models import Q
from sessions_app.store import path_to_root
from sessions_app import store

def reads(session, queryset):
    with connection.cursor() as cur:
        cur.execute("SELECT 1")
    Session.objects.all()
    queryset.filter(Q(id=1)).values_list("id")
    session.refresh_from_db()
    store.entries_of(session.id)
    store.append_events(session.id, 0, [])  # a write: allowed
    page.cursor, form.errors.values()  # not reads

class Command(BaseCommand):
    def execute(self, *args):
        return super().execute(*args)  # not a read
"""
    door.write_text(source, encoding="utf-8")
    found = {r.what for r in reads_in(door, ORM)}
    assert found == {
        "from django.db import connection",
        "from django.db.models import Q",
        "store's path_to_root",
        ".cursor()",
        ".execute()",
        ".objects",
        ".filter",
        ".values_list",
        ".refresh_from_db",
        "store.entries_of",
    }
