"""The agent services the doors call (see the package's docstring for the list).

Each engine service is written once, as a plan (`_send_message`, `_retry`, …) that `twins`
turns into `agent_x` and `aagent_x`. `session_id` may be a UUID, its string or a `Session`.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence

from django.db import DatabaseError

from projections.turns import TURN_MARKERS, is_open, turn_state
from runtime import (
    Compacted,
    Delta,
    Navigated,
    Notice,
    PendingApproval,
    Recovery,
    Sent,
    TurnEnded,
    TurnRunning,
)
from runtime.replay import Replayed, ReplayPlan, ReplaySource
from sessions_app.agent.admission import check_room
from sessions_app.agent.deltas import delta_publisher, host_loop
from sessions_app.agent.engine import (
    Engine,
    broadcast_cancel,
    engine,
    engine_if_started,
    engine_stop,
)
from sessions_app.agent.twins import Work, call_sync, in_thread, twins
from sessions_app.models import Session
from sessions_app.selectors import events as event_reads
from sessions_app.selectors import runtime as reads
from sessions_app.selectors import turns as turn_reads

log = logging.getLogger("strand.agent")

SessionRef = uuid.UUID | str | Session


def session_key(session_id: SessionRef) -> str:
    """The session's id as the runtime names it: the UUID's canonical string."""
    if isinstance(session_id, Session):
        return str(session_id.id)
    return str(uuid.UUID(str(session_id)))


# --- turns ----------------------------------------------------------------------------------


def _send_message(
    session_id: SessionRef, text: str, *, mode: str = "message", auto_approve: bool = False
) -> Work[Sent]:
    """Start a turn, or queue steering / follow-up input for the running one."""
    sid, host = session_key(session_id), host_loop()
    return lambda e: e.runtime.send(
        sid, text, mode=mode, auto_approve=auto_approve, on_delta=delta_publisher(host, None)
    )


def _retry(
    session_id: SessionRef, entry_id: str | None = None, *, auto_approve: bool = False
) -> Work[Sent]:
    """Start a turn that asks again from where the failed reply `entry_id` (by default
    the current leaf) was asked; refused while a turn runs, or for a reply that did not
    fail."""
    sid, host = session_key(session_id), host_loop()
    return lambda e: e.runtime.retry(
        sid, entry_id, auto_approve=auto_approve, on_delta=delta_publisher(host, None)
    )


def _replay(
    session_id: SessionRef, source: ReplaySource, plans: Sequence[ReplayPlan]
) -> Work[Replayed]:
    """Replay a recorded request once per plan, one turn after another (see
    `runtime.replay`); the caller has checked the request's hash. Refused while a turn
    runs."""
    sid, host = session_key(session_id), host_loop()
    return lambda e: e.runtime.replay(sid, source, plans, on_delta=delta_publisher(host, None))


def _wait(session_id: SessionRef, timeout: float | None = None) -> Work[list[TurnEnded] | None]:
    """Wait until this process's run of the session ends; None if it runs none."""
    sid = session_key(session_id)
    return lambda e: e.runtime.wait(sid, timeout)


def _decide_approval(
    session_id: SessionRef, approval_id: str, *, outcome: str, by: str | None = None
) -> Work[None]:
    """Allow or reject a pending tool call; the run that waits for it (in any process)
    picks the decision up from the log."""
    sid = session_key(session_id)
    return lambda e: e.runtime.decide(sid, approval_id, outcome, by)


def _pending_approvals(session_id: SessionRef) -> Work[list[PendingApproval]]:
    """The approvals the session's open turn waits for, oldest first (a read)."""
    sid = session_key(session_id)
    return lambda e: e.runtime.pending_approvals(sid)


def _compact(session_id: SessionRef, *, instructions: str | None = None) -> Work[Compacted]:
    """Compact the session's current path now, with the session's own provider."""
    sid = session_key(session_id)
    return lambda e: e.runtime.compact(sid, instructions)


def _navigate(
    session_id: SessionRef,
    entry_id: str | None,
    *,
    summarize: bool = False,
    instructions: str | None = None,
) -> Work[Navigated]:
    """Move the current leaf to `entry_id` as Pi's tree navigation does (None: before the
    first entry), optionally leaving a summary of the abandoned branch."""
    sid = session_key(session_id)
    return lambda e: e.runtime.navigate(
        sid, entry_id, summarize=summarize, instructions=instructions
    )


agent_send_message, aagent_send_message = twins(_send_message)
agent_retry, aagent_retry = twins(_retry)
agent_replay, aagent_replay = twins(_replay)
agent_wait, aagent_wait = twins(_wait, start=False)
agent_decide_approval, aagent_decide_approval = twins(_decide_approval)
agent_pending_approvals, aagent_pending_approvals = twins(_pending_approvals)
agent_compact, aagent_compact = twins(_compact)
agent_navigate, aagent_navigate = twins(_navigate)


def agent_run_foreground(
    session_id: SessionRef,
    text: str,
    *,
    auto_approve: bool = False,
    on_delta: Callable[[Delta], None] | None = None,
    on_notice: Callable[[Notice], None] | None = None,
) -> list[TurnEnded]:
    """Start a turn and wait for the run to end (its follow-ups included): its endings.
    Deltas and notices are handed to the callbacks on the agent thread."""
    sid = session_key(session_id)
    running = engine()
    sent = running.call(
        running.runtime.send(
            sid,
            text,
            mode="message",
            auto_approve=auto_approve,
            on_delta=delta_publisher(None, on_delta),
            on_notice=on_notice,
        )
    )
    assert sent.turn is not None
    ended = running.call(running.runtime.wait(sid))
    return ended or []


def agent_turn_status(session_id: SessionRef) -> str:
    """`running` (a turn is open and its process holds the lock), `interrupted` (a turn is
    open but its process is gone: recovery will close it) or `idle`. A read."""
    sid = session_key(session_id)
    marker = event_reads.latest_event(sid, TURN_MARKERS)
    held = is_open(marker) and turn_reads.turn_lock_held(sid)
    return turn_state(marker, lock_held=held).status


def agent_cancel(session_id: SessionRef) -> bool:
    """Ask the process running the session's turn, wherever it is, to cancel it. True when
    a turn is running."""
    sid = session_key(session_id)
    running = agent_turn_status(sid) == "running"
    local = engine_if_started()
    if local is not None:
        local.loop.call_soon_threadsafe(local.runtime.cancel_local, sid)
    broadcast_cancel(sid)
    return running


def agent_check_turn_room(session_id: SessionRef) -> None:
    """`TurnsCapped` when a turn of the session could not start now for the caps (a read,
    for a door that writes before it starts a turn)."""
    running = engine_if_started()
    check_room(session_key(session_id), running.turns if running is not None else None)


# How long `agent_stop_turn` waits for a cancelled turn to end and let go of its lock.
STOP_WAIT_S = 10.0


def agent_stop_turn(session_id: SessionRef, timeout: float = STOP_WAIT_S) -> None:
    """Cancel the session's running turn, wherever it runs, and wait until its process
    has let go of the turn lock (its `turn/end` written); `TurnRunning` when the lock is
    still held after `timeout` seconds."""
    sid = session_key(session_id)
    if not turn_reads.turn_lock_held(sid):
        return
    agent_cancel(sid)
    deadline = time.monotonic() + timeout
    while turn_reads.turn_lock_held(sid):
        if time.monotonic() > deadline:
            raise TurnRunning(
                f"the session's turn did not stop within {timeout:g} s of being cancelled; "
                "try again"
            )
        time.sleep(0.05)


def agent_recover(session_ids: Sequence[SessionRef] | None = None) -> list[Recovery]:
    """Close turns left open by dead processes, and record their background jobs as lost:
    in the given sessions, or in every session that has an open turn or job. A turn or job
    whose process is alive is left alone."""
    if session_ids is None:
        sids = reads.sessions_with_open_turn()
        sids += [sid for sid in reads.sessions_with_open_jobs() if sid not in sids]
    else:
        sids = [session_key(s) for s in session_ids]
    return call_sync(lambda running: _recover_all(running, sids))


async def _recover_all(running: Engine, sids: Sequence[str]) -> list[Recovery]:
    return [await running.runtime.recover(sid) for sid in sids]


aagent_turn_status = in_thread(agent_turn_status)
aagent_cancel = in_thread(agent_cancel)
aagent_recover = in_thread(agent_recover)


# --- the process ----------------------------------------------------------------------------


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
    running = engine_if_started()
    if running is not None:
        running.call(running.runtime.stop_all(timeout), timeout + 5)


def agent_shutdown(timeout: float = 10.0) -> None:
    """Stop this process's runs, its listener and its database threads."""
    engine_stop(timeout)


def running_sessions() -> Mapping[str, int | None]:
    """This process's runs: session id → the turn running."""
    running = engine_if_started()
    if running is None:
        return {}
    return {sid: run.current_turn for sid, run in list(running.runtime.runs.items())}
