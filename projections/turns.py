"""Whether a turn is open, how the last one ended, and the approvals it waits for.

Two folds that every door and the runtime share, so that the session list, the session
page, the API and the runtime's own decisions (queue a message, record an approval, close a
dead turn) read the same facts the same way:

- `turn_state` folds the session's latest turn marker (`turn/start` or `turn/end`) and
  whether a live process holds the session's turn lock. A turn is open from its
  `turn/start` until its `turn/end`; an open turn whose process is gone (nobody holds the
  lock) is `interrupted`: crash recovery closes it at the next write.
- `pending_approvals` folds the events of the open turn: every `approval/asked` that no
  `approval/decided` answered, oldest first.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from projections.otel_ingest import with_late_agent
from projections.records import EventRecord

TURN_MARKERS = ("turn/start", "turn/end")
# How a turn may end besides "completed"; the session list shows these as its state.
_UNHAPPY_ENDINGS = frozenset({"interrupted", "error", "aborted", "approval_timeout"})


@dataclass(frozen=True, slots=True)
class PendingApproval:
    """A tool call that waits for the user's decision (an unanswered `approval/asked`)."""

    approval_id: str
    call_id: str
    tool: str
    arguments: str  # the call's arguments as JSON text
    turn: int | None
    step: int | None
    seq: int

    @property
    def arguments_pretty(self) -> str:
        try:
            return json.dumps(json.loads(self.arguments), indent=2, ensure_ascii=False)
        except (TypeError, ValueError):
            return self.arguments


@dataclass(frozen=True, slots=True)
class TurnState:
    """`open`: the latest marker is a `turn/start`. `running`: open, and its process is
    alive. `last_reason`: how the latest turn ended (`interrupted` for an open turn whose
    process is gone)."""

    open: bool = False
    running: bool = False
    turn: int | None = None
    last_reason: str | None = None
    approvals: tuple[PendingApproval, ...] = ()

    @property
    def status(self) -> str:
        """`running`, `interrupted` (open, its process gone) or `idle`: the API's
        `turn_status`."""
        if self.running:
            return "running"
        return "interrupted" if self.open else "idle"

    @property
    def label(self) -> str:
        """The state as the pages name it: waiting (for an approval), running, how the
        last turn ended when that went wrong, or idle."""
        if self.running:
            return "waiting" if self.approvals else "running"
        if self.last_reason in _UNHAPPY_ENDINGS:
            return str(self.last_reason)
        return "idle"


def turn_state(
    marker: EventRecord | None,
    *,
    lock_held: bool,
    approvals: tuple[PendingApproval, ...] = (),
    observed: EventRecord | None = None,
) -> TurnState:
    """The state after `marker`, the session's latest `turn/start` or `turn/end` (None: no
    turn yet). `lock_held`: a live process holds the session's turn lock. `approvals` are
    kept only for a running turn. `observed`: in an observed session, the ended turn's
    `turn/observed` (its agent span, come late), which may fail a turn closed as completed."""
    if marker is None:
        return TurnState()
    turn = turn_number(marker)
    if marker.type != "turn/start":
        ended = with_late_agent(marker.data, observed.data if observed is not None else None)
        reason = ended.get("reason")
        return TurnState(turn=turn, last_reason=reason if isinstance(reason, str) else None)
    if not lock_held:
        return TurnState(open=True, turn=turn, last_reason="interrupted")
    return TurnState(open=True, running=True, turn=turn, approvals=approvals)


def is_open(marker: EventRecord | None) -> bool:
    """Whether `marker` (the latest turn marker) leaves a turn open."""
    return marker is not None and marker.type == "turn/start"


def turn_number(marker: EventRecord) -> int | None:
    """The turn a marker belongs to: its `turn` column, else its data's `turn`."""
    if marker.turn is not None:
        return marker.turn
    value = marker.data.get("turn")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def pending_approvals(events: Iterable[EventRecord]) -> tuple[PendingApproval, ...]:
    """The approvals asked in `events` (the open turn's, in seq order) and not decided."""
    asked: dict[str, PendingApproval] = {}
    for event in events:
        data = event.data
        if event.type == "approval/asked":
            approval_id = str(data.get("approval_id"))
            asked[approval_id] = PendingApproval(
                approval_id=approval_id,
                call_id=str(data.get("call_id") or ""),
                tool=str(data.get("tool") or ""),
                arguments=str(data.get("arguments") or ""),
                turn=event.turn,
                step=event.step,
                seq=event.seq,
            )
        elif event.type == "approval/decided":
            asked.pop(str(data.get("approval_id")), None)
    return tuple(asked.values())
