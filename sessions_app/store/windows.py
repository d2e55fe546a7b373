"""The kept window of a leaf read from the entry table (`projections.kept_window`): a key
lookup per fact and one bounded walk of the path, with no ceiling (the doors' reads add
theirs, `selectors.context`)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from django.db import connection

from projections.kept_window import LeafFacts
from projections.records import EntryRecord
from sessions_app import store


class StoredEntries:
    def __init__(self, session_id: uuid.UUID | str) -> None:
        self.session_id = session_id

    def facts(self, entry_id: str) -> LeafFacts | None:
        return _facts(
            "SELECT entry_id, path_compaction, path_thinking, path_model "
            "FROM sessions_app_entry WHERE session_id = %s AND entry_id = %s",
            [str(self.session_id), entry_id],
        )

    def entries(self, ids: list[str]) -> list[EntryRecord]:
        return store.entries_by_id(self.session_id, ids)

    def depth(self, entry_id: str) -> int | None:
        return store.depth_of(self.session_id, entry_id)

    def path(self, leaf_id: str, min_depth: int) -> list[EntryRecord]:
        return store.path_to_root(self.session_id, leaf_id, min_depth=min_depth)


def entry_facts(keys: Iterable[tuple[uuid.UUID | str, str]]) -> dict[tuple[str, str], LeafFacts]:
    """The path facts of each (session, entry id) of `keys` that exists: one query, by the
    key (the leaves of all the requests a projector's batch exports)."""
    pairs = [(str(sid), entry_id) for sid, entry_id in keys]
    with connection.cursor() as cur:
        cur.execute(
            "SELECT e.session_id, e.entry_id, e.path_compaction, e.path_thinking, e.path_model "
            "FROM unnest(%s::uuid[], %s::text[]) AS r(session_id, entry_id) "
            "JOIN sessions_app_entry e "
            "ON e.session_id = r.session_id AND e.entry_id = r.entry_id",
            [[p[0] for p in pairs], [p[1] for p in pairs]],
        )
        return {(str(row[0]), row[1]): LeafFacts(*row[1:]) for row in cur.fetchall()}


def last_entry_facts(session_id: uuid.UUID | str) -> LeafFacts | None:
    return _facts(
        "SELECT entry_id, path_compaction, path_thinking, path_model FROM sessions_app_entry "
        "WHERE session_id = %s ORDER BY seq DESC LIMIT 1",
        [str(session_id)],
    )


def _facts(sql: str, params: list[Any]) -> LeafFacts | None:
    with connection.cursor() as cur:
        cur.execute(sql, params)
        row = cur.fetchone()
    return LeafFacts(*row) if row else None


# How a path's bytes are counted: its data as JSON text (what an answer holding it would
# hold), or as stored (`pg_column_size`: what the rows hold, no value read or decoded).
_SIZES = {"text": "octet_length(e.data::text)", "stored": "pg_column_size(e.data)"}


def path_bytes(
    session_id: uuid.UUID | str, leaf_id: str, *, min_depth: int, cap: int, measure: str
) -> int:
    """The bytes of the entries' data on the path from `leaf_id` up to depth `min_depth`,
    counted as `measure` says (`_SIZES`). The walk stops at the entry that passes `cap`,
    so the sum it returns is then past `cap` too (and costs at most that many bytes' worth
    of rows); each step goes to a shallower entry, so no malformed parent link makes it
    loop, and each is one key lookup, for the reason `store.PATH_CTE` gives. 0 for a leaf
    the session lacks."""
    size = _SIZES[measure]
    with connection.cursor() as cur:
        cur.execute(
            f"""
            WITH RECURSIVE walk AS (
                SELECT e.parent_id, e.depth, ({size})::bigint AS total
                FROM sessions_app_entry e
                WHERE e.session_id = %(s)s AND e.entry_id = %(leaf)s
                UNION ALL
                SELECT up.parent_id, up.depth, walk.total + up.size
                FROM walk CROSS JOIN LATERAL (
                    SELECT e.parent_id, e.depth, {size} AS size
                    FROM sessions_app_entry e
                    WHERE e.session_id = %(s)s AND e.entry_id = walk.parent_id
                      AND e.depth < walk.depth AND e.depth >= %(min_depth)s
                    LIMIT 1
                ) up
                WHERE walk.total <= %(max)s
            )
            SELECT max(total) FROM walk
            """,
            {"s": str(session_id), "leaf": leaf_id, "min_depth": min_depth, "max": cap},
        )
        row = cur.fetchone()
    return int(row[0]) if row and row[0] is not None else 0
