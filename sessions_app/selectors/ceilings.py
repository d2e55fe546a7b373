"""Ceilings on the reads that are not windows: a model context (which a model sees whole)
and the chat's whole path (`?all=1`). (The tree needs none in bytes: it holds a line of each
entry, cut as it is read; `?tree=1` is read a window at a time, `selectors.tree`.)

Each such read first asks here, in SQL, whether what it would gather passes
`STRAND_WHOLE_READ_BYTES` of stored data (as JSON text, as the pages' byte budgets count it):
the sizes are summed in the database, in order, and the sum stops at the first row that
passes the budget, so the question costs at most the budget's worth of rows and Python
holds none of them. A read past its ceiling is refused (`ReadTooLarge`: 413 from the API, a
page that says so) or shown a window at a time, never built whole and then measured.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import connection

from sessions_app.errors import DomainError
from sessions_app.store.windows import path_bytes


class ReadTooLarge(DomainError):
    """A read that would gather more than `STRAND_WHOLE_READ_BYTES`; the message says what
    to read instead."""

    code = "too_large"


def whole_read_bytes() -> int:
    return int(settings.STRAND_WHOLE_READ_BYTES)


def megabytes(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MB" if size >= 1024 * 1024 else f"{size} bytes"


def path_over(session_id: uuid.UUID | str, leaf_id: str, *, min_depth: int, max_bytes: int) -> bool:
    """Whether the entries of the path from `leaf_id` up to depth `min_depth` hold more than
    `max_bytes` of data as JSON text (`store.windows.path_bytes`, which stops at the entry
    that passes)."""
    total = path_bytes(session_id, leaf_id, min_depth=min_depth, cap=max_bytes, measure="text")
    return total > max_bytes


def entries_over(session_id: uuid.UUID | str, *, as_of_seq: int, max_bytes: int) -> bool:
    """Whether the session's entries up to `as_of_seq` hold more than `max_bytes` of data:
    a running sum in seq order, read up to the first entry that passes."""
    with connection.cursor() as cur:
        cur.execute(
            """
            SELECT 1 FROM (
                SELECT sum(octet_length(data::text)) OVER (ORDER BY seq) AS running
                FROM sessions_app_entry
                WHERE session_id = %s AND seq >= 0 AND seq <= %s
                ORDER BY seq
            ) sizes
            WHERE running > %s
            LIMIT 1
            """,
            [str(session_id), as_of_seq, max_bytes],
        )
        return cur.fetchone() is not None


def context_too_large(session_id: uuid.UUID | str, leaf_id: str) -> ReadTooLarge:
    budget = whole_read_bytes()
    return ReadTooLarge(
        f"the model context of {leaf_id!r} holds more than {megabytes(budget)} of stored data, "
        "more than one answer gathers (STRAND_WHOLE_READ_BYTES); read its path a window at a "
        f"time instead: GET /api/sessions/{session_id}/views/chat?leaf={leaf_id} and its "
        "older_cursor, or the entries with GET …/entries and next_after_seq"
    )
