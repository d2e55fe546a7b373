"""The offline model end to end, through the same agent services the UI and API use,
against Postgres."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from channels.layers import get_channel_layer
from django.db import connections

from projections.context import build_session_context, to_provider_messages
from projections.records import EventRecord
from projections.trace import project_trace
from sessions_app import agent, store
from sessions_app.models import Session
from sessions_app.services.pi_io import pi_export_lines
from tests.runtime.conftest import OFFLINE, assert_requests_match, types_after, wait_done

pytestmark = pytest.mark.django_db(transaction=True)

PI_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "pi"


def events(session: Session, after: int = -1) -> list[EventRecord]:
    return store.events_after(session.id, after, 10_000)


def wait_for(condition: Callable[[], Any], timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError("timed out waiting")


def of_type(session: Session, kind: str) -> list[EventRecord]:
    return [e for e in events(session) if e.type == kind]


def message(event: EventRecord) -> dict[str, Any]:
    return event.data["entry"]["message"]


def test_a_message_runs_a_turn_with_parallel_tools(make_session):
    session = make_session()
    sent = agent.agent_send_message(session.id, "read notes.txt and search for TODO")
    assert sent.turn == 1 and sent.inbox_id is None
    ended = wait_done(session)
    assert [(e.turn, e.reason) for e in ended] == [(1, "completed")]
    assert types_after(session) == [
        "turn/start",
        "workspace/snapshot",  # the files the folder held before the first turn
        "user/message",
        "step/start",
        "request/header",
        "request/sent",
        "assistant/message",
        "tool/call",
        "tool/call",
        "tool/result",
        "tool/result",
        "step/end",
        "step/start",
        "request/sent",
        "assistant/message",
        "step/end",
        "turn/end",
    ]
    all_events = events(session)
    header, sent_event = all_events[5], all_events[6]
    assert header.data["reason"] == "initial"
    assert sent_event.data["header_seq"] == header.seq
    assert sent_event.data["leaf_entry_id"] == all_events[3].entry_id
    assert all_events[2].data["reason"] == "outside" and "notes.txt" in all_events[2].data["files"]
    calls = of_type(session, "tool/call")
    results = of_type(session, "tool/result")
    # Recorded in the model's order, each result under the previous one in the tree.
    assert [c.data["tool"] for c in calls] == ["read_file", "grep"]
    assert [message(r)["toolCallId"] for r in results] == [c.data["call_id"] for c in calls]
    assert results[1].data["entry"]["parentId"] == results[0].entry_id
    assert "TODO: water the plants" in message(results[1])["content"][0]["text"]
    for reply in of_type(session, "assistant/message"):
        usage = message(reply)["usage"]
        assert set(usage) == {"input", "output", "cacheRead", "cacheWrite", "totalTokens", "cost"}
        assert usage["input"] > 0 and usage["totalTokens"] == usage["input"] + usage["output"]
        assert set(usage["cost"]) == {"input", "output", "cacheRead", "cacheWrite", "total"}
        assert set(reply.data["timing"]) == {"ttft_ms", "duration_ms"}
    assert assert_requests_match(session) == 2
    # The trace reads the same facts: one turn, two steps, timed requests and tools.
    [turn] = project_trace(events(session)).spans
    steps = [s for s in turn.children if s.kind == "step"]
    assert (turn.status, [s.status for s in steps]) == ("ok", ["ok", "ok"])
    assert [c.kind for c in turn.children if c.kind != "step"] == ["input"]
    request, *tools = steps[0].children
    assert request.kind == "request" and request.ttft_ms is not None and request.usage
    assert [(t.name, t.status) for t in tools] == [("read_file", "ok"), ("grep", "ok")]


def test_the_header_is_written_only_when_it_changes(make_session, serve_preset):
    session = make_session()
    agent.agent_send_message(session.id, "hello")
    wait_done(session)
    agent.agent_send_message(session.id, "hello again")
    wait_done(session)
    assert [h.data["reason"] for h in of_type(session, "request/header")] == ["initial"]
    # The operator changes the preset the session names: its next turn runs with it.
    serve_preset(session.preset["name"], **{**OFFLINE, "system_prompt": "Answer in French."})
    agent.agent_send_message(session.id, "bonjour")
    wait_done(session)
    headers = of_type(session, "request/header")
    assert [h.data["reason"] for h in headers] == ["initial", "change"]
    assert headers[1].data["system_prompt"].startswith("Answer in French.")
    assert of_type(session, "request/sent")[-1].data["header_seq"] == headers[1].seq
    assert assert_requests_match(session) == 3


def test_a_second_message_while_a_turn_runs_is_refused(make_session):
    session = make_session()
    agent.agent_send_message(session.id, "write out.txt: hello")
    wait_for(lambda: agent.agent_pending_approvals(session.id))
    with pytest.raises(agent.TurnRunning) as info:
        agent.agent_send_message(session.id, "another thing")
    assert "a turn is running" in str(info.value)
    assert agent.agent_turn_status(session.id) == "running"
    agent.agent_cancel(session.id)
    assert [e.reason for e in wait_done(session)] == ["aborted"]
    assert agent.agent_turn_status(session.id) == "idle"


def test_approval_allowed_writes_the_file(make_session, workspace):
    session = make_session()
    agent.agent_send_message(session.id, "write out.txt: hello there")
    [pending] = wait_for(lambda: agent.agent_pending_approvals(session.id))
    assert pending.tool == "write_file" and json.loads(pending.arguments)["path"] == "out.txt"
    assert not (workspace / "out.txt").exists()
    agent.agent_decide_approval(session.id, pending.approval_id, outcome="allowed", by="alice")
    assert [e.reason for e in wait_done(session)] == ["completed"]
    assert (workspace / "out.txt").read_text() == "hello there"
    assert agent.agent_pending_approvals(session.id) == []
    [decided] = of_type(session, "approval/decided")
    assert decided.data == {"approval_id": pending.approval_id, "outcome": "allowed", "by": "alice"}
    types = types_after(session)
    asked = types.index("approval/asked")
    assert types[asked : asked + 4] == [
        "approval/asked",
        "approval/decided",
        "tool/call",
        "tool/result",
    ]
    with pytest.raises(agent.ApprovalNotPending, match="not pending"):
        agent.agent_decide_approval(session.id, pending.approval_id, outcome="rejected")
    assert assert_requests_match(session) == 2


def test_approval_rejected_becomes_an_error_result(make_session, workspace):
    session = make_session()
    agent.agent_send_message(session.id, "write out.txt: nope")
    [pending] = wait_for(lambda: agent.agent_pending_approvals(session.id))
    agent.agent_decide_approval(session.id, pending.approval_id, outcome="rejected")
    assert [e.reason for e in wait_done(session)] == ["completed"]
    assert not (workspace / "out.txt").exists()
    [result] = of_type(session, "tool/result")
    assert result.data["error_code"] == "APPROVAL_REJECTED"
    assert message(result)["isError"] is True
    assert len(of_type(session, "tool/call")) == 1
    assert assert_requests_match(session) == 2


def test_cancel_mid_stream_keeps_the_streamed_text(make_session, monkeypatch):
    monkeypatch.setenv("STRAND_OFFLINE_CHUNK_DELAY_MS", "25")
    session = make_session()
    agent.agent_send_message(session.id, "tell me a story")
    wait_for(lambda: of_type(session, "request/sent"))
    time.sleep(0.3)
    assert agent.agent_cancel(session.id) is True
    assert [e.reason for e in wait_done(session)] == ["aborted"]
    [reply] = of_type(session, "assistant/message")
    text = message(reply)["content"][0]["text"]
    assert message(reply)["stopReason"] == "aborted"
    assert text.startswith("You said:") and len(text) < 300
    assert types_after(session)[-3:] == ["assistant/message", "step/end", "turn/end"]
    assert of_type(session, "step/end")[0].data["reason"] == "aborted"
    assert assert_requests_match(session) == 1


def test_cancel_mid_tool_gives_aborted_results(make_session, monkeypatch):
    monkeypatch.setenv("STRAND_TOOL_DELAY_MS", "5000")
    session = make_session()
    started = time.monotonic()
    agent.agent_send_message(session.id, "read notes.txt and list files")
    wait_for(lambda: len(of_type(session, "tool/call")) == 2)
    agent.agent_cancel(session.id)
    assert [e.reason for e in wait_done(session)] == ["aborted"]
    assert time.monotonic() - started < 4
    results = of_type(session, "tool/result")
    assert [r.data["error_code"] for r in results] == ["ABORTED", "ABORTED"]
    assert all(message(r)["isError"] for r in results)
    assert types_after(session)[-2:] == ["step/end", "turn/end"]
    # The history sent to a model later holds no call without its result.
    agent.agent_send_message(session.id, "ok")
    wait_done(session)
    assert assert_requests_match(session) == 2


def test_cancel_before_dispatch_answers_every_call(make_session):
    session = make_session()
    agent.agent_send_message(session.id, "read notes.txt\nwrite out.txt: hi")
    wait_for(lambda: agent.agent_pending_approvals(session.id))
    assert of_type(session, "tool/call") == []
    agent.agent_cancel(session.id)
    assert [e.reason for e in wait_done(session)] == ["aborted"]
    [decided] = of_type(session, "approval/decided")
    assert decided.data["outcome"] == "cancelled"
    tail = types_after(session)[-7:]
    assert tail == [
        "approval/decided",
        "tool/call",
        "tool/result",
        "tool/call",
        "tool/result",
        "step/end",
        "turn/end",
    ]
    codes = [r.data["error_code"] for r in of_type(session, "tool/result")]
    assert codes == ["ABORTED_BEFORE_DISPATCH", "ABORTED_BEFORE_DISPATCH"]
    assert agent.agent_pending_approvals(session.id) == []


def test_steer_is_delivered_after_the_next_step_start(make_session):
    session = make_session()
    agent.agent_send_message(session.id, "write out.txt: x")
    [pending] = wait_for(lambda: agent.agent_pending_approvals(session.id))
    queued = agent.agent_send_message(session.id, "also list files", mode="steer")
    assert queued.turn is None and queued.target == "next_step" and queued.inbox_id
    agent.agent_decide_approval(session.id, pending.approval_id, outcome="allowed")
    assert [e.reason for e in wait_done(session)] == ["completed"]
    types = types_after(session)
    step2 = types.index("step/start", types.index("step/end"))
    assert types[step2 : step2 + 4] == [
        "step/start",
        "inbox/claimed",
        "user/message",
        "request/sent",
    ]
    claimed = of_type(session, "inbox/claimed")[0]
    assert claimed.data["inbox_id"] == queued.inbox_id and claimed.step == 2
    steer = [e for e in of_type(session, "user/message") if e.step == 2][0]
    assert message(steer)["content"][0]["text"] == "also list files"
    assert "list_files" in [c.data["tool"] for c in of_type(session, "tool/call")]
    assert assert_requests_match(session) == 3


def test_follow_up_starts_the_next_turn(make_session):
    session = make_session()
    agent.agent_send_message(session.id, "write out.txt: x")
    [pending] = wait_for(lambda: agent.agent_pending_approvals(session.id))
    queued = agent.agent_send_message(session.id, "now read out.txt", mode="follow_up")
    assert queued.target == "next_turn"
    agent.agent_decide_approval(session.id, pending.approval_id, outcome="allowed")
    ended = wait_done(session)
    assert [(e.turn, e.reason) for e in ended] == [(1, "completed"), (2, "completed")]
    turn2 = [e for e in events(session) if e.turn == 2]
    assert [e.type for e in turn2[:3]] == ["turn/start", "inbox/claimed", "user/message"]
    assert turn2[0].data["trigger"] == "follow_up"
    read = [r for r in of_type(session, "tool/result") if r.turn == 2][0]
    assert message(read)["content"][0]["text"] == "x"
    assert assert_requests_match(session) == 4


def test_cancel_drops_queued_input(make_session):
    session = make_session()
    agent.agent_send_message(session.id, "write out.txt: x")
    wait_for(lambda: agent.agent_pending_approvals(session.id))
    steer = agent.agent_send_message(session.id, "steer me", mode="steer")
    follow = agent.agent_send_message(session.id, "then this", mode="follow_up")
    agent.agent_cancel(session.id)
    assert [e.reason for e in wait_done(session)] == ["aborted"]
    claims = of_type(session, "inbox/claimed")
    assert {c.data["inbox_id"]: c.data["outcome"] for c in claims} == {
        steer.inbox_id: "discarded",
        follow.inbox_id: "discarded",
    }
    assert types_after(session)[-1] == "turn/end"


def test_steer_or_follow_up_without_a_running_turn_starts_one(make_session):
    session = make_session()
    sent = agent.agent_send_message(session.id, "hello", mode="follow_up")
    assert sent.turn == 1
    wait_done(session)


def test_manual_compaction_keeps_tool_results_with_their_calls(make_session):
    session = make_session(keep_recent_tokens=40)
    for text in ("read notes.txt", "search for TODO", "list files", "read src/app.py"):
        agent.agent_send_message(session.id, text)
        wait_done(session)
    done = agent.agent_compact(session.id, instructions="keep file names")
    entries = {e.id: e for e in store.entries_of(session.id)}
    compaction = entries[done.entry_id]
    assert compaction.parent_id == session_leaf_before(session, done.entry_id)
    assert compaction.data["firstKeptEntryId"] == done.first_kept_entry_id
    assert compaction.data["summary"].startswith("## Goal")
    assert "<read-files>" in compaction.data["summary"]
    assert compaction.data["details"]["readFiles"] == ["notes.txt"]
    assert entries[done.first_kept_entry_id].data["message"]["role"] != "toolResult"
    assert_no_orphans(session)
    with pytest.raises(agent.NothingToCompact, match="already compacted"):
        agent.agent_compact(session.id)
    agent.agent_send_message(session.id, "what did we do?")
    wait_done(session)
    assert assert_requests_match(session) == 9


def session_leaf_before(session: Session, entry_id: str) -> str | None:
    [added] = [e for e in events(session) if e.entry_id == entry_id]
    previous = [e for e in events(session) if e.entry_id and e.seq < added.seq]
    return previous[-1].entry_id


def assert_no_orphans(session: Session) -> None:
    """The context of the current leaf: every tool result follows its call."""
    session.refresh_from_db()
    context = build_session_context(store.entries_of(session.id), session.leaf_entry_id)
    calls: set[str] = set()
    for msg in context.messages:
        if msg.get("role") == "assistant":
            calls |= {b["id"] for b in msg["content"] if b.get("type") == "toolCall"}
        if msg.get("role") == "toolResult":
            assert msg["toolCallId"] in calls, "a tool result without its call"
    results = sum(1 for m in context.messages if m.get("role") == "toolResult")
    sent = sum(1 for m in to_provider_messages(context.messages) if m.get("role") == "toolResult")
    assert results == sent


def test_automatic_compaction_when_the_context_outgrows_the_window(make_session):
    session = make_session(context_window=600, reserve_tokens=350, keep_recent_tokens=60)
    for text in ("read notes.txt and list files", "search for TODO", "read src/app.py", "hello"):
        agent.agent_send_message(session.id, text)
        assert [e.reason for e in wait_done(session)] == ["completed"]
    compactions = of_type(session, "entry/compaction")
    assert compactions, "the context never outgrew the window"
    first = compactions[0]
    assert first.turn is not None and first.step is not None
    before = [e.type for e in events(session) if e.seq < first.seq and e.turn == first.turn]
    assert before[-1] in ("step/start", "user/message")
    assert_no_orphans(session)
    assert assert_requests_match(session) == len(of_type(session, "assistant/message"))


def test_overflow_from_the_model_compacts_and_retries(make_session, workspace, serve_preset):
    (workspace / "big.txt").write_text("a line of a long file\n" * 200)
    settings = {"reserve_tokens": 100, "keep_recent_tokens": 10, "auto_compact": False}
    session = make_session(context_window=5000, **settings)
    agent.agent_send_message(session.id, "read big.txt")
    wait_done(session)
    # The model's window shrinks (say the preset moved to a smaller model): the next
    # request no longer fits, the model refuses it, and the turn compacts and retries.
    serve_preset(session.preset["name"], **{**OFFLINE, "context_window": 1200, **settings})
    agent.agent_send_message(session.id, "and now?")
    assert [e.reason for e in wait_done(session)] == ["completed"]
    turn2 = [e for e in events(session) if e.turn == 2]
    replies = [message(e) for e in turn2 if e.type == "assistant/message"]
    assert replies[0]["stopReason"] == "error"
    assert "prompt is too long" in replies[0]["errorMessage"]
    assert replies[-1]["stopReason"] == "stop"
    assert [e.type for e in turn2].count("entry/compaction") == 1
    assert [e.data["reason"] for e in turn2 if e.type == "step/end"] == ["error", "completed"]
    assert assert_requests_match(session) == 4


def test_navigate_with_a_branch_summary(make_session):
    session = make_session()
    agent.agent_send_message(session.id, "read notes.txt")
    wait_done(session)
    first_reply = of_type(session, "assistant/message")[-1].entry_id
    agent.agent_send_message(session.id, "search for plants")
    wait_done(session)
    second_user = of_type(session, "user/message")[-1]
    left_from = services_refresh(session).leaf_entry_id
    moved = agent.agent_navigate(session.id, first_reply, summarize=True, instructions="be short")
    assert moved.summary_entry_id is not None
    summary = {e.id: e for e in store.entries_of(session.id)}[moved.summary_entry_id]
    assert summary.type == "branch_summary"
    # fromId: the leaf the summarized path was left from, as Pi 1.6 records it.
    assert summary.parent_id == first_reply and summary.data["fromId"] == left_from
    assert left_from != first_reply
    assert summary.data["summary"].startswith("Before coming back here")
    assert "search for plants" in summary.data["summary"]
    session.refresh_from_db()
    assert session.leaf_entry_id == moved.summary_entry_id == moved.leaf_id
    assert types_after(session)[-2:] == ["leaf/moved", "entry/branch_summary"]
    # Going back to a user message puts the leaf on its parent and hands back its text.
    back = agent.agent_navigate(session.id, second_user.entry_id)
    assert back.editor_text == "search for plants" and back.summary_entry_id is None
    assert back.leaf_id == second_user.data["entry"]["parentId"]
    agent.agent_navigate(session.id, moved.summary_entry_id)
    agent.agent_send_message(session.id, "what happened elsewhere?")
    wait_done(session)
    last = of_type(session, "request/sent")[-1]
    assert last.data["leaf_entry_id"] != second_user.entry_id
    assert assert_requests_match(session) == 5


def test_navigate_to_the_root_with_a_summary(make_session):
    session = make_session()
    agent.agent_send_message(session.id, "hello")
    wait_done(session)
    root_user = of_type(session, "user/message")[0].entry_id
    left_from = services_refresh(session).leaf_entry_id
    moved = agent.agent_navigate(session.id, root_user, summarize=True)
    assert moved.summary_entry_id is not None
    summary = {e.id: e for e in store.entries_of(session.id)}[moved.summary_entry_id]
    assert summary.parent_id is None and summary.data["fromId"] == left_from


@pytest.fixture
def one_session(make_session: Callable[..., Session]) -> Session:
    return make_session()


@pytest.mark.asyncio
async def test_deltas_reach_the_session_group_on_the_channel_layer(one_session):
    from asgiref.sync import sync_to_async

    session = one_session
    layer = get_channel_layer()
    channel = await layer.new_channel()
    await layer.group_add(f"session.{session.id}", channel)
    await agent.aagent_send_message(session.id, "hello there")
    received = []
    while True:
        item = await asyncio.wait_for(layer.receive(channel), 10)
        received.append(item)
        if "".join(m["text"] for m in received).endswith("“run ls -la”."):
            break
    await agent.aagent_wait(session.id, 10)
    assert {m["type"] for m in received} == {"session.delta"}
    keys = {"type", "session_id", "turn", "step", "kind", "block", "text", "name"}
    assert set(received[0]) == keys
    assert received[0]["session_id"] == str(session.id) and received[0]["turn"] == 1
    try:
        reply = await sync_to_async(of_type)(session, "assistant/message")
    finally:
        await sync_to_async(connections.close_all)()  # the helper thread's connection
    assert "".join(m["text"] for m in received) == message(reply[0])["content"][0]["text"]


def test_entries_are_pi_v3_and_pi_reads_the_same_context(make_session, tmp_path):
    if not (PI_FIXTURES / "node_modules" / "@mariozechner" / "pi-coding-agent").exists():
        pytest.skip("Pi's package is not installed under tests/fixtures/pi")
    session = make_session(keep_recent_tokens=20)
    agent.agent_send_message(session.id, "read notes.txt and search for TODO")
    wait_done(session)
    agent.agent_send_message(session.id, "write out.txt: data")
    [pending] = wait_for(lambda: agent.agent_pending_approvals(session.id))
    agent.agent_decide_approval(session.id, pending.approval_id, outcome="rejected")
    wait_done(session)
    agent.agent_compact(session.id)
    first_reply = of_type(session, "assistant/message")[0].entry_id
    agent.agent_send_message(session.id, "hello")
    wait_done(session)
    agent.agent_navigate(session.id, first_reply, summarize=True)
    session = services_refresh(session)
    path = tmp_path / "session.jsonl"
    path.write_text(
        "".join(line if line.endswith("\n") else line + "\n" for line in pi_export_lines(session))
    )
    out = subprocess.run(
        [
            "node",
            str(Path(__file__).with_name("pi_check.mjs")),
            str(PI_FIXTURES),
            str(path),
            str(session.leaf_entry_id),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    pi = json.loads(out.stdout)
    assert pi["rewritten"] is False
    # The export carries the requests' prompt and tools as Pi 1.6 system messages; Pi 0.73.1
    # reads them as message entries of a role it passes along, and otherwise agrees.
    exported = [json.loads(line) for line in path.read_text().splitlines()[1:]]
    system = [e for e in exported if e["type"] == "message" and e["message"]["role"] == "system"]
    assert system and pi["entries"] == len(store.entries_of(session.id)) + len(system)
    ours = build_session_context(store.entries_of(session.id), session.leaf_entry_id).to_pi()
    messages = [m for m in pi["context"]["messages"] if m["role"] != "system"]
    assert {**pi["context"], "messages": messages} == json.loads(json.dumps(ours))
    roles = [m["role"] for m in messages]
    assert "branchSummary" in roles and "compactionSummary" not in roles[1:]


def services_refresh(session: Session) -> Session:
    session.refresh_from_db()
    return session


def test_unknown_session_and_bad_input_are_refused(make_session):
    session = make_session()
    with pytest.raises(agent.AgentError, match="must not be empty"):
        agent.agent_send_message(session.id, "   ")
    with pytest.raises(agent.AgentError, match="mode must be"):
        agent.agent_send_message(session.id, "x", mode="shout")
    with pytest.raises(agent.NotFound, match="no session"):
        agent.agent_send_message("00000000-0000-0000-0000-000000000000", "x")
    assert types_after(session) == []
