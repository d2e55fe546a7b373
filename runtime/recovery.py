"""Closing a turn left open by a process that died (DESIGN §7).

`closers` is pure: from the events of the open turn it computes the facts that close it —
an error result for every tool call without one (`TOOL_OUTCOME_UNKNOWN` when its `tool/call`
was written, so it may have run; `TOOL_NOT_STARTED` when the model asked for it but it was
never dispatched), `step/end` for an open step, and `turn/end` with reason `interrupted`.
The caller appends them only while holding the session's turn lock, which proves that the
process that ran the turn is gone; once `turn/end` is written the turn is no longer open, so
recovery runs at most once per turn.

Background jobs outlive turns, so their recovery is apart (`runtime.jobs.JobRegistry.recover`,
run by the same service calls first): a job that started and did not end, whose own lock
can be taken, gets `job/ended` reason `lost`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from projections.records import EventRecord
from runtime.messages import message_entry, tool_calls_in, tool_result_message
from runtime.ports import NewFact

OUTCOME_UNKNOWN = "TOOL_OUTCOME_UNKNOWN"
NOT_STARTED = "TOOL_NOT_STARTED"

_UNKNOWN_TEXT = (
    "The process running this tool stopped before the tool reported a result; whether it ran, "
    "and what it did, is unknown."
)
_NOT_STARTED_TEXT = "The process running this turn stopped before this tool call was started."
# A `task` call whose child session had started (`runtime.subagents`).
_CHILD_TEXT = (
    "The process running this subagent stopped; its child session {child} is closed by "
    "recovery as interrupted, and what it did before is in that session."
)


@dataclass(frozen=True, slots=True)
class OpenTurn:
    turn: int
    start_seq: int


@dataclass(frozen=True, slots=True)
class Closing:
    turn: int
    facts: list[NewFact]
    unknown: int  # results written with TOOL_OUTCOME_UNKNOWN
    not_started: int  # results written with TOOL_NOT_STARTED
    step: int | None  # the step closed, if one was open


def closers(turn: int, events: Sequence[EventRecord]) -> Closing:
    """The facts that close `turn`, given its events (from its `turn/start` on)."""
    calls: list[tuple[Mapping[str, Any], int | None]] = []  # (toolCall block, step)
    answered: set[str] = set()
    dispatched: set[str] = set()
    children: dict[str, str] = {}  # call id → the child session a `task` call started
    open_step: int | None = None
    last_entry: str | None = None
    for event in sorted(events, key=lambda e: e.seq):
        if event.entry_id is not None:
            last_entry = event.entry_id
        if event.type == "step/start":
            open_step = _int(event.data.get("step"), event.step)
        elif event.type == "step/end":
            open_step = None
        elif event.type == "tool/call":
            dispatched.add(str(event.data.get("call_id")))
        elif event.type == "subagent/started":
            children[str(event.data.get("call_id"))] = str(event.data.get("child_session"))
        elif event.type == "assistant/message":
            for call in tool_calls_in(_message(event)):
                calls.append((call, event.step))
        elif event.type == "tool/result":
            answered.add(str(_message(event).get("toolCallId")))
    facts: list[NewFact] = []
    unknown = not_started = 0
    for call, step in calls:
        call_id = str(call.get("id"))
        if call_id in answered:
            continue
        answered.add(call_id)
        ran = call_id in dispatched
        code = OUTCOME_UNKNOWN if ran else NOT_STARTED
        unknown += ran
        not_started += not ran
        text = _UNKNOWN_TEXT if ran else _NOT_STARTED_TEXT
        if ran and call_id in children:
            text = _CHILD_TEXT.format(child=children[call_id])
        message = tool_result_message(call_id, str(call.get("name") or ""), text, is_error=True)
        # The first result hangs under the turn's last entry; each next one under the
        # result before it (the leaf the store moved there), as live results do.
        entry = (
            message_entry(message, parent_id=last_entry) if not facts else message_entry(message)
        )
        facts.append(
            NewFact("tool/result", {"entry": entry, "error_code": code}, turn=turn, step=step)
        )
    if open_step is not None:
        facts.append(
            NewFact(
                "step/end",
                {"turn": turn, "step": open_step, "reason": "interrupted"},
                turn=turn,
                step=open_step,
            )
        )
    facts.append(NewFact("turn/end", {"turn": turn, "reason": "interrupted"}, turn=turn))
    return Closing(turn, facts, unknown, not_started, open_step)


def _message(event: EventRecord) -> Mapping[str, Any]:
    entry = event.data.get("entry")
    message = entry.get("message") if isinstance(entry, Mapping) else None
    return message if isinstance(message, Mapping) else {}


def _int(value: Any, fallback: int | None) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else fallback
