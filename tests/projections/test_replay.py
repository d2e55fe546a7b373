"""A replay group's answers folded from hand-written events: the original answer, each
replay's, and what a group that stopped early shows."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from projections.records import EventRecord
from projections.replay import ReplayGroupNotFound, group_turns, project_replay_group

T0 = datetime(2026, 1, 1, tzinfo=UTC)


class Log:
    def __init__(self) -> None:
        self.events: list[EventRecord] = []

    def add(
        self,
        kind: str,
        data: dict[str, Any],
        *,
        turn: int,
        step: int | None = None,
        entry: str | None = None,
    ) -> int:
        seq = len(self.events)
        self.events.append(EventRecord(seq, kind, 1, T0, data, entry, turn, step))
        return seq

    def request_and_answer(
        self, turn: int, model: str, text: str, *, tokens: int, header: dict[str, Any] | None = None
    ) -> tuple[int, str]:
        header_seq = self.add(
            "request/header",
            {"reason": "initial", "provider": "offline", "model": model, **(header or {})},
            turn=turn,
            step=1,
        )
        sent = self.add(
            "request/sent", {"header_seq": header_seq, "leaf_entry_id": "u1"}, turn=turn, step=1
        )
        entry = f"a{turn}"
        message = {
            "role": "assistant",
            "model": model,
            "content": [{"type": "text", "text": text}],
            "usage": {"input": tokens, "output": tokens // 2, "cost": {"total": 0.5}},
            "stopReason": "stop",
        }
        self.add(
            "assistant/message",
            {"entry": {"message": message}, "timing": {"duration_ms": 40}},
            turn=turn,
            step=1,
            entry=entry,
        )
        return sent, entry


def replay_start(log: Log, turn: int, group: int, of: int, count: int) -> None:
    log.add(
        "turn/start",
        {
            "turn": turn,
            "trigger": "replay",
            "replay_of": of,
            "replay_group": group,
            "replay_count": count,
        },
        turn=turn,
    )


def test_the_original_and_each_replay_side_by_side() -> None:
    log = Log()
    log.add("turn/start", {"turn": 1, "trigger": "message"}, turn=1)
    seq, original = log.request_and_answer(1, "m-1", "first answer", tokens=100)
    log.add("turn/end", {"turn": 1, "reason": "completed"}, turn=1)
    replay_start(log, 2, 2, seq, 2)
    _, replayed = log.request_and_answer(
        2,
        "m-2",
        "second answer",
        tokens=80,
        header={"reason": "replay", "replay_preset": "other", "overrides": ["system_prompt"]},
    )
    log.add("turn/end", {"turn": 2, "reason": "completed"}, turn=2)
    replay_start(log, 3, 2, seq, 2)

    start = next(e for e in log.events if e.type == "turn/start" and e.turn == 2)
    assert group_turns(start) == (2, seq, 2)
    turn1 = [e for e in log.events if e.turn == 1]
    later = [e for e in log.events if e.turn in (2, 3)]

    group = project_replay_group(2, seq, 2, turn1, later, running=True)
    assert (group.original.entry_id, group.original.text, group.original.model) == (
        original,
        "first answer",
        "m-1",
    )
    first, second = group.answers
    assert (first.entry_id, first.status, first.preset, first.overrides) == (
        replayed,
        "completed",
        "other",
        ("system_prompt",),
    )
    assert (first.input_tokens, first.output_tokens, first.cost, first.duration_ms) == (
        80,
        40,
        0.5,
        40,
    )
    assert second.status == "running" and second.entry_id is None
    assert not group.done

    # The process that ran it is gone: the second is interrupted, and the group over.
    stopped = project_replay_group(2, seq, 2, turn1, later, running=False)
    assert stopped.answers[1].status == "interrupted" and stopped.done


def test_a_group_that_stopped_before_its_last_replay_shows_it_skipped() -> None:
    log = Log()
    seq, _ = log.request_and_answer(1, "m-1", "answer", tokens=10)
    replay_start(log, 2, 2, seq, 3)
    log.add("turn/end", {"turn": 2, "reason": "aborted"}, turn=2)
    events = [e for e in log.events if e.turn == 2]
    waiting = project_replay_group(2, seq, 3, log.events[:3], events, running=True)
    assert [a.status for a in waiting.answers] == ["aborted", "waiting", "waiting"]
    skipped = project_replay_group(2, seq, 3, log.events[:3], events, running=False)
    assert [a.status for a in skipped.answers] == ["aborted", "skipped", "skipped"]
    assert skipped.done


@pytest.mark.parametrize(
    "data",
    [
        {"turn": 2, "trigger": "message"},
        {"turn": 3, "trigger": "replay", "replay_of": 1, "replay_group": 2},  # not the first
        {"turn": 2, "trigger": "replay", "replay_group": 2},  # names no request
    ],
)
def test_only_the_first_turn_of_a_replay_group_names_it(data: dict[str, Any]) -> None:
    with pytest.raises(ReplayGroupNotFound):
        group_turns(EventRecord(5, "turn/start", 1, T0, data, None, data["turn"], None))
    with pytest.raises(ReplayGroupNotFound):
        group_turns(None)
