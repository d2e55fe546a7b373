"""Two branches of a session compared. Read: the two branches below their common ancestor,
the events of the turns that wrote them, and what the two next contexts need (the path
above the ancestor, once; or, when a path was compacted, the two leaves' kept windows). The
common ancestor is found by a walk that returns ids only."""

from __future__ import annotations

from django.db import connection

from projections.compare import DEFAULT_COMPARE_ROWS, BranchComparison, compare_branches
from projections.records import EntryRecord, EventRecord
from sessions_app import store
from sessions_app.models import Session
from sessions_app.selectors.context import session_context
from sessions_app.selectors.turns import turns_of_entries

_UP = """
    {name} AS (
        SELECT id, entry_id, parent_id, depth FROM sessions_app_entry
        WHERE session_id = %(s)s AND entry_id = %({leaf})s
        UNION ALL
        SELECT up.id, up.entry_id, up.parent_id, up.depth
        FROM {name} p CROSS JOIN LATERAL (
            SELECT e.id, e.entry_id, e.parent_id, e.depth FROM sessions_app_entry e
            WHERE e.session_id = %(s)s AND e.entry_id = p.parent_id AND e.depth < p.depth
            LIMIT 1
        ) up
    )"""


def ancestor_depth(session: Session, a: str, b: str) -> int:
    """The depth of the deepest entry on both paths (to `a` and to `b`), -1 when none. The
    walk returns ids only; the entries are read below the ancestor alone."""
    with connection.cursor() as cur:
        cur.execute(
            f"WITH RECURSIVE {_UP.format(name='path_a', leaf='a')}, "
            f"{_UP.format(name='path_b', leaf='b')} "
            "SELECT max(path_a.depth) FROM path_a JOIN path_b ON path_a.id = path_b.id",
            {"s": str(session.id), "a": a, "b": b},
        )
        row = cur.fetchone()
    return int(row[0]) if row and row[0] is not None else -1


def branch_comparison(
    session: Session, a: str, b: str, *, offset: int = 0, limit: int = DEFAULT_COMPARE_ROWS
) -> BranchComparison:
    """The comparison of the branches to entries `a` and `b` (both must exist), its rows from
    `offset` (counted from the divergence) on, at most `limit` of them."""
    top = max(ancestor_depth(session, a, b), 0)
    path_a = store.path_to_root(session.id, a, min_depth=top)
    path_b = store.path_to_root(session.id, b, min_depth=top)
    events_a = _branch_events(session, path_a, path_b)
    events_b = _branch_events(session, path_b, path_a)
    if _compacted(session, a, b):
        # A context starts at its path's latest compaction: read the two kept windows.
        contexts = (session_context(session, a), session_context(session, b))
        return compare_branches(
            path_a,
            path_b,
            events_a=events_a,
            events_b=events_b,
            offset=offset,
            limit=limit,
            contexts=contexts,
        )
    # Without a compaction each context is the whole path: read the shared part above the
    # ancestor once and let the fold build both contexts from it.
    above = path_a[0].parent_id if top and path_a else None
    prefix = store.path_to_root(session.id, above) if above else []
    return compare_branches(
        prefix + path_a,
        prefix + path_b,
        events_a=events_a,
        events_b=events_b,
        offset=offset,
        limit=limit,
    )


def _compacted(session: Session, *leaves: str) -> bool:
    """Whether a compaction lies on the path to any of `leaves` (each entry records its
    path's latest one on append)."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT 1 FROM sessions_app_entry WHERE session_id = %s AND entry_id = ANY(%s) "
            "AND path_compaction IS NOT NULL LIMIT 1",
            [str(session.id), list(leaves)],
        )
        return cur.fetchone() is not None


def _branch_events(
    session: Session, path: list[EntryRecord], other: list[EntryRecord]
) -> list[EventRecord]:
    """Every event of the turns that wrote the entries of `path` that `other` lacks."""
    shared = {entry.id for entry in other}
    turns = turns_of_entries(session, [e for e in path if e.id not in shared])
    return store.events_of_turns(session.id, turns) if turns else []
