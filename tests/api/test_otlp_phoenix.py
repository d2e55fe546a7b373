"""Strand's OTLP export read back from a real tracing backend, Arize Phoenix (its REST API
lists the spans it received): the projector's live push of a session with tools, faults, a
compaction and a replay gives the same turns, requests, tool calls, token counts and
timings; the file export sent again changes nothing; a collector down for a while receives
everything once when it comes back."""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from projections import otel_genai as g
from projections.chat import Usage
from sessions_app.models import Session
from sessions_app.projectors import otlp, project_pending, projector_lag
from sessions_app.projectors.otlp import OtlpProjector
from tests.api.conftest import Api, content_of, wait_for, wait_idle
from tests.api.test_otlp_export import events_of, rich_session, spans_of
from tests.phoenix import Forwarder, Phoenix, phoenix_server

pytestmark = pytest.mark.django_db(transaction=True)

__all__ = ["phoenix_server"]  # the module's fixture, shared by its tests


@pytest.fixture(autouse=True)
def _fresh_backoff(settings: Any) -> None:
    settings.STRAND_OTLP_BACKOFF_S = 0.05
    settings.STRAND_OTLP_BACKOFF_MAX_S = 0.2
    otlp.backoff.succeeded()


def received(phoenix: Phoenix, session: Session, count: int) -> list[dict[str, Any]]:
    """The session's spans once Phoenix holds `count` of them (it ingests in the background),
    and a moment later still only those."""
    found = wait_for(lambda: len(spans := phoenix.spans(str(session.id))) >= count and spans, 60)
    time.sleep(0.5)
    again = phoenix.spans(str(session.id))
    assert len(again) == len(found) == count
    return again


def nanos(iso: str) -> int:
    return g.unix_nanos(datetime.fromisoformat(iso))


def test_phoenix_holds_the_pushed_sessions_each_span_once(
    phoenix_server: Phoenix,
    settings: Any,
    as_alice: Api,
    alice: Any,
    workspace: Path,
    serve_preset: Any,
) -> None:
    """One test, so that a run of the suite on several workers starts one Phoenix."""
    the_pushed_spans_read_back_hold_the_session(
        phoenix_server, settings, as_alice, alice, workspace, serve_preset
    )
    otlp.backoff.succeeded()
    a_collector_down_for_a_while_receives_everything_once_when_back(
        phoenix_server, settings, as_alice, alice, workspace
    )


def the_pushed_spans_read_back_hold_the_session(
    phoenix_server: Phoenix,
    settings: Any,
    as_alice: Api,
    alice: Any,
    workspace: Path,
    serve_preset: Any,
) -> None:
    settings.STRAND_OTLP_ENDPOINT = phoenix_server.traces_url
    session = rich_session(as_alice, alice, workspace, serve_preset)
    events = events_of(session)
    assert project_pending([OtlpProjector()]) == len(events)
    assert projector_lag(otlp.NAME).events == 0

    exported = spans_of(
        json.loads(content_of(as_alice.get(f"/sessions/{session.id}/export.otlp.json")))
    )
    spans = received(phoenix_server, session, len(exported))
    # The same spans as the file: ids, parents, names, times.
    assert {
        (s["context"]["span_id"], s["parent_id"], s["name"], nanos(s["start_time"])) for s in spans
    } == {
        (s["spanId"], s.get("parentSpanId"), s["name"], int(s["startTimeUnixNano"]))
        for s in exported
    }

    def operation(name: str) -> list[dict[str, Any]]:
        return [s for s in spans if s["attributes"]["gen_ai.operation.name"] == name]

    # Turns: one agent span each, the root of a trace of its own.
    turns = operation(g.OP_INVOKE_AGENT)
    starts = [e for e in events if e.type == "turn/start"]
    ends = {e.turn: e for e in events if e.type == "turn/end"}
    assert sorted(t["attributes"]["strand.turn"] for t in turns) == [e.turn for e in starts]
    for turn in turns:
        number = turn["attributes"]["strand.turn"]
        start = next(e for e in starts if e.turn == number)
        assert turn["span_kind"] == "AGENT" and turn["parent_id"] is None
        assert nanos(turn["start_time"]) == g.unix_nanos(start.time)
        assert nanos(turn["end_time"]) == g.unix_nanos(ends[number].time)
    # Turn 3's reply failed for good; the replay (turn 5) says what it replays.
    by_turn = {t["attributes"]["strand.turn"]: t for t in turns}
    assert by_turn[3]["status_code"] == "ERROR"
    first_request = min(e.seq for e in events if e.type == "request/sent")
    assert by_turn[5]["attributes"][g.STRAND_REPLAY_OF] == first_request

    # Requests: one LLM span per request/sent, with the reply's tokens and times.
    chats = operation(g.OP_CHAT)
    sent = {e.seq: e for e in events if e.type == "request/sent"}
    assert sorted(c["attributes"][g.STRAND_SEQ] for c in chats) == sorted(sent)
    replies = {e.entry_id: e for e in events if e.type == "assistant/message"}
    for chat in chats:
        attrs = chat["attributes"]
        assert chat["span_kind"] == "LLM"
        assert nanos(chat["start_time"]) == g.unix_nanos(sent[attrs[g.STRAND_SEQ]].time)
        reply = replies.get(attrs.get(g.STRAND_RESPONSE_ENTRY))
        if reply is None:
            assert chat["status_code"] == "ERROR"  # the attempt that was tried again
            assert attrs[g.ERROR_TYPE] == "server_error"
            continue
        message = reply.data["entry"]["message"]
        usage = Usage.from_message(message)
        assert usage is not None
        assert nanos(chat["end_time"]) == g.unix_nanos(reply.time)
        assert attrs[g.GEN_AI_USAGE_OUTPUT_TOKENS] == usage.output
        assert attrs[g.GEN_AI_USAGE_INPUT_TOKENS] == usage.input + usage.cache_read
        # Phoenix read the conventions' counts into its own.
        assert attrs["llm.token_count.completion"] == usage.output
        assert attrs["llm.token_count.prompt"] == usage.input + usage.cache_read
        assert chat["status_code"] == ("ERROR" if message["stopReason"] == "error" else "OK")
    compacted = [c for c in chats if c["attributes"].get(g.STRAND_CONTEXT_COMPACTED)]
    compaction = next(e for e in events if e.type == "entry/compaction")
    assert [c["attributes"][g.STRAND_CONTEXT_COMPACTION] for c in compacted] == [
        compaction.entry_id
    ]
    # The exact input went too; Phoenix shows its messages.
    first = next(c for c in chats if c["attributes"][g.STRAND_SEQ] == first_request)
    assert json.loads(first["attributes"][g.GEN_AI_INPUT_MESSAGES])[0]["parts"][0] == {
        "type": "text",
        "content": "read notes.txt",
    }

    # Tool calls: one span per call, its id, arguments and result, timed by the log.
    tools = operation(g.OP_EXECUTE_TOOL)
    calls = {e.seq: e for e in events if e.type == "tool/call"}
    assert sorted(t["attributes"][g.STRAND_SEQ] for t in tools) == sorted(calls)
    for tool in tools:
        call = calls[tool["attributes"][g.STRAND_SEQ]]
        result = next(
            e
            for e in events
            if e.type == "tool/result"
            and e.turn == call.turn
            and e.data["entry"]["message"]["toolCallId"] == call.data["call_id"]
        )
        assert tool["attributes"][g.GEN_AI_TOOL_CALL_ID] == call.data["call_id"]
        assert tool["name"] == f"execute_tool {call.data['tool']}"
        assert nanos(tool["start_time"]) == g.unix_nanos(call.time)
        assert nanos(tool["end_time"]) == g.unix_nanos(result.time)
        assert tool["attributes"][g.GEN_AI_TOOL_CALL_RESULT] == "hello world\n"

    # The file export sent to Phoenix as well: the same ids, so nothing is added.
    document = json.loads(content_of(as_alice.get(f"/sessions/{session.id}/export.otlp.json")))
    for body in otlp.bodies(spans_of(document)):
        otlp._post(body)
    received(phoenix_server, session, len(exported))


def a_collector_down_for_a_while_receives_everything_once_when_back(
    phoenix_server: Phoenix, settings: Any, as_alice: Api, alice: Any, workspace: Path
) -> None:
    from sessions_app import services
    from tests.api.conftest import OFFLINE_PRESET

    collector = Forwarder(int(phoenix_server.url.rsplit(":", 1)[1]))
    settings.STRAND_OTLP_ENDPOINT = f"{collector.url}/v1/traces"
    session = services.session_create(
        owner=alice, title="down", cwd=str(workspace), preset=OFFLINE_PRESET
    )
    for text in ("read notes.txt", "list files"):
        assert as_alice.post(f"/sessions/{session.id}/messages", {"text": text}).status_code == 202
        wait_idle(session)
    pending = len(events_of(session))

    # Down: the push fails, nothing is marked sent, and the projector waits before trying again.
    assert project_pending([OtlpProjector()]) == 0
    assert projector_lag(otlp.NAME).events == pending
    assert otlp.backoff.failures == 1 and not OtlpProjector().ready()
    assert project_pending([OtlpProjector()]) == 0 and otlp.backoff.failures == 1  # waiting
    wait_for(OtlpProjector().ready)
    assert project_pending([OtlpProjector()]) == 0 and otlp.backoff.failures == 2
    assert phoenix_server.spans(str(session.id)) == []

    # Back: everything goes, once; nothing is left to send.
    collector.open()
    try:
        wait_for(OtlpProjector().ready)
        assert project_pending([OtlpProjector()]) == pending
        assert otlp.backoff.failures == 0 and projector_lag(otlp.NAME).events == 0
        exported = spans_of(
            json.loads(content_of(as_alice.get(f"/sessions/{session.id}/export.otlp.json")))
        )
        assert len(exported) == 2 + 4 + 2  # two turns, four requests, two tool calls
        spans = received(phoenix_server, session, len(exported))
        assert sorted(s["context"]["span_id"] for s in spans) == sorted(
            s["spanId"] for s in exported
        )
        assert project_pending([OtlpProjector()]) == 0
    finally:
        collector.close()
