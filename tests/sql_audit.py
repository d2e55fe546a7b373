"""Every SQL statement a test makes, and whether those that touch the session log name one
session: the tables could then be distributed by `session_id` (Citus), every query landing
on one shard (README, "Running it for several people").

`recorded()` records each statement any psycopg cursor of this process runs, on any thread
(Django's cursors, the store's own, the live feed's), with the code of ours that ran it.
`violations()` asks Postgres for the plan of each statement that names `sessions_app_event`
or `sessions_app_entry` and finds every scan of those tables that no condition on its
`session_id` restricts: not in its index condition or filter (`session_id = …`, `= ANY(…)`,
`IN (…)`, a parameter from the row of the outer side of a join), nor in the condition of a
join above it. Postgres carries a session id across equalities itself (a join from a
session's own row names the session in the scan), so the plan is the judge, not the text.
An INSERT or a COPY into the tables names its session in each row.

Reads across sessions go through their own projections; the few that read the log itself
are listed in `EXCEPTIONS` with why, by the module of ours that runs them.
"""

from __future__ import annotations

import json
import re
import threading
import traceback
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql as pgsql

ROOT = Path(__file__).resolve().parents[1]
TABLES = ("sessions_app_event", "sessions_app_entry")
_NAMES = re.compile(r'\b"?(sessions_app_event|sessions_app_entry)"?\b')

# Module (or module.function) of ours → why its statements may read the log of more than
# one session. Nothing else may.
EXCEPTIONS: dict[str, str] = {
    "django.contrib.admin": (
        "the admin's raw lists of events and entries, for superusers: the whole log, "
        "filtered and searched by session, type or time"
    ),
    "sessions_app.selectors.audit": (
        "the audit desk: staff read requests, headers and usage across every session, "
        "newest first; on Citus a multi-shard read, rare and for staff only"
    ),
    "sessions_app.projectors": (
        "the projectors (search index, usage rollups, OTLP export) read committed events "
        "after their checkpoints across sessions, to build the projections that search, "
        "usage and the audit desk then read instead of the log"
    ),
    "sessions_app.store.refresh_statistics": (
        "ANALYZE of the whole tables after a large import: maintenance, not a read"
    ),
    "sessions_app.selectors.runtime.sessions_with_open_turn": (
        "crash recovery when a process starts (and `manage.py recover` with no session) "
        "finds the sessions whose latest turn is still open: once per start, across sessions"
    ),
    "sessions_app.selectors.runtime.sessions_with_open_jobs": (
        "crash recovery's other half: the sessions with a background job started and not "
        "ended, to record the jobs of a dead process as lost; once per start, across sessions"
    ),
}


@dataclass(frozen=True, slots=True)
class Statement:
    sql: str  # with its parameters bound as literals
    origin: tuple[str, ...]  # module.function of our frames that ran it, innermost first

    @property
    def where(self) -> str:
        return self.origin[0] if self.origin else "?"


@dataclass
class Recorder:
    statements: list[Statement] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, cursor: Any, query: Any, params: Any) -> None:
        text = _text(cursor, query)
        if text is None or not _NAMES.search(text):
            return
        if params is not None:
            # Unbindable parameters keep the template: EXPLAIN then says why.
            with suppress(Exception):
                text = psycopg.ClientCursor(cursor.connection).mogrify(text, params)
        with self.lock:
            self.statements.append(Statement(text, _origin()))


def _text(cursor: Any, query: Any) -> str | None:
    if isinstance(query, bytes):
        return query.decode("utf-8", "replace")
    if isinstance(query, str):
        return query
    if isinstance(query, pgsql.Composable):
        try:
            return query.as_string(cursor.connection)
        except Exception:
            return None
    return None


def _origin() -> tuple[str, ...]:
    """Our frames that ran the statement, innermost first; "django.contrib.admin" first
    when the admin's own code (below all of ours) ran it."""
    names: list[str] = []
    admin_below = False
    for frame in traceback.extract_stack()[:-3]:
        if "/django/contrib/admin/" in frame.filename:
            admin_below = True
            continue
        try:
            relative = Path(frame.filename).resolve().relative_to(ROOT)
        except ValueError:
            continue
        if relative.parts[0] in ("tests", "bench", ".venv") or relative.suffix != ".py":
            continue
        module = ".".join(relative.with_suffix("").parts).removesuffix(".__init__")
        names.append(f"{module}.{frame.name}")
        admin_below = False
    if admin_below:
        names.append("django.contrib.admin")
    return tuple(reversed(names))


_PATCHED = [
    (psycopg.Cursor, "execute"),
    (psycopg.Cursor, "executemany"),
    (psycopg.Cursor, "stream"),
    (psycopg.Cursor, "copy"),
    (psycopg.ServerCursor, "execute"),
    (psycopg.AsyncCursor, "execute"),
    (psycopg.AsyncCursor, "executemany"),
    (psycopg.AsyncCursor, "stream"),
    (psycopg.AsyncCursor, "copy"),
    (psycopg.AsyncServerCursor, "execute"),
]


@contextmanager
def recorded() -> Iterator[Recorder]:
    """Record, while inside, the statements of every psycopg cursor of this process."""
    recorder = Recorder()
    saved = [(cls, name, cls.__dict__[name]) for cls, name in _PATCHED]
    for cls, name, original in saved:
        setattr(cls, name, _wrap(recorder, original, many=name == "executemany"))
    try:
        yield recorder
    finally:
        for cls, name, original in saved:
            setattr(cls, name, original)


def _wrap(recorder: Recorder, original: Any, *, many: bool) -> Any:
    def wrapper(self: Any, query: Any, params: Any = None, *args: Any, **kwargs: Any) -> Any:
        first = params
        if many:
            params = list(params)
            first = params[0] if params else None
        recorder.add(self, query, first)
        return original(self, query, params, *args, **kwargs)

    wrapper.__wrapped__ = original  # type: ignore[attr-defined]
    return wrapper


# --- the judge: Postgres's plans --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Violation:
    statement: Statement
    reason: str

    def __str__(self) -> str:
        return f"{self.statement.where}: {self.reason}\n    {self.statement.sql[:600]}"


def excepted(statement: Statement) -> str | None:
    """Why the statement may read across sessions, if the code of ours that ran it (the
    innermost frame: not whoever called it) is a listed exception."""
    name = statement.where
    for prefix, reason in EXCEPTIONS.items():
        if name == prefix or name.startswith(prefix + "."):
            return reason
    return None


def violations(statements: list[Statement], conn: psycopg.Connection) -> list[Violation]:
    """The statements (outside `EXCEPTIONS`) whose plans read the log of more than one
    session; each distinct statement is planned once, on `conn`."""
    found: list[Violation] = []
    seen: set[tuple[str, str]] = set()
    for statement in statements:
        key = (statement.sql, statement.where)
        if key in seen or excepted(statement) is not None:
            continue
        seen.add(key)
        reason = _judge(statement.sql, conn)
        if reason is not None:
            found.append(Violation(statement, reason))
    return found


_COPY_IN = re.compile(r"^\s*COPY\s+\S+\s*(\([^)]*\))?\s+FROM\s+STDIN", re.I)
_DECLARE = re.compile(r"^\s*DECLARE\s+.*?\bFOR\s+(.*)$", re.I | re.S)


def _judge(text: str, conn: psycopg.Connection) -> str | None:
    if _COPY_IN.match(text):
        return None  # each row names its session
    if declared := _DECLARE.match(text):
        text = declared.group(1)
    try:
        with conn.transaction(force_rollback=True), conn.cursor() as cur:
            explain = pgsql.SQL("EXPLAIN (VERBOSE, COSTS OFF, FORMAT JSON) ")
            cur.execute(explain + pgsql.SQL(text))  # type: ignore[arg-type]
            row = cur.fetchone()
    except psycopg.Error as exc:
        return f"could not be planned to check it: {str(exc).strip().splitlines()[0]}"
    assert row is not None
    plan = row[0] if not isinstance(row[0], str) else json.loads(row[0])
    unrestricted = list(_unrestricted(plan[0]["Plan"], ()))
    if unrestricted:
        return "reads " + ", ".join(unrestricted) + " with no session_id condition"
    return None


_CONDITIONS = ("Index Cond", "Recheck Cond", "Filter", "Hash Cond", "Merge Cond", "Join Filter")


def _conditions(node: dict[str, Any]) -> list[str]:
    found = [str(node[key]) for key in _CONDITIONS if key in node]
    for child in node.get("Plans", ()):
        if child.get("Node Type") == "Bitmap Index Scan":
            found += _conditions(child)
    return found


def _unrestricted(node: dict[str, Any], above: tuple[str, ...]) -> Iterator[str]:
    relation = node.get("Relation Name")
    if relation in TABLES and node.get("Node Type") != "ModifyTable":
        alias = node.get("Alias", relation)
        mine = _conditions(node)
        column = re.compile(rf"(^|[^\w.]){re.escape(alias)}\.session_id\b|^\(?session_id\b")
        own = any(re.search(rf"\b{re.escape(alias)}\.session_id\b", c) for c in mine) or any(
            column.search(c) for c in mine
        )
        joined = any(re.search(rf"\b{re.escape(alias)}\.session_id\b", c) for c in above)
        if not (own or joined):
            yield f"{relation} (as {alias}, {node['Node Type']})"
    here = tuple(
        str(node[key]) for key in ("Hash Cond", "Merge Cond", "Join Filter") if key in node
    )
    for child in node.get("Plans", ()):
        yield from _unrestricted(child, above + here)
