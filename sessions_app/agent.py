"""The agent runtime wired to Django and Postgres: what views, the API, consumers and commands
call to run agents (DESIGN §7).

Services (each but `agent_run_foreground` also as an `a`-prefixed coroutine, for async
callers; `session_id` may be a UUID, its string or a `Session`):

    agent_send_message(session_id, text, *, mode="message", auto_approve=False) -> Sent
        mode "message" starts a turn (refused with `TurnRunning` while one runs); "steer"
        queues input for the running turn's next step, "follow_up" for the turn after it
        (with no turn running, both simply start one). `Sent.turn` / `Sent.inbox_id`.
    agent_retry(session_id, entry_id=None) -> Sent
        a new turn from where a failed reply (stopReason "error") was asked
    agent_cancel(session_id) -> bool
    agent_decide_approval(session_id, approval_id, *, outcome, by=None)
    agent_pending_approvals(session_id) -> list[PendingApproval]      (a read: never writes)
    agent_compact(session_id, *, instructions=None) -> Compacted
    agent_navigate(session_id, entry_id, *, summarize=False, instructions=None) -> Navigated
    agent_recover(session_ids=None) -> list[Recovery]
    agent_turn_status(session_id) -> "idle" | "running" | "interrupted"  (a read)
    agent_wait(session_id, timeout=None) -> list[TurnEnded] | None
    agent_run_foreground(session_id, text, ...) -> list[TurnEnded]   (the `send` command)

Process plumbing: `agent_startup()` (recover every session a dead process left open; a
server calls it once), `agent_stop_local_runs()`, `agent_shutdown()`.

Runs read the session from their own database connections: call these services with the
session committed (not inside an open `transaction.atomic()` that created it).

How it runs. Turns run as asyncio tasks on the process's agent loop, a thread started on
first use, so that a turn outlives the request that started it whether the caller is an
async consumer, a sync view or a command. Database work runs on a small pool of threads
with their own Django connections. Nothing durable stays in memory: every fact is appended
through `store.append_events`, and a restarted process rebuilds all it needs from the log.

The turn lock is a Postgres session-level advisory lock (`pg_try_advisory_lock`, key derived
from the session UUID), taken on a dedicated connection of the process that runs the turn
and held for the turn's whole life: it dies with the process. A second sender, here or in
another process, that cannot take it is refused (or, for steer/follow-up, queues its input).
Crash recovery closes an open turn only when it can take that lock; `send`, `compact` and
`navigate` run it first, and `agent_recover` / `manage.py recover` run it on demand. Reading
never writes.

Cross-process control. Each process keeps one connection LISTENing on `strand_events`
(payload "<session id>:<last seq>", sent by the store at commit): a run waiting for an
approval decision wakes up and reads the log. Cancellation is a NOTIFY on `strand_control`
with payload "<session id>:cancel"; the process running the turn cancels it.

Streaming deltas are not persisted. They go to the Channels layer, group
`session.<session id>`, as:

    {"type": "session.delta", "session_id": str, "turn": int, "step": int,
     "kind": "text" | "thinking" | "tool_call", "block": str, "text": str,
     "name": str | None}

`block` names the content block within the reply (a reply can have several text, thinking
and tool-call blocks); `text` is the piece that arrived (for a tool call, a piece of its
raw JSON arguments); `name` is the tool's name on the first delta of a tool call. A
consumer forwards them while a step streams; the committed `assistant/message` event then
replaces them.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import struct
import threading
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, TypeVar

import psycopg
from django.db import DatabaseError, connection, connections

from projections.records import EntryRecord, EventRecord
from runtime import (
    AgentError,
    ApprovalNotPending,
    Compacted,
    Delta,
    Navigated,
    NotFound,
    NothingToCompact,
    Notice,
    PendingApproval,
    Recovery,
    Runtime,
    Sent,
    SessionBusy,
    TurnEnded,
    TurnRunning,
)
from runtime.ports import Appended, NewFact, SeqConflict, SessionHead, SessionSetup
from sessions_app import events as vocab
from sessions_app import presets, store, workspaces
from sessions_app.models import Session

log = logging.getLogger("strand.agent")

T = TypeVar("T")

CONTROL_CHANNEL = "strand_control"
EVENTS_CHANNEL = store.NOTIFY_CHANNEL
DB_THREADS = 4

__all__ = [
    "AgentError",
    "ApprovalNotPending",
    "Compacted",
    "Navigated",
    "NotFound",
    "NothingToCompact",
    "PendingApproval",
    "Recovery",
    "SessionBusy",
    "Sent",
    "TurnEnded",
    "TurnRunning",
    "aagent_cancel",
    "aagent_compact",
    "aagent_decide_approval",
    "aagent_navigate",
    "aagent_pending_approvals",
    "aagent_recover",
    "aagent_retry",
    "aagent_send_message",
    "aagent_turn_status",
    "aagent_wait",
    "agent_cancel",
    "agent_compact",
    "agent_decide_approval",
    "agent_navigate",
    "agent_pending_approvals",
    "agent_recover",
    "agent_run_foreground",
    "agent_retry",
    "agent_send_message",
    "agent_shutdown",
    "agent_startup",
    "agent_stop_local_runs",
    "agent_turn_status",
    "agent_wait",
    "turn_lock_key",
]


# --- the turn lock -----------------------------------------------------------------------


def turn_lock_key(session_id: uuid.UUID | str) -> int:
    """The advisory lock key of a session: 64 bits of a hash of its UUID, signed."""
    digest = hashlib.blake2b(b"strand-turn:" + uuid.UUID(str(session_id)).bytes, digest_size=8)
    return int(struct.unpack(">q", digest.digest())[0])


def _conninfo() -> dict[str, Any]:
    """Connection parameters for our own psycopg connections (lock, listener)."""
    settings = connections["default"].settings_dict
    info = {
        "dbname": settings.get("NAME"),
        "user": settings.get("USER"),
        "password": settings.get("PASSWORD"),
        "host": settings.get("HOST"),
        "port": settings.get("PORT"),
    }
    return {key: value for key, value in info.items() if value}


class PgTurnLock:
    """The advisory lock, held on a connection of its own until released or until this
    process dies (Postgres then drops it with the connection)."""

    def __init__(self, engine: _Engine, conn: psycopg.Connection[Any], key: int) -> None:
        self._engine = engine
        self._conn = conn
        self._key = key

    @classmethod
    def try_take(cls, engine: _Engine, session_id: str) -> PgTurnLock | None:
        key = turn_lock_key(session_id)
        conn = psycopg.connect(**_conninfo(), autocommit=True)
        try:
            row = conn.execute("SELECT pg_try_advisory_lock(%s)", [key]).fetchone()
        except BaseException:
            conn.close()
            raise
        if not row or not row[0]:
            conn.close()
            return None
        return cls(engine, conn, key)

    async def release(self) -> None:
        await self._engine.db(self._release)

    def _release(self) -> None:
        try:
            if not self._conn.closed:
                self._conn.execute("SELECT pg_advisory_unlock(%s)", [self._key])
        finally:
            self._conn.close()


def _lock_held(session_id: str) -> bool:
    """Whether any connection holds the session's turn lock (a read: takes nothing)."""
    key = turn_lock_key(session_id)
    unsigned = key & 0xFFFFFFFFFFFFFFFF
    with connection.cursor() as cur:
        cur.execute(
            "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted "
            "AND classid = %s AND objid = %s AND objsubid = 1 "
            "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            [unsigned >> 32, unsigned & 0xFFFFFFFF],
        )
        return cur.fetchone() is not None


# --- the store, as the runtime sees it ---------------------------------------------------

_EVENT_COLUMNS = "seq, type, schema_version, time, data, entry_id, turn, step, ignorable"


def _records(rows: Sequence[tuple[Any, ...]]) -> list[EventRecord]:
    records = []
    for seq, type_, version, time, data, entry_id, turn, step, ignorable in rows:
        loaded = vocab.load_event(type_, version, store.decode_json(data), ignorable=ignorable)
        if loaded is not None:
            records.append(EventRecord(seq, type_, version, time, loaded, entry_id, turn, step))
    return records


def _last_event(
    session_id: str, types: Sequence[str], before_seq: int | None
) -> EventRecord | None:
    sql = (
        f"SELECT {_EVENT_COLUMNS} FROM sessions_app_event WHERE session_id = %s AND type = ANY(%s)"
    )
    params: list[Any] = [session_id, list(types)]
    if before_seq is not None:
        sql += " AND seq < %s"
        params.append(before_seq)
    with connection.cursor() as cur:
        cur.execute(sql + " ORDER BY seq DESC LIMIT 1", params)
        records = _records(cur.fetchall())
    return records[0] if records else None


def _events_of_types(session_id: str, types: Sequence[str], after_seq: int) -> list[EventRecord]:
    with connection.cursor() as cur:
        cur.execute(
            f"SELECT {_EVENT_COLUMNS} FROM sessions_app_event "
            "WHERE session_id = %s AND type = ANY(%s) AND seq > %s ORDER BY seq",
            [session_id, list(types), after_seq],
        )
        return _records(cur.fetchall())


def _head(session_id: str) -> SessionHead:
    row = Session.objects.filter(id=session_id).values_list("last_seq", "leaf_entry_id").first()
    if row is None:
        raise NotFound(f"no session {session_id}")
    return SessionHead(int(row[0]), row[1])


def _setup(session_id: str) -> SessionSetup:
    """What the session's next turn (or compaction, or summary) runs with, checked now: the
    server's preset of the name the session recorded, and its working directory if that
    still lies in its owner's folders. Otherwise the work is refused with the reason
    (`PresetUnavailable`, `WorkspaceNotAllowed`) before anything is written."""
    session = (
        Session.objects.filter(id=session_id)
        .select_related("owner")
        .only("preset", "cwd", "owner")
        .first()
    )
    if session is None:
        raise NotFound(f"no session {session_id}")
    preset = presets.preset_for_turn(session.preset)
    return SessionSetup(preset, workspaces.cwd_for_turn(session.owner, session.cwd))


def _append(session_id: str, expected_seq: int, facts: Sequence[NewFact]) -> Appended:
    events = [store.NewEvent(f.type, dict(f.data), turn=f.turn, step=f.step) for f in facts]
    try:
        result = store.append_events(session_id, expected_seq, events)
    except store.ConcurrencyError as exc:
        raise SeqConflict(exc.current_seq) from None
    return Appended(result.first_seq, result.last_seq, result.entry_ids)


def _entry(session_id: str, entry_id: str) -> EntryRecord | None:
    found = store.entries_by_id(session_id, [entry_id])
    return found[0] if found else None


def _context_window(session_id: str, leaf_id: str) -> list[EntryRecord]:
    """The kept window of the leaf's path (see `SessionLog.context_window`): entries record
    their path's latest compaction, so the older part of a long path is never read."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT path_compaction FROM sessions_app_entry WHERE session_id = %s AND entry_id = %s",
            [session_id, leaf_id],
        )
        row = cur.fetchone()
    if row is None:
        return []
    min_depth = 0
    if row[0] is not None:
        compaction = _entry(session_id, row[0])
        depth = store.depth_of(session_id, row[0]) or 0
        first_kept = compaction.data.get("firstKeptEntryId") if compaction else None
        kept_depth = store.depth_of(session_id, first_kept) if isinstance(first_kept, str) else None
        min_depth = kept_depth if kept_depth is not None and kept_depth <= depth else depth
    return store.path_to_root(session_id, leaf_id, min_depth=min_depth)


class PostgresLog:
    """`runtime.ports.SessionLog` over `sessions_app.store`, run on the engine's DB threads."""

    def __init__(self, engine: _Engine) -> None:
        self._engine = engine

    async def append(
        self, session_id: str, expected_seq: int, facts: Sequence[NewFact]
    ) -> Appended:
        result = await self._engine.db(_append, session_id, expected_seq, facts)
        self._engine.poke(session_id, result.last_seq)
        return result

    async def head(self, session_id: str) -> SessionHead:
        return await self._engine.db(_head, session_id)

    async def setup(self, session_id: str) -> SessionSetup:
        return await self._engine.db(_setup, session_id)

    async def events_after(
        self, session_id: str, after_seq: int, limit: int = 1000
    ) -> list[EventRecord]:
        return await self._engine.db(store.events_after, session_id, after_seq, limit)

    async def last_event(
        self, session_id: str, types: Sequence[str], before_seq: int | None = None
    ) -> EventRecord | None:
        return await self._engine.db(_last_event, session_id, types, before_seq)

    async def events_of_types(
        self, session_id: str, types: Sequence[str], after_seq: int = -1
    ) -> list[EventRecord]:
        return await self._engine.db(_events_of_types, session_id, types, after_seq)

    async def path(self, session_id: str, leaf_id: str) -> list[EntryRecord]:
        return await self._engine.db(store.path_to_root, session_id, leaf_id)

    async def context_window(self, session_id: str, leaf_id: str) -> list[EntryRecord]:
        return await self._engine.db(_context_window, session_id, leaf_id)

    async def entry(self, session_id: str, entry_id: str) -> EntryRecord | None:
        return await self._engine.db(_entry, session_id, entry_id)

    async def try_lock(self, session_id: str) -> PgTurnLock | None:
        return await self._engine.db(PgTurnLock.try_take, self._engine, session_id)

    async def wait_for_events(self, session_id: str, after_seq: int, timeout: float) -> None:
        await self._engine.wait_for_events(session_id, after_seq, timeout)


# --- the engine: this process's agent loop -----------------------------------------------


class _Engine:
    """The agent loop thread, its database threads, the LISTEN connection and the runtime."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.pool = ThreadPoolExecutor(DB_THREADS, thread_name_prefix="strand-db")
        self.runtime = Runtime(PostgresLog(self))
        self.latest: dict[str, int] = {}  # session → newest seq we heard of
        self.waiters: dict[str, set[asyncio.Event]] = {}
        self.listening = threading.Event()
        self._listener: asyncio.Task[None] | None = None
        self.thread = threading.Thread(target=self._main, name="strand-agent", daemon=True)
        self.thread.start()
        self.call(self._start())

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    async def _start(self) -> None:
        self._listener = self.loop.create_task(self._listen())

    # calling in

    def call(self, work: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run `work` on the agent loop and wait for its result (from any other thread)."""
        if threading.current_thread() is self.thread:
            raise RuntimeError("agent services cannot be called from the agent loop itself")
        return asyncio.run_coroutine_threadsafe(work, self.loop).result(timeout)

    async def acall(self, work: Coroutine[Any, Any, T]) -> T:
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(work, self.loop))

    async def db(self, fn: Callable[..., T], *args: Any) -> T:
        return await self.loop.run_in_executor(self.pool, partial(_with_connection, fn, *args))

    # waking runs

    def poke(self, session_id: str, seq: int) -> None:
        """Note that events up to `seq` exist (from a NOTIFY, or our own append)."""
        if seq > self.latest.get(session_id, -1):
            self.latest[session_id] = seq
        for waiter in self.waiters.get(session_id, ()):
            waiter.set()

    async def wait_for_events(self, session_id: str, after_seq: int, timeout: float) -> None:
        if self.latest.get(session_id, -1) > after_seq:
            return
        waiter = asyncio.Event()
        self.waiters.setdefault(session_id, set()).add(waiter)
        try:
            await asyncio.wait_for(waiter.wait(), timeout)
        except TimeoutError:
            pass
        finally:
            self.waiters.get(session_id, set()).discard(waiter)

    async def _listen(self) -> None:
        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(**_conninfo(), autocommit=True)
            except (psycopg.Error, OSError):
                log.warning("agent listener: cannot connect to Postgres; retrying")
                await asyncio.sleep(1.0)
                continue
            try:
                await conn.execute(f"LISTEN {EVENTS_CHANNEL}")
                await conn.execute(f"LISTEN {CONTROL_CHANNEL}")
                self.listening.set()
                async for note in conn.notifies():
                    self._on_notify(note.channel, note.payload)
            except asyncio.CancelledError:
                raise
            except (psycopg.Error, OSError):
                log.warning("agent listener: connection lost; reconnecting")
                await asyncio.sleep(0.5)
            finally:
                self.listening.clear()
                await conn.close()

    def _on_notify(self, channel: str, payload: str) -> None:
        session_id, _, rest = payload.partition(":")
        if channel == CONTROL_CHANNEL:
            if rest == "cancel":
                self.runtime.cancel_local(session_id)
            return
        with contextlib.suppress(ValueError):
            self.poke(session_id, int(rest))

    # stopping

    def shutdown(self, timeout: float = 10.0) -> None:
        async def stop() -> None:
            await self.runtime.stop_all(timeout)
            if self._listener is not None:
                self._listener.cancel()
                await asyncio.gather(self._listener, return_exceptions=True)

        try:
            self.call(stop(), timeout + 5)
        finally:
            self._close_db_threads()
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(5)
            self.pool.shutdown(wait=True)

    def _close_db_threads(self) -> None:
        # One job per thread (the barrier keeps each on its own thread) closes its
        # Django connections, so that no connection outlives the engine.
        barrier = threading.Barrier(DB_THREADS, timeout=5)

        def close() -> None:
            with contextlib.suppress(threading.BrokenBarrierError):
                barrier.wait()
            connections.close_all()

        for future in [self.pool.submit(close) for _ in range(DB_THREADS)]:
            future.result(10)


def _with_connection(fn: Callable[..., T], *args: Any) -> T:
    """Run `fn` on a DB thread, dropping a connection that an earlier error broke."""
    if connection.connection is not None and connection.errors_occurred:
        if not connection.is_usable():
            connection.close()
        connection.errors_occurred = False
    return fn(*args)


_engine_lock = threading.Lock()
_engine_instance: _Engine | None = None


def _engine() -> _Engine:
    global _engine_instance
    with _engine_lock:
        if _engine_instance is None:
            _engine_instance = _Engine()
        return _engine_instance


def _engine_if_started() -> _Engine | None:
    return _engine_instance


# --- deltas to live viewers --------------------------------------------------------------


def _host_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop of the server process calling us, if any: in-memory channel layers
    must be used from the loop their consumers run on."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        pass
    from asgiref.sync import SyncToAsync

    local = SyncToAsync.threadlocal
    if getattr(local, "main_event_loop_pid", None) == os.getpid():
        loop = getattr(local, "main_event_loop", None)
        if isinstance(loop, asyncio.AbstractEventLoop) and loop.is_running():
            return loop
    return None


def delta_message(delta: Delta) -> dict[str, Any]:
    return {
        "type": "session.delta",
        "session_id": delta.session_id,
        "turn": delta.turn,
        "step": delta.step,
        "kind": delta.kind,
        "block": delta.block,
        "text": delta.text,
        "name": delta.name,
    }


def _delta_publisher(
    host: asyncio.AbstractEventLoop | None, also: Callable[[Delta], None] | None
) -> Callable[[Delta], None]:
    from channels.layers import get_channel_layer

    layer = get_channel_layer()

    def publish(delta: Delta) -> None:
        if also is not None:
            also(delta)
        if layer is None:
            return
        message = delta_message(delta)
        target = host if host is not None and host.is_running() else None
        group = f"session.{delta.session_id}"
        if target is None:
            asyncio.ensure_future(_send_quietly(layer.group_send(group, message)))
        else:
            asyncio.run_coroutine_threadsafe(
                _send_quietly(layer.group_send(group, message)), target
            )

    return publish


async def _send_quietly(send: Awaitable[Any]) -> None:
    try:
        await send
    except Exception:
        log.debug("a delta could not be published", exc_info=True)


# --- services ----------------------------------------------------------------------------


def _sid(session_id: uuid.UUID | str | Session) -> str:
    if isinstance(session_id, Session):
        return str(session_id.id)
    return str(uuid.UUID(str(session_id)))


def _sync(work: Callable[[_Engine], Coroutine[Any, Any, T]]) -> T:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        engine = _engine()
        return engine.call(work(engine))
    raise RuntimeError("this agent service is synchronous; from async code use its a-prefixed twin")


async def _async(work: Callable[[_Engine], Coroutine[Any, Any, T]]) -> T:
    engine = await asyncio.to_thread(_engine)
    return await engine.acall(work(engine))


def agent_send_message(
    session_id: uuid.UUID | str | Session,
    text: str,
    *,
    mode: str = "message",
    auto_approve: bool = False,
) -> Sent:
    """Start a turn, or queue steering / follow-up input for the running one."""
    sid, host = _sid(session_id), _host_loop()
    return _sync(lambda e: _send(e, sid, text, mode, auto_approve, host, None, None))


async def aagent_send_message(
    session_id: uuid.UUID | str | Session,
    text: str,
    *,
    mode: str = "message",
    auto_approve: bool = False,
) -> Sent:
    sid, host = _sid(session_id), _host_loop()
    return await _async(lambda e: _send(e, sid, text, mode, auto_approve, host, None, None))


def agent_retry(
    session_id: uuid.UUID | str | Session,
    entry_id: str | None = None,
    *,
    auto_approve: bool = False,
) -> Sent:
    """Start a turn that asks again from where the failed reply `entry_id` (by default
    the current leaf) was asked; refused while a turn runs, or for a reply that did not
    fail."""
    sid, host = _sid(session_id), _host_loop()
    return _sync(lambda e: _retry(e, sid, entry_id, auto_approve, host))


async def aagent_retry(
    session_id: uuid.UUID | str | Session,
    entry_id: str | None = None,
    *,
    auto_approve: bool = False,
) -> Sent:
    sid, host = _sid(session_id), _host_loop()
    return await _async(lambda e: _retry(e, sid, entry_id, auto_approve, host))


async def _retry(
    engine: _Engine,
    sid: str,
    entry_id: str | None,
    auto_approve: bool,
    host: asyncio.AbstractEventLoop | None,
) -> Sent:
    return await engine.runtime.retry(
        sid, entry_id, auto_approve=auto_approve, on_delta=_delta_publisher(host, None)
    )


async def _send(
    engine: _Engine,
    sid: str,
    text: str,
    mode: str,
    auto_approve: bool,
    host: asyncio.AbstractEventLoop | None,
    on_delta: Callable[[Delta], None] | None,
    on_notice: Callable[[Notice], None] | None,
) -> Sent:
    return await engine.runtime.send(
        sid,
        text,
        mode=mode,
        auto_approve=auto_approve,
        on_delta=_delta_publisher(host, on_delta),
        on_notice=on_notice,
    )


def agent_run_foreground(
    session_id: uuid.UUID | str | Session,
    text: str,
    *,
    auto_approve: bool = False,
    on_delta: Callable[[Delta], None] | None = None,
    on_notice: Callable[[Notice], None] | None = None,
) -> list[TurnEnded]:
    """Start a turn and wait for the run to end (its follow-ups included): its endings.
    Deltas and notices are handed to the callbacks on the agent thread."""
    sid = _sid(session_id)
    engine = _engine()
    sent = engine.call(_send(engine, sid, text, "message", auto_approve, None, on_delta, on_notice))
    assert sent.turn is not None
    ended = engine.call(engine.runtime.wait(sid))
    return ended or []


def agent_wait(
    session_id: uuid.UUID | str | Session, timeout: float | None = None
) -> list[TurnEnded] | None:
    """Wait until this process's run of the session ends; None if it runs none."""
    sid = _sid(session_id)
    engine = _engine_if_started()
    if engine is None:
        return None
    return engine.call(engine.runtime.wait(sid, timeout))


async def aagent_wait(
    session_id: uuid.UUID | str | Session, timeout: float | None = None
) -> list[TurnEnded] | None:
    sid = _sid(session_id)
    engine = _engine_if_started()
    if engine is None:
        return None
    return await engine.acall(engine.runtime.wait(sid, timeout))


def agent_cancel(session_id: uuid.UUID | str | Session) -> bool:
    """Ask the process running the session's turn, wherever it is, to cancel it. True when
    a turn is running."""
    sid = _sid(session_id)
    running = agent_turn_status(sid) == "running"
    engine = _engine_if_started()
    if engine is not None:
        engine.loop.call_soon_threadsafe(engine.runtime.cancel_local, sid)
    with connection.cursor() as cur:
        cur.execute("SELECT pg_notify(%s, %s)", [CONTROL_CHANNEL, f"{sid}:cancel"])
    return running


async def aagent_cancel(session_id: uuid.UUID | str | Session) -> bool:
    return await asyncio.to_thread(agent_cancel, session_id)


def agent_turn_status(session_id: uuid.UUID | str | Session) -> str:
    """`running` (a turn is open and its process holds the lock), `interrupted` (a turn is
    open but its process is gone: recovery will close it) or `idle`. A read."""
    sid = _sid(session_id)
    marker = _last_event(sid, ("turn/start", "turn/end"), None)
    if marker is None or marker.type != "turn/start":
        return "idle"
    return "running" if _lock_held(sid) else "interrupted"


async def aagent_turn_status(session_id: uuid.UUID | str | Session) -> str:
    return await asyncio.to_thread(agent_turn_status, session_id)


def agent_decide_approval(
    session_id: uuid.UUID | str | Session,
    approval_id: str,
    *,
    outcome: str,
    by: str | None = None,
) -> None:
    """Allow or reject a pending tool call; the run that waits for it (in any process)
    picks the decision up from the log."""
    sid = _sid(session_id)
    _sync(lambda e: e.runtime.decide(sid, approval_id, outcome, by))


async def aagent_decide_approval(
    session_id: uuid.UUID | str | Session,
    approval_id: str,
    *,
    outcome: str,
    by: str | None = None,
) -> None:
    sid = _sid(session_id)
    await _async(lambda e: e.runtime.decide(sid, approval_id, outcome, by))


def agent_pending_approvals(session_id: uuid.UUID | str | Session) -> list[PendingApproval]:
    """The approvals the session's open turn waits for, oldest first (a read)."""
    sid = _sid(session_id)
    return _sync(lambda e: e.runtime.pending_approvals(sid))


async def aagent_pending_approvals(session_id: uuid.UUID | str | Session) -> list[PendingApproval]:
    sid = _sid(session_id)
    return await _async(lambda e: e.runtime.pending_approvals(sid))


def agent_compact(
    session_id: uuid.UUID | str | Session, *, instructions: str | None = None
) -> Compacted:
    """Compact the session's current path now, with the session's own provider."""
    sid = _sid(session_id)
    return _sync(lambda e: e.runtime.compact(sid, instructions))


async def aagent_compact(
    session_id: uuid.UUID | str | Session, *, instructions: str | None = None
) -> Compacted:
    sid = _sid(session_id)
    return await _async(lambda e: e.runtime.compact(sid, instructions))


def agent_navigate(
    session_id: uuid.UUID | str | Session,
    entry_id: str | None,
    *,
    summarize: bool = False,
    instructions: str | None = None,
) -> Navigated:
    """Move the current leaf to `entry_id` as Pi's tree navigation does (None: before the
    first entry), optionally leaving a summary of the abandoned branch."""
    sid = _sid(session_id)
    return _sync(
        lambda e: e.runtime.navigate(sid, entry_id, summarize=summarize, instructions=instructions)
    )


async def aagent_navigate(
    session_id: uuid.UUID | str | Session,
    entry_id: str | None,
    *,
    summarize: bool = False,
    instructions: str | None = None,
) -> Navigated:
    sid = _sid(session_id)
    return await _async(
        lambda e: e.runtime.navigate(sid, entry_id, summarize=summarize, instructions=instructions)
    )


def agent_recover(
    session_ids: Sequence[uuid.UUID | str | Session] | None = None,
) -> list[Recovery]:
    """Close turns left open by dead processes: in the given sessions, or in every session
    that has an open turn. A turn whose process is alive is left alone."""
    sids = [_sid(s) for s in session_ids] if session_ids is not None else _sessions_with_open_turn()
    return _sync(lambda e: _recover_all(e, sids))


async def aagent_recover(
    session_ids: Sequence[uuid.UUID | str | Session] | None = None,
) -> list[Recovery]:
    return await asyncio.to_thread(agent_recover, session_ids)


async def _recover_all(engine: _Engine, sids: Sequence[str]) -> list[Recovery]:
    return [await engine.runtime.recover(sid) for sid in sids]


def _sessions_with_open_turn() -> list[str]:
    with connection.cursor() as cur:
        cur.execute(
            """
            SELECT session_id FROM (
                SELECT DISTINCT ON (session_id) session_id, type FROM sessions_app_event
                WHERE type IN ('turn/start', 'turn/end') ORDER BY session_id, seq DESC
            ) last WHERE type = 'turn/start'
            """
        )
        return [str(row[0]) for row in cur.fetchall()]


def agent_startup() -> None:
    """Start this process's agent loop and close the turns that dead processes left open.
    A server calls it once at start; everything also works without it (recovery then runs
    when a session is next written to)."""
    try:
        agent_recover()
    except DatabaseError:
        log.exception("startup recovery failed")


def agent_stop_local_runs(timeout: float = 10.0) -> None:
    """Cancel this process's runs and wait for them to write their endings."""
    engine = _engine_if_started()
    if engine is not None:
        engine.call(engine.runtime.stop_all(timeout), timeout + 5)


def agent_shutdown(timeout: float = 10.0) -> None:
    """Stop this process's runs, its listener and its database threads."""
    global _engine_instance
    with _engine_lock:
        engine, _engine_instance = _engine_instance, None
    if engine is not None:
        engine.shutdown(timeout)


def running_sessions() -> Mapping[str, int | None]:
    """This process's runs: session id → the turn running."""
    engine = _engine_if_started()
    if engine is None:
        return {}
    return {sid: run.current_turn for sid, run in list(engine.runtime.runs.items())}
