"""The kept window of a leaf read from the entry table (`projections.kept_window`): a key
lookup per fact and one bounded walk of the path, with no ceiling (the doors' reads add
theirs, `selectors.context`)."""

from __future__ import annotations

import uuid
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
