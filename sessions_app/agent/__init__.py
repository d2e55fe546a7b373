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
    agent_replay(session_id, source, plans) -> Replayed
        a recorded request sent again, once per plan, one turn after another
    agent_cancel(session_id) -> bool
    agent_check_turn_room(session_id)   (a read: `TurnsCapped` when the caps refuse a turn now)
    agent_stop_turn(session_id, timeout=10.0)
        cancel the running turn and wait until its process lets go of the turn lock (before
        a session is deleted); `TurnRunning` if it does not stop in time
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

Modules, by job:

- `lock` — the turn lock, a Postgres advisory lock held by the process that runs the turn
  (all of a process's on one connection); crash recovery closes an open turn only when it
  can take it; reading never writes;
- `admission` — the caps on open turns, per user and per process (`TurnsCapped`, a 429);
- `log` — `runtime.ports.SessionLog` over `store` (the one write) and the selectors;
- `engine` — the process's agent loop thread, its database threads and its LISTEN
  connection (wake-ups from commits, cancellation from any process);
- `deltas` — the runtime's streaming text, published to live viewers (never stored);
- `services` — the services above, each written once; `twins` makes the sync and async
  pair of each.
"""

from __future__ import annotations

from runtime import (
    AgentError,
    ApprovalNotPending,
    Compacted,
    Navigated,
    NotFound,
    NothingToCompact,
    PendingApproval,
    Recovery,
    Sent,
    SessionBusy,
    TurnEnded,
    TurnRunning,
)
from sessions_app.agent.admission import TurnsCapped
from sessions_app.agent.services import (
    aagent_cancel,
    aagent_compact,
    aagent_decide_approval,
    aagent_navigate,
    aagent_pending_approvals,
    aagent_recover,
    aagent_replay,
    aagent_retry,
    aagent_send_message,
    aagent_turn_status,
    aagent_wait,
    agent_cancel,
    agent_check_turn_room,
    agent_compact,
    agent_decide_approval,
    agent_navigate,
    agent_pending_approvals,
    agent_recover,
    agent_replay,
    agent_retry,
    agent_run_foreground,
    agent_send_message,
    agent_shutdown,
    agent_startup,
    agent_stop_local_runs,
    agent_stop_turn,
    agent_turn_status,
    agent_wait,
    running_sessions,
)
from sessions_app.turn_lock import turn_lock_key

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
    "TurnsCapped",
    "aagent_cancel",
    "aagent_compact",
    "aagent_decide_approval",
    "aagent_navigate",
    "aagent_pending_approvals",
    "aagent_recover",
    "aagent_replay",
    "aagent_retry",
    "aagent_send_message",
    "aagent_turn_status",
    "aagent_wait",
    "agent_cancel",
    "agent_check_turn_room",
    "agent_compact",
    "agent_decide_approval",
    "agent_navigate",
    "agent_pending_approvals",
    "agent_recover",
    "agent_replay",
    "agent_run_foreground",
    "agent_retry",
    "agent_send_message",
    "agent_shutdown",
    "agent_startup",
    "agent_stop_local_runs",
    "agent_stop_turn",
    "agent_turn_status",
    "agent_wait",
    "running_sessions",
    "turn_lock_key",
]
