"""The OpenAI-compatible and Anthropic providers through the official SDKs, against local
servers that speak their streaming wire protocols."""

from __future__ import annotations

import json
import time

import pytest

from projections.payload import payload_sha256
from projections.request import project_request
from runtime import Delta
from sessions_app import agent, store
from tests.runtime.conftest import assert_requests_match, types_after, wait_done
from tests.runtime.servers import (
    Failure,
    ScriptedServer,
    Stream,
    an_block,
    an_delta,
    an_end,
    an_start,
    an_stop_block,
    an_text,
    oa_chunk,
    oa_text,
    oa_tool_call,
    oa_usage,
)

pytestmark = pytest.mark.django_db(transaction=True)

PRICING = {"input": 1.0, "output": 2.0, "cacheRead": 0.5, "cacheWrite": 0.0}


@pytest.fixture
def server_session(make_session, monkeypatch):
    monkeypatch.setenv("STRAND_TEST_KEY", "sk-test")
    servers: list[ScriptedServer] = []

    def make(kind: str, **preset):
        server = ScriptedServer(kind)
        servers.append(server)
        session = make_session(
            provider=kind,
            model="test-model" if kind == "openai" else "claude-test",
            base_url=server.base_url,
            api_key_env="STRAND_TEST_KEY",
            max_retries=0,
            pricing=PRICING,
            **preset,
        )
        return server, session

    yield make
    for server in servers:
        server.close()


def messages_of(session, role):
    return [
        e.data["message"]
        for e in store.entries_of(session.id)
        if e.type == "message" and e.data["message"]["role"] == role
    ]


def sent_bodies_match(session, server) -> None:
    """What the server received is exactly the payload rebuilt from the stored facts."""
    events = store.events_after(session.id, -1, 10_000)
    entries = store.entries_of(session.id)
    sent = [e for e in events if e.type == "request/sent"]
    main_requests = [r for r in server.requests if r.get("tools")]
    assert len(main_requests) == len(sent)
    for event, body in zip(sent, main_requests, strict=True):
        view = project_request(events, entries, event.seq)
        assert view.matches
        assert payload_sha256(body) == view.recorded_sha256


# --- OpenAI-compatible --------------------------------------------------------------------


def test_openai_text_streams_with_usage_and_cost(server_session):
    server, session = server_session("openai")
    server.script(oa_text("Hel", "lo ", "there."))
    deltas: list[Delta] = []
    ended = agent.agent_run_foreground(session.id, "hi", on_delta=deltas.append)
    assert [e.reason for e in ended] == ["completed"]
    assert "".join(d.text for d in deltas) == "Hello there."
    [reply] = messages_of(session, "assistant")
    assert reply["content"] == [{"type": "text", "text": "Hello there."}]
    assert reply["api"] == "openai-completions" and reply["provider"] == "openai"
    assert reply["model"] == "test-model" and reply["stopReason"] == "stop"
    usage = reply["usage"]
    assert (usage["input"], usage["output"], usage["cacheRead"], usage["totalTokens"]) == (
        20,
        5,
        0,
        25,
    )
    assert usage["cost"]["total"] == pytest.approx((20 * 1.0 + 5 * 2.0) / 1e6)
    body = server.requests[0]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["messages"][-1] == {"role": "user", "content": [{"type": "text", "text": "hi"}]}
    sent_bodies_match(session, server)


def test_openai_parallel_tool_calls_split_across_chunks(server_session):
    server, session = server_session("openai")
    server.script(
        Stream(
            [
                oa_chunk({"role": "assistant", "content": None}),
                oa_tool_call(0, "call_a", "read_file", '{"pa'),
                oa_tool_call(0, None, None, 'th": "notes'),
                oa_tool_call(1, "call_b", "grep", ""),
                oa_tool_call(0, None, None, '.txt"}'),
                oa_tool_call(1, None, None, '{"pattern": "TODO"}'),
                oa_chunk(finish="tool_calls"),
                oa_usage(30, 12, cached=10),
            ]
        ),
        oa_text("Both done."),
    )
    ended = agent.agent_run_foreground(session.id, "look around")
    assert [e.reason for e in ended] == ["completed"]
    calls = [e for e in store.events_after(session.id) if e.type == "tool/call"]
    assert [(c.data["call_id"], c.data["tool"], c.data["arguments"]) for c in calls] == [
        ("call_a", "read_file", '{"path": "notes.txt"}'),
        ("call_b", "grep", '{"pattern": "TODO"}'),
    ]
    first = messages_of(session, "assistant")[0]
    assert first["stopReason"] == "toolUse"
    assert [b["arguments"] for b in first["content"]] == [
        {"path": "notes.txt"},
        {"pattern": "TODO"},
    ]
    assert first["usage"]["input"] == 20 and first["usage"]["cacheRead"] == 10
    results = messages_of(session, "toolResult")
    assert [r["toolCallId"] for r in results] == ["call_a", "call_b"]
    assert "hello world" in results[0]["content"][0]["text"]
    second = server.requests[1]["messages"]
    assert [m["role"] for m in second[-3:]] == ["assistant", "tool", "tool"]
    assert second[-2]["tool_call_id"] == "call_a"
    sent_bodies_match(session, server)


def test_openai_provider_error_ends_the_turn_with_its_message(server_session):
    server, session = server_session("openai")
    server.script(Failure(401, {"error": {"message": "bad api key", "type": "auth"}}))
    ended = agent.agent_run_foreground(session.id, "hi")
    assert ended[0].reason == "error" and "bad api key" in (ended[0].error or "")
    [reply] = messages_of(session, "assistant")
    assert reply["stopReason"] == "error" and "bad api key" in reply["errorMessage"]
    end = store.events_after(session.id)[-1]
    assert end.type == "turn/end" and end.data["reason"] == "error"
    assert assert_requests_match(session) == 1


def test_openai_context_overflow_compacts_and_retries_once(server_session):
    server, session = server_session("openai", keep_recent_tokens=1)
    server.script(oa_text("A first, long answer about plants and water."))
    assert agent.agent_run_foreground(session.id, "tell me about plants")[0].reason == "completed"
    overflow = {
        "error": {
            "message": "This model's maximum context length is 50 tokens.",
            "code": "context_length_exceeded",
        }
    }
    server.script(Failure(400, overflow), oa_text("## Goal\n- plants"), oa_text("Short answer."))
    ended = agent.agent_run_foreground(session.id, "and trees?")
    assert [e.reason for e in ended] == ["completed"]
    turn2 = [e for e in store.events_after(session.id) if e.turn == 2]
    assert [e.type for e in turn2] == [
        "turn/start",
        "user/message",
        "step/start",
        "request/sent",
        "assistant/message",
        "entry/compaction",
        "step/end",
        "step/start",
        "request/sent",
        "assistant/message",
        "step/end",
        "turn/end",
    ]
    assert turn2[6].data["reason"] == "error"
    compaction = turn2[5].data["entry"]
    # The kept window starts at the new question; the first exchange is summarized.
    assert compaction["firstKeptEntryId"] == turn2[1].entry_id
    assert compaction["summary"].startswith("## Goal")
    summary_request = server.requests[2]
    assert "tools" not in summary_request
    assert "<conversation>" in summary_request["messages"][-1]["content"][0]["text"]
    retry = server.requests[3]["messages"]
    assert "condensed" in retry[1]["content"][0]["text"]
    assert assert_requests_match(session) == 3


def test_openai_stream_cancelled_midway_keeps_the_text(server_session):
    server, session = server_session("openai")
    pieces = [oa_chunk({"role": "assistant", "content": ""})]
    pieces += [oa_chunk({"content": f"word{i} "}) for i in range(40)]
    server.script(Stream(pieces, delay=0.05, hang=True))
    seen: list[object] = []
    sent = agent.agent_send_message(session.id, "talk")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not seen:
        seen = [e for e in store.events_after(session.id) if e.type == "request/sent"]
        time.sleep(0.05)
    time.sleep(0.4)
    assert agent.agent_cancel(session.id)
    ended = wait_done(session)
    assert [(e.turn, e.reason) for e in ended] == [(sent.turn, "aborted")]
    [reply] = messages_of(session, "assistant")
    assert reply["stopReason"] == "aborted"
    assert reply["content"][0]["text"].startswith("word0 word1")
    assert types_after(session)[-3:] == ["assistant/message", "step/end", "turn/end"]


# --- Anthropic ---------------------------------------------------------------------------


def test_anthropic_text_with_usage(server_session):
    server, session = server_session("anthropic")
    server.script(an_text("Bonjour", " !", input_tokens=40, output_tokens=7))
    ended = agent.agent_run_foreground(session.id, "salut")
    assert ended[0].reason == "completed"
    [reply] = messages_of(session, "assistant")
    assert reply["content"] == [{"type": "text", "text": "Bonjour !"}]
    assert reply["api"] == "anthropic-messages" and reply["stopReason"] == "stop"
    assert (reply["usage"]["input"], reply["usage"]["output"]) == (40, 7)
    assert server.paths == ["/v1/messages"]
    body = server.requests[0]
    assert body["max_tokens"] == 4096 and body["system"].startswith("You are a careful")
    assert body["tools"][0]["input_schema"]["type"] == "object"
    sent_bodies_match(session, server)


def test_anthropic_parallel_tool_use_split_across_deltas_and_thinking(server_session):
    server, session = server_session("anthropic")
    server.script(
        Stream(
            [
                an_start(50),
                an_block(0, {"type": "thinking", "thinking": "", "signature": ""}),
                an_delta(0, {"type": "thinking_delta", "thinking": "Let me look."}),
                an_delta(0, {"type": "signature_delta", "signature": "sig-1"}),
                an_stop_block(0),
                an_block(
                    1, {"type": "tool_use", "id": "toolu_1", "name": "list_files", "input": {}}
                ),
                an_delta(1, {"type": "input_json_delta", "partial_json": ""}),
                an_stop_block(1),
                an_block(
                    2, {"type": "tool_use", "id": "toolu_2", "name": "read_file", "input": {}}
                ),
                an_delta(2, {"type": "input_json_delta", "partial_json": '{"path": "src/'}),
                an_delta(2, {"type": "input_json_delta", "partial_json": 'app.py"}'}),
                an_stop_block(2),
                *an_end("tool_use", 30),
            ]
        ),
        an_text("All read."),
    )
    ended = agent.agent_run_foreground(session.id, "inspect")
    assert ended[0].reason == "completed"
    first = messages_of(session, "assistant")[0]
    assert first["content"][0] == {
        "type": "thinking",
        "thinking": "Let me look.",
        "thinkingSignature": "sig-1",
    }
    assert [b["name"] for b in first["content"][1:]] == ["list_files", "read_file"]
    assert first["content"][2]["arguments"] == {"path": "src/app.py"}
    assert first["stopReason"] == "toolUse" and first["usage"]["output"] == 30
    results = messages_of(session, "toolResult")
    assert "notes.txt" in results[0]["content"][0]["text"]
    assert "print('hi')" in results[1]["content"][0]["text"]
    second = server.requests[1]["messages"]
    assert second[-2]["content"][0] == {
        "type": "thinking",
        "thinking": "Let me look.",
        "signature": "sig-1",
    }
    assert [b["type"] for b in second[-1]["content"]] == ["tool_result", "tool_result"]
    sent_bodies_match(session, server)


def test_anthropic_error_event_and_overflow(server_session):
    server, session = server_session("anthropic", keep_recent_tokens=1)
    server.script(
        Failure(500, {"type": "error", "error": {"type": "api_error", "message": "boom"}})
    )
    ended = agent.agent_run_foreground(session.id, "first")
    assert ended[0].reason == "error" and "boom" in (ended[0].error or "")
    server.script(an_text("A long answer about the first question, with details."))
    assert agent.agent_run_foreground(session.id, "again")[0].reason == "completed"
    too_long = {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "prompt is too long: 300000 tokens > 200000 maximum",
        },
    }
    server.script(Failure(400, too_long), an_text("## Goal\n- summary"), an_text("ok"))
    ended = agent.agent_run_foreground(session.id, "second")
    assert ended[0].reason == "completed", (
        ended,
        [(e.type, dict(e.data)) for e in store.events_after(session.id, 20)],
    )
    types = [e.type for e in store.events_after(session.id) if e.turn == 3]
    assert types.count("entry/compaction") == 1 and types.count("request/sent") == 2
    assert assert_requests_match(session) == 4


def test_arguments_json_from_the_model_is_kept_raw(server_session):
    server, session = server_session("openai")
    raw = '{"path":"notes.txt",  "limit": 1}'
    server.script(
        Stream(
            [oa_tool_call(0, "c1", "read_file", raw), oa_chunk(finish="tool_calls"), oa_usage(5, 5)]
        ),
        oa_text("ok"),
    )
    agent.agent_run_foreground(session.id, "read one line")
    [call] = [e for e in store.events_after(session.id) if e.type == "tool/call"]
    assert call.data["arguments"] == raw
    [result] = messages_of(session, "toolResult")
    assert json.loads(json.dumps(result))["content"][0]["text"].startswith("hello world")
    sent_bodies_match(session, server)
