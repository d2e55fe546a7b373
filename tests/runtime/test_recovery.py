"""Turns run by other processes: SIGKILL and crash recovery, the turn lock across processes,
approvals and cancellation that reach a run in another process."""

from __future__ import annotations

import io
import signal
import subprocess
from typing import Any

import pytest
from django.core.management import call_command

from projections.chat import AssistantItem, project_chat
from projections.trace import project_trace
from sessions_app import agent, store
from sessions_app.models import Session
from sessions_app.store import NewEvent
from tests.runtime.conftest import assert_requests_match, wait_done, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def events(session: Session, after: int = -1) -> list[Any]:
    return store.events_after(session.id, after, 10_000)


def of_type(session: Session, kind: str) -> list[Any]:
    return [e for e in events(session) if e.type == kind]


def kill(process: subprocess.Popen[str], session: Session) -> None:
    process.send_signal(signal.SIGKILL)
    process.wait(10)
    # Postgres drops the dead process's connections, and with them its turn lock.
    wait_for(lambda: agent.agent_turn_status(session.id) == "interrupted", 10)


def test_sigkill_mid_tool_then_recovery_writes_the_closers_exactly_once(make_session, child):
    session = make_session()
    process = child(
        "send", str(session.id), "read notes.txt and list files", STRAND_TOOL_DELAY_MS="60000"
    )
    wait_for(lambda: len(of_type(session, "tool/call")) == 2)
    # The turn's process is alive and holds the lock: nobody may close its turn.
    assert agent.agent_turn_status(session.id) == "running"
    before = session_last_seq(session)
    [report] = agent.agent_recover([session.id])
    assert report.status == "running"
    with pytest.raises(agent.TurnRunning):
        agent.agent_send_message(session.id, "hello?")
    assert session_last_seq(session) == before

    kill(process, session)
    assert session_last_seq(session) == before  # reading never writes
    [report] = agent.agent_recover([session.id])
    assert (report.status, report.turn, report.unknown, report.not_started) == ("closed", 1, 2, 0)
    closers = events(session, before)
    assert [e.type for e in closers] == ["tool/result", "tool/result", "step/end", "turn/end"]
    assert [e.data["error_code"] for e in closers[:2]] == ["TOOL_OUTCOME_UNKNOWN"] * 2
    calls = of_type(session, "tool/call")
    assert [e.data["entry"]["message"]["toolCallId"] for e in closers[:2]] == [
        c.data["call_id"] for c in calls
    ]
    assert all(e.data["entry"]["message"]["isError"] for e in closers[:2])
    assert closers[2].data == {"turn": 1, "step": 1, "reason": "interrupted"}
    assert closers[3].data == {"turn": 1, "reason": "interrupted"}

    # Once closed, there is nothing left to recover.
    assert [r.status for r in agent.agent_recover([session.id])] == ["nothing"]
    assert agent.agent_recover() == []
    assert len(events(session)) == before + 1 + 4

    trace = project_trace(events(session))
    assert trace.spans[0].status == "interrupted"
    chat = project_chat(store.entries_of(session.id), session_leaf(session), events(session))
    reply = chat.items[1]
    assert isinstance(reply, AssistantItem)
    assert [c.status for c in reply.tool_calls] == ["interrupted", "interrupted"]

    # The session goes on; its first request repeats the header for the new process.
    agent.agent_send_message(session.id, "what happened?")
    assert [e.reason for e in wait_done(session)] == ["completed"]
    assert [h.data["reason"] for h in of_type(session, "request/header")] == ["initial", "resume"]
    assert assert_requests_match(session) == 2


def test_sigkill_while_waiting_for_approval_leaves_calls_not_started(make_session, child, capsys):
    session = make_session()
    process = child("send", str(session.id), "read notes.txt\nwrite out.txt: hi")
    wait_for(lambda: of_type(session, "approval/asked"))
    kill(process, session)
    assert agent.agent_pending_approvals(session.id)  # still open, until recovery closes it
    before = session_last_seq(session)
    call_command("recover", str(session.id))
    out = capsys.readouterr().out
    assert "closed turn 1 (2 tool result(s) TOOL_NOT_STARTED, step 1 ended" in out
    closers = events(session, before)
    assert [e.type for e in closers] == ["tool/result", "tool/result", "step/end", "turn/end"]
    assert [e.data["error_code"] for e in closers[:2]] == ["TOOL_NOT_STARTED"] * 2
    assert agent.agent_pending_approvals(session.id) == []
    call_command("recover", str(session.id))
    assert "nothing to recover" in capsys.readouterr().out
    assert session_last_seq(session) == before + 4


def test_an_approval_decided_here_reaches_the_run_in_another_process(
    make_session, child, workspace
):
    session = make_session()
    process = child("send", str(session.id), "write out.txt: from afar")
    [pending] = wait_for(lambda: agent.agent_pending_approvals(session.id))
    agent.agent_decide_approval(session.id, pending.approval_id, outcome="allowed", by="alice")
    out, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    assert "waiting for approval of write_file" in err
    assert "On it: write_file(out.txt)." in out and "Here is what I found:" in out
    assert (workspace / "out.txt").read_text() == "from afar"
    assert assert_requests_match(session) == 2


def test_a_cancel_here_stops_the_turn_in_another_process(make_session, child):
    session = make_session()
    process = child("send", str(session.id), "write out.txt: never")
    wait_for(lambda: agent.agent_pending_approvals(session.id))
    assert agent.agent_cancel(session.id) is True
    out, err = process.communicate(timeout=30)
    assert process.returncode == 1
    assert err.strip().splitlines()[-1] == "CommandError: turn 1 ended aborted"
    assert events(session)[-1].type == "turn/end"
    assert events(session)[-1].data["reason"] == "aborted"
    assert agent.agent_turn_status(session.id) == "idle"


def session_last_seq(session: Session) -> int:
    session.refresh_from_db()
    return session.last_seq


def session_leaf(session: Session) -> str | None:
    session.refresh_from_db()
    return session.leaf_entry_id


def test_sigterm_stops_a_foreground_turn_cleanly(make_session, child):
    session = make_session()
    process = child("send", str(session.id), "write out.txt: later")
    wait_for(lambda: agent.agent_pending_approvals(session.id))
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=30)
    assert process.returncode == 1
    assert err.strip().splitlines()[-1] == "CommandError: turn 1 ended aborted"
    assert [e.type for e in events(session)][-2:] == ["step/end", "turn/end"]
    assert [r.status for r in agent.agent_recover([session.id])] == ["nothing"]


def test_recovery_closes_a_reply_of_more_calls_than_one_append_takes(make_session, settings):
    """A reply that asked for 1,500 tool calls, left open by a dead process: recovery closes
    every call, in appends the store takes, and the turn once."""
    session = make_session()
    calls = [
        {"type": "toolCall", "id": f"c{n}", "name": "read_file", "arguments": {"path": "x"}}
        for n in range(1_500)
    ]
    assistant = {"role": "assistant", "content": calls, "stopReason": "toolUse"}
    go = {"role": "user", "content": "read x, 1,500 times"}
    store.append_events(
        session.id,
        session.last_seq,
        [
            NewEvent("turn/start", {"turn": 1, "trigger": "message"}),
            NewEvent("user/message", {"entry": {"type": "message", "message": go}}),
            NewEvent("step/start", {"turn": 1, "step": 1}),
            NewEvent("assistant/message", {"entry": {"type": "message", "message": assistant}}),
        ],
    )
    assert len(calls) > settings.STRAND_MAX_BATCH
    out = io.StringIO()
    call_command("recover", str(session.id), stdout=out)
    events = store.events_after(session.id, -1, 10_000)
    results = [e for e in events if e.type == "tool/result"]
    assert {e.data["entry"]["message"]["toolCallId"] for e in results} == {c["id"] for c in calls}
    assert {e.data.get("error_code") for e in results} == {"TOOL_NOT_STARTED"}
    assert [e.data["reason"] for e in events if e.type == "turn/end"] == ["interrupted"]
