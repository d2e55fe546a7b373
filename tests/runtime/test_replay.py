"""Replaying a recorded request with the offline model, through the same services the API
and the pages call, against Postgres: what it records, the payload it sends, the lock, the
checks, and a replay killed mid-turn."""

from __future__ import annotations

import signal
from typing import Any

import pytest
from django.core.management import call_command

from projections.records import EventRecord
from projections.request import RequestView
from sessions_app import agent, selectors, store
from sessions_app.models import Session
from sessions_app.selectors.requests import request_view
from sessions_app.selectors.verify import verify_session
from sessions_app.services import replay
from sessions_app.store import NewEvent
from tests.runtime.conftest import OFFLINE, assert_requests_match, wait_done, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def events(session: Session, after: int = -1) -> list[EventRecord]:
    return store.events_after(session.id, after, 10_000)


def of_type(session: Session, kind: str) -> list[EventRecord]:
    return [e for e in events(session) if e.type == kind]


def answered(session: Session, text: str) -> tuple[int, RequestView]:
    """Run a turn with `text`; the seq of its (first) request and that request's view."""
    agent.agent_send_message(session.id, text)
    wait_done(session)
    seq = of_type(session, "request/sent")[-1].seq
    return seq, request_view(session, seq)


def replay_once(session: Session, seq: int, preset: str, **overrides: Any) -> list[Any]:
    plans = replay.replay_plans(preset_names=[preset], **overrides)
    started = replay.replay_start(session, seq, plans)
    assert len(started.turns) == 1
    return wait_done(session)


def without(payload: Any, *keys: str) -> dict[str, Any]:
    return {k: v for k, v in payload.items() if k not in keys}


def test_a_replay_with_the_same_preset_sends_the_same_bytes_as_a_sibling(make_session):
    session = make_session()
    seq, original = answered(session, "hello there")
    name = session.preset["name"]
    last = session_last_seq(session)

    [ended] = replay_once(session, seq, name)
    assert ended.reason == "completed"
    assert [e.type for e in events(session, last)] == [
        "turn/start",
        "leaf/moved",
        "step/start",
        "request/header",
        "request/sent",
        "assistant/message",
        "step/end",
        "turn/end",
    ]
    start, moved, _, header, sent, reply = events(session, last)[:6]
    assert start.data["trigger"] == "replay"
    assert (start.data["replay_of"], start.data["replay_group"], start.data["replay_count"]) == (
        seq,
        start.data["turn"],
        1,
    )
    assert moved.data["to"] == original.leaf_entry_id and moved.data["reason"] == "replay"
    assert header.data["reason"] == "replay"
    assert (header.data["replay_of"], header.data["replay_preset"]) == (seq, name)
    assert header.data["overrides"] == []
    # The same context, header and preset: byte for byte the recorded request.
    assert sent.data["payload_sha256"] == original.recorded_sha256
    assert sent.data["leaf_entry_id"] == original.leaf_entry_id
    # Its answer is a sibling of the original answer, and the session's leaf now.
    assert original.response_entry_id is not None and reply.entry_id is not None
    [first, second] = [
        store.entries_by_id(session.id, [i])[0]
        for i in (original.response_entry_id, reply.entry_id)
    ]
    assert first.parent_id == second.parent_id == original.leaf_entry_id
    assert first.id != second.id
    session.refresh_from_db()
    assert session.leaf_entry_id == reply.entry_id
    assert assert_requests_match(session) == 2
    assert verified(session) is None


def test_overrides_and_another_preset_change_only_what_they_name(make_session, serve_preset):
    session = make_session(params={"temperature": 0.7})
    other = serve_preset("other-model", **{**OFFLINE, "model": "strand-offline-2"})
    seq, original = answered(session, "read notes.txt")
    assert original.payload is not None

    replay_once(
        session,
        seq,
        session.preset["name"],
        system_prompt="Answer in one word.",
        params={"temperature": 0.2, "max_tokens": 64},
    )
    replay_once(session, seq, other)
    sents = [
        e
        for e in of_type(session, "request/sent")
        if e.data["leaf_entry_id"] == original.leaf_entry_id
    ]
    assert len(sents) == 3
    overridden = request_view(session, sents[1].seq)
    moved = request_view(session, sents[2].seq)
    assert overridden.matches and moved.matches
    assert overridden.payload is not None and moved.payload is not None

    # System prompt and parameters overridden: the messages after the system one, the
    # tools and every other field are the recorded request's.
    before, after = original.payload, overridden.payload
    assert before["messages"][0]["role"] == after["messages"][0]["role"] == "system"
    assert after["messages"][0]["content"] == "Answer in one word."
    assert after["messages"][1:] == before["messages"][1:]
    assert (before["temperature"], after["temperature"], after["max_tokens"]) == (0.7, 0.2, 64)
    assert without(after, "messages", "temperature", "max_tokens") == without(
        before, "messages", "temperature", "max_tokens"
    )
    header = store.events_after(session.id, overridden.header_seq - 1, 1)[0]
    assert header.data["overrides"] == ["params.max_tokens", "params.temperature", "system_prompt"]

    # Another preset: its model and its parameters, the recorded prompt, tools and messages.
    assert moved.payload["model"] == "strand-offline-2"
    assert "temperature" not in moved.payload
    assert without(moved.payload, "model") == without(before, "model", "temperature")
    assert moved.system_prompt == original.system_prompt
    assert [t.name for t in moved.tools] == [t.name for t in original.tools]
    assert verified(session) is None


def test_several_replays_run_one_after_another_as_siblings(make_session, serve_preset):
    session = make_session()
    other = serve_preset("other-model", **{**OFFLINE, "model": "strand-offline-2"})
    seq, original = answered(session, "hello")
    plans = replay.replay_plans(preset_names=[session.preset["name"], other], count=2)
    started = replay.replay_start(session, seq, plans)
    assert len(started.turns) == 4
    ended = wait_done(session)
    assert [(e.turn, e.reason) for e in ended] == [(t, "completed") for t in started.turns]

    starts = [e for e in of_type(session, "turn/start") if e.data.get("trigger") == "replay"]
    assert [s.data["turn"] for s in starts] == list(started.turns)
    assert {s.data["replay_group"] for s in starts} == {started.group}
    # One turn at a time: each ends before the next starts.
    markers = [e.type for e in events(session) if e.type in ("turn/start", "turn/end")]
    assert markers == ["turn/start", "turn/end"] * 5

    group = selectors.replay_group(session, started.group)
    assert group.done and group.request_seq == seq
    assert group.original.entry_id == original.response_entry_id
    assert [a.model for a in group.answers] == [
        "strand-offline-1",
        "strand-offline-1",
        "strand-offline-2",
        "strand-offline-2",
    ]
    parents = {
        store.entries_by_id(session.id, [a.entry_id])[0].parent_id
        for a in group.answers
        if a.entry_id
    }
    assert parents == {original.leaf_entry_id}
    assert all(a.output_tokens > 0 and a.text for a in group.answers)
    assert verified(session) is None


def test_refusals_write_nothing(make_session, serve_preset):
    session = make_session()
    seq, _ = answered(session, "hello")
    agent.agent_send_message(session.id, "write out.txt: hi")  # waits for approval
    wait_for(lambda: agent.agent_pending_approvals(session.id))
    name = session.preset["name"]
    last = session_last_seq(session)
    plans = replay.replay_plans(preset_names=[name])
    with pytest.raises(agent.TurnRunning):
        replay.replay_start(session, seq, plans)
    with pytest.raises(LookupError):
        replay.replay_start(session, seq + 1, plans)
    with pytest.raises(replay.NotAllowed):
        replay.replay_plans(preset_names=["no-such-preset"])
    with pytest.raises(replay.DomainError, match="at most 5"):
        replay.replay_plans(preset_names=[name], count=6)
    with pytest.raises(replay.DomainError, match="cannot be overridden"):
        replay.replay_plans(preset_names=[name], params={"base_url": 1})
    with pytest.raises(replay.DomainError, match="from 0 to 2"):
        replay.replay_plans(preset_names=[name], params={"temperature": 9})
    assert session_last_seq(session) == last


def test_a_request_whose_hash_does_not_match_is_not_replayed(make_session):
    session = make_session()
    seq, original = answered(session, "hello")
    # A manifest whose hash no payload of these facts has (as a tampered log would hold).
    last = session_last_seq(session)
    forged = {
        "header_seq": original.header_seq,
        "leaf_entry_id": original.leaf_entry_id,
        "payload_sha256": "0" * 64,
        "token_estimate": 1,
    }
    store.append_events(session.id, last, [NewEvent("request/sent", forged)])
    with pytest.raises(replay.PayloadMismatch, match="does not match"):
        replay.replay_start(
            session, last + 1, replay.replay_plans(preset_names=[session.preset["name"]])
        )
    assert session_last_seq(session) == last + 1


def test_a_replay_killed_mid_turn_is_closed_by_recovery(make_session, child, capsys):
    session = make_session()
    agent.agent_send_message(session.id, "write out.txt: hi")
    pending = wait_for(lambda: agent.agent_pending_approvals(session.id))
    agent.agent_decide_approval(session.id, pending[0].approval_id, outcome="allowed")
    wait_done(session)
    seq = of_type(session, "request/sent")[0].seq

    # The replay asks for the same write and waits for approval in its own process.
    process = child("replay", str(session.id), str(seq))
    wait_for(lambda: len(of_type(session, "approval/asked")) == 2)
    assert agent.agent_turn_status(session.id) == "running"
    process.send_signal(signal.SIGKILL)
    process.wait(10)
    wait_for(lambda: agent.agent_turn_status(session.id) == "interrupted")

    before = session_last_seq(session)
    call_command("recover", str(session.id))
    assert "closed turn 2" in capsys.readouterr().out
    closers = events(session, before)
    assert [e.type for e in closers] == ["tool/result", "step/end", "turn/end"]
    assert closers[0].data["error_code"] == "TOOL_NOT_STARTED"
    assert closers[-1].data == {"turn": 2, "reason": "interrupted"}
    assert of_type(session, "turn/start")[-1].data["trigger"] == "replay"
    assert verified(session) is None
    assert assert_requests_match(session) == 3
    call_command("verify", str(session.id))


def verified(session: Session) -> str | None:
    """`verify` of the session as stored now: None when every projection and hash holds."""
    session.refresh_from_db()
    return verify_session(session)


def session_last_seq(session: Session) -> int:
    session.refresh_from_db(fields=["last_seq"])
    return session.last_seq
