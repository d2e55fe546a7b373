"""Plain records that projections fold over.

The store hands these in; projections never touch the database. Both are frozen so that a
projection cannot change the facts it reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True, slots=True)
class EntryRecord:
    """One node of the conversation tree, as Pi writes it.

    `data` is the whole entry exactly as it appears in a Pi v3 file (it includes `type`,
    `id`, `parentId` and `timestamp`). `seq` is the seq of the event that added the entry,
    so sorting by it gives Pi's file order.
    """

    id: str
    parent_id: str | None
    type: str
    timestamp: str
    data: Mapping[str, Any]
    seq: int


@dataclass(frozen=True, slots=True)
class EventRecord:
    """One event of a session's log, already upcast to its current schema version."""

    seq: int
    type: str
    version: int
    time: datetime
    data: Mapping[str, Any]
    entry_id: str | None = None
    turn: int | None = None
    step: int | None = None
