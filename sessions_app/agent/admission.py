"""How many turns may be open at once: per user, across processes, and per process.

A turn takes a place when it starts (a message, a follow-up with no turn running, a
retry, a replay) and keeps it until its run ends, its follow-ups and its waits for
approvals included; beyond the caps the start is refused with `TurnsCapped`, a 429 with
`Retry-After` at every door, before anything is written.

- Per user (`STRAND_MAX_TURNS_PER_USER`, the session owner's): a user has that many
  places, place n being an advisory lock of its own (`turn_place_key`) taken on the
  process's lock connection (`agent.lock.ProcessLocks`) beside the session's turn lock.
  Taking the first free place is exact across processes with no counter to keep right:
  two processes cannot both hold place n, and a dead process's places go with its
  connection, as its turn locks do.
- Per process (`STRAND_MAX_TURNS_PER_PROCESS`): a counter in memory, since the process's
  turns live in its memory (tasks on its agent loop).

A cap of 0 turns that cap off.
"""

from __future__ import annotations

import hashlib
import struct
import threading
from typing import Protocol

from django.conf import settings

from runtime import NotFound
from sessions_app.agent.lock import LockHolder
from sessions_app.limits import RateLimited, duration_words
from sessions_app.models import Session
from sessions_app.selectors import turns as turn_reads
from sessions_app.turn_lock import job_lock_key

DEFAULT_PER_USER = 8
DEFAULT_PER_PROCESS = 64
# What a refused start is told to wait: a turn that waits for an approval may take much
# longer to end, but most end within seconds.
RETRY_AFTER_S = 10


class TurnsCapped(RateLimited):
    """Too many turns open at once, for the user (`scope` "turns") or for this server
    process (`scope` "server_turns")."""

    def __init__(self, scope: str, limit: int) -> None:
        who = "per user" if scope == "turns" else "on this server process"
        Exception.__init__(
            self,
            f"too many turns at once: at most {limit} running or waiting for an approval "
            f"{who}; let one end (or cancel one) and try again in {RETRY_AFTER_S} s",
        )
        self.scope = scope
        self.limit = limit
        self.window = RETRY_AFTER_S
        self.retry_after = RETRY_AFTER_S

    def readable(self) -> str:
        who = "of yours" if self.scope == "turns" else "on this server"
        return (
            f"Too many turns at once: at most {self.limit} {who} may run or wait for an "
            "approval. Let one end, or cancel one, and try again in "
            f"{duration_words(self.retry_after)}."
        )


def per_user() -> int:
    return max(int(getattr(settings, "STRAND_MAX_TURNS_PER_USER", DEFAULT_PER_USER)), 0)


def per_process() -> int:
    return max(int(getattr(settings, "STRAND_MAX_TURNS_PER_PROCESS", DEFAULT_PER_PROCESS)), 0)


def turn_place_key(user_id: int, place: int) -> int:
    """The advisory lock key of a user's turn place `place` (apart from session keys)."""
    digest = hashlib.blake2b(f"strand-turn-place:{user_id}:{place}".encode(), digest_size=8)
    return int(struct.unpack(">q", digest.digest())[0])


def check_room(session_id: str, process_turns: ProcessTurns | None) -> None:
    """`TurnsCapped` now when the session's owner (or this process) has no room for one
    more turn: a read that takes nothing, for a door that writes something before its turn
    starts (an edit-and-resend moves the leaf first). The start itself still decides."""
    limit = per_process()
    if process_turns is not None and limit and process_turns.open >= limit:
        raise TurnsCapped("server_turns", limit)
    limit = per_user()
    if not limit:
        return
    owner_id = Session.objects.filter(id=session_id).values_list("owner_id", flat=True).first()
    if owner_id is None:
        return
    keys = [turn_place_key(owner_id, place) for place in range(limit)]
    if turn_reads.advisory_locks_held(keys) >= limit:
        raise TurnsCapped("turns", limit)


class ProcessTurns:
    """The number of turns this process has open, under a thread lock."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self.open = 0

    def enter(self, limit: int) -> None:
        with self._mutex:
            if limit and self.open >= limit:
                raise TurnsCapped("server_turns", limit)
            self.open += 1

    def leave(self) -> None:
        with self._mutex:
            self.open = max(self.open - 1, 0)


class PlaceHolder(LockHolder, Protocol):
    """What a turn's place needs of the engine: the lock holder's parts and the process's
    count of open turns."""

    turns: ProcessTurns


class TurnPlace:
    """A turn's place, held until the run ends (`runtime.ports.TurnLock`)."""

    def __init__(self, engine: PlaceHolder, key: int | None) -> None:
        self._engine = engine
        self._key = key
        self._released = False

    @classmethod
    def take(cls, engine: PlaceHolder, session_id: str) -> TurnPlace:
        """A place for one more turn of the session's owner, or `TurnsCapped`."""
        engine.turns.enter(per_process())
        try:
            owner = Session.objects.filter(id=session_id).values_list("owner_id", flat=True)
            owner_id = owner.first()
            if owner_id is None:
                raise NotFound(f"no session {session_id}")
            limit = per_user()
            if not limit:
                return cls(engine, None)
            for place in range(limit):
                key = turn_place_key(owner_id, place)
                if engine.locks.try_take(key):
                    return cls(engine, key)
            raise TurnsCapped("turns", limit)
        except BaseException:
            engine.turns.leave()
            raise

    def _release(self) -> None:
        if self._released:
            return
        self._released = True
        try:
            if self._key is not None:
                self._engine.locks.release(self._key)
        finally:
            self._engine.turns.leave()

    async def release(self) -> None:
        await self._engine.db(self._release)


# --- background jobs ---------------------------------------------------------------------
# A job holds its own lock (its liveness, which recovery tests) and one of its owner's job
# places while it runs, both on the process's lock connection, as a turn holds its place.

DEFAULT_JOBS_PER_USER = 8


class JobsCapped(RateLimited):
    """The session's owner runs as many background jobs as allowed (`scope` "jobs")."""

    def __init__(self, limit: int) -> None:
        Exception.__init__(
            self,
            f"too many background jobs at once: at most {limit} per user run at a time; "
            "wait for one to end or kill one (job_kill)",
        )
        self.scope = "jobs"
        self.limit = limit
        self.window = RETRY_AFTER_S
        self.retry_after = RETRY_AFTER_S


def jobs_per_user() -> int:
    return max(int(getattr(settings, "STRAND_MAX_JOBS_PER_USER", DEFAULT_JOBS_PER_USER)), 0)


def job_place_key(user_id: int, place: int) -> int:
    """The advisory lock key of a user's job place `place`."""
    digest = hashlib.blake2b(f"strand-job-place:{user_id}:{place}".encode(), digest_size=8)
    return int(struct.unpack(">q", digest.digest())[0])


class JobPlace:
    """A running job's lock and its owner's job place, released together when it ends
    (`runtime.ports.TurnLock`)."""

    def __init__(self, engine: LockHolder, keys: list[int]) -> None:
        self._engine = engine
        self._keys = keys

    @classmethod
    def take(cls, engine: LockHolder, session_id: str, job_id: str) -> JobPlace:
        owner_id = Session.objects.filter(id=session_id).values_list("owner_id", flat=True).first()
        if owner_id is None:
            raise NotFound(f"no session {session_id}")
        own = job_lock_key(session_id, job_id)
        if not engine.locks.try_take(own):
            raise NotFound(f"job {job_id} is already running")
        limit = jobs_per_user()
        if not limit:
            return cls(engine, [own])
        for place in range(limit):
            key = job_place_key(owner_id, place)
            if engine.locks.try_take(key):
                return cls(engine, [own, key])
        engine.locks.release(own)
        raise JobsCapped(limit)

    def _release(self) -> None:
        keys, self._keys = self._keys, []
        for key in keys:
            self._engine.locks.release(key)

    async def release(self) -> None:
        await self._engine.db(self._release)
