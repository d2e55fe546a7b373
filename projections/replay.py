"""The answers of a replay group side by side: the original answer to a recorded request
and each replay's answer to it, with their tokens, cost and time.

A replay action starts `replay_count` turns one after another (trigger `replay`), the
first of which names the group (`replay_group`, its turn number). Folded from the events of
those turns and of the original request's turn; nothing else is read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from projections.chat import content_text
from projections.records import EventRecord

ANSWER_TEXT_MAX = 4000  # characters of an answer shown; the compare page has the rest


@dataclass(frozen=True, slots=True)
class ReplayAnswer:
    """One answer to the replayed request: the original (turn of the request) or a replay."""

    turn: int | None
    # waiting, running, or the turn's end reason (completed, error, aborted…); with no live
    # run: interrupted (started, never ended) or skipped (never started: the group stopped)
    status: str
    preset: str | None
    provider: str | None
    model: str | None
    overrides: tuple[str, ...]
    entry_id: str | None  # the assistant message that answered the request
    text: str
    text_cut: bool
    tool_calls: tuple[str, ...]  # names of the tools the answer asked for
    stop_reason: str | None
    input_tokens: int
    output_tokens: int
    cost: float
    duration_ms: int | None  # the model call
    error: str | None


@dataclass(frozen=True, slots=True)
class ReplayGroup:
    group: int
    request_seq: int
    count: int
    original: ReplayAnswer
    answers: tuple[ReplayAnswer, ...]  # in the order they run; `count` of them

    @property
    def done(self) -> bool:
        return all(a.status not in ("waiting", "running") for a in self.answers)


class ReplayGroupNotFound(LookupError):
    pass


def group_turns(start: EventRecord | None) -> tuple[int, int, int]:
    """The (group, replayed request seq, count) a replay group's first `turn/start` names."""
    data = start.data if start is not None else {}
    if (
        start is None
        or start.type != "turn/start"
        or data.get("trigger") != "replay"
        or data.get("replay_group") != data.get("turn")
        or not isinstance(data.get("replay_of"), int)
    ):
        raise ReplayGroupNotFound("no replay group starts at that turn")
    count = data.get("replay_count")
    return int(data["turn"]), int(data["replay_of"]), count if isinstance(count, int) else 1


def project_replay_group(
    group: int,
    request_seq: int,
    count: int,
    original_events: Sequence[EventRecord],
    replay_events: Sequence[EventRecord],
    *,
    running: bool,
) -> ReplayGroup:
    """`original_events`: the events of the recorded request's turn (and its header);
    `replay_events`: those of the group's turns; `running`: whether a live process holds
    the session's turn lock (read before the events), which a group holds from its first
    turn to its last."""
    by_turn: dict[int, list[EventRecord]] = {}
    for event in replay_events:
        if event.turn is not None:
            by_turn.setdefault(event.turn, []).append(event)
    answers = []
    for turn in range(group, group + count):
        events = sorted(by_turn.get(turn, ()), key=lambda e: e.seq)
        start = next((e for e in events if e.type == "turn/start"), None)
        if start is None or start.data.get("replay_group") != group:
            answers.append(_waiting(turn, "waiting" if running else "skipped"))
            continue
        sent = next((e for e in events if e.type == "request/sent"), None)
        answer = _answer(turn, events, sent)
        if answer.status == "running" and not running:
            answer = replace(answer, status="interrupted")
        answers.append(answer)
    ordered = sorted(original_events, key=lambda e: e.seq)
    sent = next((e for e in ordered if e.seq == request_seq and e.type == "request/sent"), None)
    original = _answer(sent.turn if sent else None, ordered, sent, original=True)
    return ReplayGroup(group, request_seq, count, original, tuple(answers))


def _waiting(turn: int, status: str) -> ReplayAnswer:
    return ReplayAnswer(
        turn, status, None, None, None, (), None, "", False, (), None, 0, 0, 0.0, None, None
    )


def _answer(
    turn: int | None,
    events: Sequence[EventRecord],
    sent: EventRecord | None,
    *,
    original: bool = False,
) -> ReplayAnswer:
    header = None
    if sent is not None:
        header_seq = sent.data.get("header_seq")
        header = next(
            (e for e in events if e.seq == header_seq and e.type == "request/header"), None
        )
    reply = None
    if sent is not None:
        reply = next(
            (
                e
                for e in events
                if e.seq > sent.seq
                and e.type == "assistant/message"
                and e.turn == sent.turn
                and e.step == sent.step
            ),
            None,
        )
    end = next((e for e in events if e.type == "turn/end" and e.turn == turn), None)
    status = str(end.data.get("reason")) if end is not None else "running"
    if original:
        status = "completed" if reply is not None else status
    message = _message(reply)
    usage = _mapping(message.get("usage"))
    cost = _mapping(usage.get("cost"))
    text = content_text(message.get("content"), "\n\n")
    timing = reply.data.get("timing") if reply is not None else None
    hdata: Mapping[str, Any] = header.data if header is not None else {}
    error = message.get("errorMessage") or (end.data.get("error") if end is not None else None)
    return ReplayAnswer(
        turn=turn,
        status=status,
        preset=_str(hdata.get("replay_preset")),
        provider=_str(hdata.get("provider")),
        model=_str(message.get("model")) or _str(hdata.get("model")),
        overrides=tuple(str(o) for o in hdata.get("overrides") or ()),
        entry_id=reply.entry_id if reply is not None else None,
        text=text[:ANSWER_TEXT_MAX],
        text_cut=len(text) > ANSWER_TEXT_MAX,
        tool_calls=tuple(
            str(block.get("name") or "")
            for block in message.get("content") or ()
            if isinstance(block, Mapping) and block.get("type") == "toolCall"
        ),
        stop_reason=_str(message.get("stopReason")),
        input_tokens=_int(usage.get("input")),
        output_tokens=_int(usage.get("output")),
        cost=float(cost.get("total") or 0.0),
        duration_ms=_int(timing.get("duration_ms")) if isinstance(timing, Mapping) else None,
        error=str(error) if error else None,
    )


def _message(reply: EventRecord | None) -> Mapping[str, Any]:
    if reply is None:
        return {}
    entry = reply.data.get("entry")
    message = entry.get("message") if isinstance(entry, Mapping) else None
    return message if isinstance(message, Mapping) else {}


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
