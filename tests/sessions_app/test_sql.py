"""The SQL files migrations install: pinned, installed as written, and read by the store
under the same keys it writes."""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path

import pytest
from django.db import connection

from sessions_app import store
from sessions_app.store import sql

NEWEST = "strand_append_v4.sql"


def test_every_migration_loads_the_sql_it_pinned():
    # Each migration checks its files' digests when imported.
    folder = Path(store.__file__).parents[1] / "migrations"
    for path in sorted(folder.glob("0*.py")):
        importlib.import_module(f"sessions_app.migrations.{path.stem}")


def test_a_changed_sql_file_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(sql, "SQL_DIR", tmp_path)
    (tmp_path / "f_v1.sql").write_text("SELECT 1;\n")
    pin = sql.digest("f_v1.sql")
    assert sql.pinned("f_v1.sql", pin) == "SELECT 1;\n"
    (tmp_path / "f_v1.sql").write_text("SELECT 1;\r\n")  # line endings alone change nothing
    assert sql.pinned("f_v1.sql", pin) == "SELECT 1;\n"
    (tmp_path / "f_v1.sql").write_text("SELECT 2;\n")
    with pytest.raises(sql.ChangedSql, match="f_v1.sql changed after a migration pinned it"):
        sql.pinned("f_v1.sql", pin)


def _body(text: str) -> str:
    return text.split("$$")[1]


@pytest.mark.django_db
def test_the_database_runs_the_newest_strand_append():
    with connection.cursor() as cur:
        cur.execute("SELECT prosrc FROM pg_proc WHERE proname = 'strand_append'")
        [(installed,)] = cur.fetchall()
    assert installed == _body((sql.SQL_DIR / NEWEST).read_text())


def test_the_store_writes_the_keys_strand_append_reads():
    body = _body((sql.SQL_DIR / NEWEST).read_text())
    read = set(re.findall(r"x\.o->>?'(\w+)'", body))
    # A batch of one is read key by key, the same keys (and its entry's timestamp).
    assert set(re.findall(r"\bone->>?'(\w+)'", body)) - {"timestamp"} == read
    entry = store.NewEvent(
        "user/message",
        {"entry": {"type": "message", "message": {"role": "user", "content": "hi"}}},
    )
    moved = store.NewEvent("leaf/moved", {"to": None})
    for prepared in store._prepare([entry, moved]):
        assert set(json.loads(store._batch_item(prepared))) == read
    assert {"schema_version", "parent_given", "path_kind", "move_to"} <= read


def test_every_statement_of_strand_append_names_its_session():
    # The statements inside the function are not the doors' own (tests/sql_audit.py sees
    # only the call): each one that reads or writes the log names the session it appends to.
    body = _body((sql.SQL_DIR / NEWEST).read_text())
    statements = [s for s in body.split(";") if re.search(r"\bsessions_app_(event|entry)\b", s)]
    assert len(statements) >= 8
    for statement in statements:
        assert "p_session" in statement, statement
        if not re.search(r"INSERT INTO sessions_app_(event|entry)\b", statement):
            assert re.search(r"\b(\w+\.)?session_id = (p_session|s\.id)\b", statement), statement
