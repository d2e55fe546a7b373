"""Workspace file contents, addressed by SHA-256 and kept per owner (DESIGN §11).

Invariants:

1. A blob's key is (owner, sha256) and its sha256 is the hash of its content: `blobs_put`
   computes it and refuses a blob whose bytes do not match its name.
2. Blobs are written before any `workspace/snapshot` that names them, idempotently: a
   blob already stored is kept as it is (`ON CONFLICT DO NOTHING`), so writing them again
   after a crash or a conflicting append costs nothing and changes nothing.
3. Blobs are never shared across owners: a fork for another user copies the blobs it needs
   under the new owner (`blobs_copy`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping

from django.db import connection

from sessions_app.models import Session, WorkspaceBlob
from sessions_app.store import StoreError

# Rows per INSERT: a bounded statement, however many files changed.
PUT_BATCH = 200


def blobs_put(*, owner_id: int, blobs: Mapping[str, bytes]) -> None:
    """Store `blobs` (sha256 → content) for `owner_id`; those already stored are kept."""
    rows = []
    for sha, content in blobs.items():
        if hashlib.sha256(content).hexdigest() != sha:
            raise StoreError(f"blob {sha[:12]}…: its content does not hash to its name")
        rows.append((owner_id, sha, len(content), content))
    for start in range(0, len(rows), PUT_BATCH):
        chunk = rows[start : start + PUT_BATCH]
        values = ", ".join(["(%s, %s, %s, %s, now())"] * len(chunk))
        flat = [value for row in chunk for value in row]
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {WorkspaceBlob._meta.db_table} "
                "(owner_id, sha256, size, content, created_at) "
                f"VALUES {values} ON CONFLICT (owner_id, sha256) DO NOTHING",
                flat,
            )


def blobs_get(*, owner_id: int, shas: Iterable[str]) -> dict[str, bytes]:
    """The contents of those of `shas` that `owner_id` holds."""
    wanted = sorted(set(shas))
    found: dict[str, bytes] = {}
    for start in range(0, len(wanted), PUT_BATCH):
        rows = WorkspaceBlob.objects.filter(
            owner_id=owner_id, sha256__in=wanted[start : start + PUT_BATCH]
        ).values_list("sha256", "content")
        found.update((sha, bytes(content)) for sha, content in rows)
    return found


def blobs_missing(*, owner_id: int, shas: Iterable[str]) -> set[str]:
    """Those of `shas` that `owner_id` does not hold (what `verify` reports)."""
    wanted = set(shas)
    held = set(
        WorkspaceBlob.objects.filter(owner_id=owner_id, sha256__in=wanted).values_list(
            "sha256", flat=True
        )
    )
    return wanted - held


def blobs_copy(*, from_owner_id: int, to_owner_id: int, shas: Iterable[str]) -> None:
    """Give `to_owner_id` their own copy of `from_owner_id`'s blobs `shas` (a fork)."""
    wanted = sorted(set(shas))
    if from_owner_id == to_owner_id or not wanted:
        return
    table = WorkspaceBlob._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (owner_id, sha256, size, content, created_at) "
            f"SELECT %s, sha256, size, content, now() FROM {table} "
            "WHERE owner_id = %s AND sha256 = ANY(%s) "
            "ON CONFLICT (owner_id, sha256) DO NOTHING",
            [to_owner_id, from_owner_id, wanted],
        )


def session_owner_id(session_id: str) -> int:
    owner = Session.objects.filter(pk=session_id).values_list("owner_id", flat=True).first()
    if owner is None:
        raise StoreError(f"no session {session_id}")
    return int(owner)
