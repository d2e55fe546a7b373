"""What a projector is given and must do: a session with events after its checkpoint, and the
`Projector` protocol the runner drives (`projectors.runner`)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from projections.records import EventRecord


@dataclass(frozen=True, slots=True)
class PendingSession:
    id: uuid.UUID
    owner_id: int
    last_seq: int
    checkpoint: int  # the last seq projected, -1 for none


class Deferred(Exception):
    """A projector's output cannot be written now (its collector is down, say): its batch
    rolls back, and the runner moves on to the next projector. A projector that defers
    says when it is `ready` again."""


class Projector(Protocol):
    """Writes what a batch adds to its output: for each session, `events` (in seq order,
    all after its checkpoint). On Django's connection, inside the caller's transaction."""

    name: str

    def apply(self, batch: Sequence[tuple[PendingSession, Sequence[EventRecord]]]) -> None: ...

    # Optionally, `ready() -> bool`: False while the projector waits to be tried again
    # (after a `Deferred`); the runner leaves it for that run.

    def forget(self, session_id: uuid.UUID | str) -> None:
        """Drop a deleted session's output."""
        ...
