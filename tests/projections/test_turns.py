from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from projections.records import EventRecord
from projections.turns import PendingApproval, TurnState, pending_approvals, turn_state

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def event(seq: int, kind: str, data: dict[str, Any] | None = None, **cols: Any) -> EventRecord:
    return EventRecord(seq, kind, 1, T0, data or {}, cols.get("entry"), cols.get("turn"), None)


START = event(10, "turn/start", {"turn": 3, "trigger": "message"}, turn=3)


@pytest.mark.parametrize(
    ("marker", "lock_held", "status", "label", "reason"),
    [
        (None, False, "idle", "idle", None),
        (None, True, "idle", "idle", None),
        (START, True, "running", "running", None),
        (START, False, "interrupted", "interrupted", "interrupted"),
        (event(20, "turn/end", {"turn": 3, "reason": "completed"}, turn=3), False, "idle", "idle", "completed"),
        (event(20, "turn/end", {"turn": 3, "reason": "completed"}, turn=3), True, "idle", "idle", "completed"),
        (event(20, "turn/end", {"turn": 3, "reason": "error"}, turn=3), False, "idle", "error", "error"),
        (event(20, "turn/end", {"turn": 3, "reason": "aborted"}, turn=3), False, "idle", "aborted", "aborted"),
        (event(20, "turn/end", {"turn": 3, "reason": "interrupted"}, turn=3), False, "idle", "interrupted", "interrupted"),
        (event(20, "turn/end", {"turn": 3, "reason": "max_tokens"}, turn=3), False, "idle", "idle", "max_tokens"),
    ],
)  # fmt: skip
def test_turn_state_follows_the_latest_marker_and_the_lock(
    marker: EventRecord | None, lock_held: bool, status: str, label: str, reason: str | None
) -> None:
    state = turn_state(marker, lock_held=lock_held)
    assert (state.status, state.label, state.last_reason) == (status, label, reason)
    assert state.running == (status == "running")
    assert state.open == (marker is not None and marker.type == "turn/start")


def test_turn_state_names_the_turn_from_the_column_or_the_data() -> None:
    assert turn_state(START, lock_held=True).turn == 3
    assert turn_state(event(1, "turn/start", {"turn": 7}), lock_held=True).turn == 7
    assert turn_state(event(1, "turn/start", {"turn": True}), lock_held=True).turn is None


def test_a_running_turn_waiting_for_an_approval_is_labelled_waiting() -> None:
    asked = pending_approvals([event(11, "approval/asked", {"approval_id": "a1"}, turn=3)])
    assert turn_state(START, lock_held=True, approvals=asked).label == "waiting"
    # A dead turn waits for nobody: its approvals are dropped.
    dead = turn_state(START, lock_held=False, approvals=asked)
    assert dead.approvals == () and dead.label == "interrupted"


def test_pending_approvals_are_the_asked_ones_not_decided_oldest_first() -> None:
    events = [
        START,
        event(11, "approval/asked", {"approval_id": "a1", "call_id": "c1", "tool": "bash", "arguments": '{"cmd": "ls"}'}, turn=3),
        event(12, "approval/asked", {"approval_id": "a2", "call_id": "c2", "tool": "write"}, turn=3),
        event(13, "approval/decided", {"approval_id": "a1", "outcome": "allowed"}, turn=3),
        event(14, "approval/asked", {"approval_id": "a3", "call_id": "c3", "tool": "edit", "arguments": "not json"}, turn=3),
        event(15, "approval/decided", {"approval_id": "unknown", "outcome": "rejected"}, turn=3),
    ]  # fmt: skip
    pending = pending_approvals(events)
    assert [a.approval_id for a in pending] == ["a2", "a3"]
    assert pending[0] == PendingApproval("a2", "c2", "write", "", 3, None, 12)
    assert pending[1].arguments_pretty == "not json"


def test_arguments_are_shown_indented_when_they_are_json() -> None:
    [approval] = pending_approvals(
        [event(1, "approval/asked", {"approval_id": "a", "arguments": '{"path":"é"}'})]
    )
    assert approval.arguments_pretty == '{\n  "path": "é"\n}'
    assert approval.call_id == "" and approval.tool == ""


def test_an_empty_state_is_idle() -> None:
    assert TurnState().status == "idle" and TurnState().label == "idle"


def test_a_late_failed_agent_span_fails_a_turn_closed_as_completed() -> None:
    completed = event(20, "turn/end", {"turn": 3, "reason": "completed"}, turn=3)
    failed = event(30, "turn/observed", {"turn": 3, "reason": "error", "error": "x"}, turn=3)
    state = turn_state(completed, lock_held=False, observed=failed)
    assert (state.last_reason, state.label) == ("error", "error")
    # A span that ended well changes nothing, nor does a late span amend another ending.
    fine = event(30, "turn/observed", {"turn": 3, "reason": "completed"}, turn=3)
    assert turn_state(completed, lock_held=False, observed=fine).last_reason == "completed"
    aborted = event(20, "turn/end", {"turn": 3, "reason": "aborted"}, turn=3)
    assert turn_state(aborted, lock_held=False, observed=failed).last_reason == "aborted"
