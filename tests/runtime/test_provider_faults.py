"""Provider faults are recorded as facts, for both wire protocols, through the official
SDKs against local servers: what streamed so far is kept, the reply says stopReason
"error" with a message a person can act on, the step and the turn end "error" unless a
retry succeeds, and every attempt is a request of its own that `verify` rebuilds."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from sessions_app import agent, services, store
from sessions_app.models import Session
from sessions_app.selectors.verify import verify_session
from tests.runtime.conftest import assert_requests_match
from tests.runtime.servers import (
    Failure,
    Raw,
    ScriptedServer,
    Stream,
    error_body,
    error_event,
    malformed_frame,
    plain_body,
    text_answer,
    text_prefix,
    tool_end,
    tool_prefix,
)

pytestmark = pytest.mark.django_db(transaction=True)

KINDS = ("openai", "anthropic")
KEY = "sk-test-secret-4242"


@pytest.fixture
def faulty(owner, workspace, serve_preset, monkeypatch) -> Iterator[Callable[..., Any]]:
    """(server, session) for a preset that talks to a local server of `kind`."""
    monkeypatch.setenv("STRAND_TEST_KEY", KEY)
    servers: list[ScriptedServer] = []

    def make(kind: str, **settings: Any) -> tuple[ScriptedServer, Session]:
        server = ScriptedServer(kind)
        servers.append(server)
        preset = {
            "provider": kind,
            "model": "test-model" if kind == "openai" else "claude-test",
            "system_prompt": "You are a careful assistant.",
            "tools": ["read_file", "list_files", "grep", "write_file"],
            "base_url": server.base_url,
            "api_key_env": "STRAND_TEST_KEY",
            "max_retries": 0,
            "retry_backoff_s": 0.01,
            **settings,
        }
        name = serve_preset(f"faulty-{kind}-{len(servers)}", **preset)
        session = services.session_create(owner=owner, title="t", cwd=str(workspace), preset=name)
        return server, session

    yield make
    for server in servers:
        server.close()


def turn_events(session: Session, turn: int) -> list[Any]:
    return [e for e in store.events_after(session.id, -1, 10_000) if e.turn == turn]


def replies(session: Session) -> list[Any]:
    return [e for e in store.events_after(session.id, -1, 10_000) if e.type == "assistant/message"]


def assert_recorded_as_failed(session: Session, *, attempts: int = 1) -> dict[str, Any]:
    """The one turn failed and says so everywhere; returns the failed reply's event data."""
    events = turn_events(session, 1)
    types = [e.type for e in events]
    assert types == [
        "turn/start",
        "user/message",
        "step/start",
        "request/header",
        *["request/sent"] * attempts,
        "assistant/message",
        "step/end",
        "turn/end",
    ], types
    reply = events[-3].data
    message = reply["entry"]["message"]
    assert message["stopReason"] == "error"
    assert message["errorMessage"] and reply["fault"]["attempts"] == attempts
    assert [b["type"] for b in message["content"]] in ([], ["text"])  # no tool call kept
    assert events[-2].data["reason"] == "error"
    assert events[-1].data["reason"] == "error"
    assert events[-1].data["error"] == message["errorMessage"]
    sent = [e.data for e in events if e.type == "request/sent"]
    assert [s["attempt"] for s in sent] == list(range(1, attempts + 1))
    assert assert_requests_match(session) == attempts
    assert verified(session) is None
    everything = json.dumps([e.data for e in store.events_after(session.id, -1, 10_000)])
    assert KEY not in everything
    return reply


def verified(session: Session) -> str | None:
    session.refresh_from_db()
    return verify_session(session)


def text_of(reply: dict[str, Any]) -> str:
    return "".join(b.get("text", "") for b in reply["entry"]["message"]["content"])


@dataclass(frozen=True)
class Case:
    """One fault: what the server sends, what kind is recorded, what text is kept."""

    name: str
    script: Callable[[str], list[Any]]
    kind: str
    kept: str = ""
    status: int | None = None
    settings: tuple[tuple[str, Any], ...] = ()
    only: str | None = None  # one protocol only


CASES = [
    Case(
        "cut mid-text",
        lambda k: [Stream(text_prefix(k, "Once ", "upon ", "a "), cut=True)],
        "cut",
        kept="Once upon a ",
    ),
    Case(
        "cut mid-text, broken transfer",
        lambda k: [Stream(text_prefix(k, "Once ", "upon "), cut=True, chunked=True)],
        "cut",
        kept="Once upon ",
    ),
    Case(
        "cut mid-tool-call",
        lambda k: [Stream(tool_prefix(k, '{"path": ', '"no'), cut=True)],
        "cut",
    ),
    Case(
        "stall",
        lambda k: [Stream(text_prefix(k, "Thinking "), hang=True)],
        "stall",
        kept="Thinking ",
        settings=(("request_timeout_s", 0.5),),
    ),
    Case(
        "429 without Retry-After",
        lambda k: [Failure(429, error_body(k, "Rate limit reached", "rate_limit_error"))],
        "rate_limited",
        status=429,
    ),
    Case(
        "429 with Retry-After",
        lambda k: [
            Failure(429, error_body(k, "Slow down", "rate_limit_error"), {"retry-after": "7"})
        ],
        "rate_limited",
        status=429,
    ),
    Case("500", lambda k: [Failure(500, error_body(k, "boom"))], "server_error", status=500),
    Case("502", lambda k: [Failure(502, error_body(k, "bad gateway"))], "server_error", status=502),
    Case("503", lambda k: [Failure(503, error_body(k, "unavailable"))], "server_error", status=503),
    Case(
        "529",
        lambda k: [Failure(529, error_body(k, "Overloaded", "overloaded_error"))],
        "overloaded",
        status=529,
        only="anthropic",
    ),
    Case(
        "an error event inside the stream",
        lambda k: [
            Stream(text_prefix(k, "Par") + [error_event(k, "Overloaded", "overloaded_error")])
        ],
        "overloaded",
        kept="Par",
    ),
    Case(
        "a malformed event",
        lambda k: [Stream([*text_prefix(k, "Here "), malformed_frame(k)])],
        "malformed",
        kept="Here ",
    ),
    Case(
        "a plain JSON body to a stream request",
        lambda k: [plain_body(k, "Hello from a proxy")],
        "not_a_stream",
    ),
    Case(
        "tool-call arguments that never become JSON",
        lambda k: [Stream([*tool_prefix(k, '{"path": ', "notes.txt}"), *tool_end(k)])],
        "invalid_tool_arguments",
    ),
    Case(
        "401",
        lambda k: [
            Failure(
                401,
                error_body(k, f"Incorrect API key provided: {KEY}.", "authentication_error"),
            )
        ],
        "auth",
        status=401,
    ),
    Case(
        "403",
        lambda k: [Failure(403, error_body(k, "Not allowed for this model", "permission_error"))],
        "auth",
        status=403,
    ),
    Case(
        "context length",
        lambda k: [
            Failure(
                400,
                error_body(
                    k, "prompt is too long: 300000 tokens > 200000", "invalid_request_error"
                ),
            )
        ],
        "context_length",
        status=400,
    ),
]

MATRIX = [
    pytest.param(kind, case, id=f"{kind}-{case.name}")
    for case in CASES
    for kind in KINDS
    if case.only in (None, kind)
]


@pytest.mark.parametrize("kind, case", MATRIX)
def test_fault_is_recorded_as_a_failed_reply(faulty, kind, case):
    server, session = faulty(kind, **dict(case.settings))
    server.script(*case.script(kind))
    ended = agent.agent_run_foreground(session.id, "tell me a story")
    assert [e.reason for e in ended] == ["error"]
    reply = assert_recorded_as_failed(session)
    fault = reply["fault"]
    assert fault["kind"] == case.kind
    assert fault.get("status") == case.status
    assert text_of(reply) == case.kept
    assert reply["entry"]["message"]["errorMessage"] == ended[0].error
    assert len(server.requests) == 1


def test_a_tool_call_cut_short_is_kept_in_the_fault_not_run(faulty):
    server, session = faulty("anthropic")
    server.script(Stream(tool_prefix("anthropic", '{"path": ', '"no'), cut=True))
    agent.agent_run_foreground(session.id, "read it")
    fault = assert_recorded_as_failed(session)["fault"]
    assert fault["tool_calls"] == [
        {"id": "toolu_1", "name": "read_file", "arguments": '{"path": "no'}
    ]
    assert not [e for e in store.events_after(session.id) if e.type.startswith("tool/")]


@pytest.mark.parametrize("kind", KINDS)
def test_401_names_the_preset_and_the_variable_never_the_key(faulty, kind):
    server, session = faulty(kind)
    body = error_body(kind, f"Incorrect API key provided: {KEY}.", "authentication_error")
    server.script(Failure(401, body))
    agent.agent_run_foreground(session.id, "hi")
    message = assert_recorded_as_failed(session)["entry"]["message"]["errorMessage"]
    assert "STRAND_TEST_KEY" in message and session.preset["name"] in message
    assert "HTTP 401" in message and KEY not in message


@pytest.mark.parametrize("kind", KINDS)
def test_a_retry_after_429_succeeds_and_each_attempt_is_recorded(faulty, kind):
    server, session = faulty(kind, max_retries=2)
    # OpenAI's SDKs read retry-after-ms; Retry-After in seconds is the HTTP standard.
    header = {"retry-after-ms": "80"} if kind == "openai" else {"retry-after": "1"}
    server.script(
        Failure(429, error_body(kind, "Rate limit reached", "rate_limit_error"), header),
        text_answer(kind, "Fine ", "now."),
    )
    ended = agent.agent_run_foreground(session.id, "hi")
    assert [e.reason for e in ended] == ["completed"]
    events = turn_events(session, 1)
    assert [e.type for e in events] == [
        "turn/start",
        "user/message",
        "step/start",
        "request/header",
        "request/sent",
        "request/sent",
        "assistant/message",
        "step/end",
        "turn/end",
    ]
    first, second = (e.data for e in events if e.type == "request/sent")
    assert first["attempt"] == 1 and first["previous_fault"] is None
    assert second["attempt"] == 2 and second["payload_sha256"] == first["payload_sha256"]
    fault = second["previous_fault"]
    assert (fault["kind"], fault["status"], fault["retryable"]) == ("rate_limited", 429, True)
    asked = 80 if kind == "openai" else 1000
    assert fault["retry_after_ms"] == asked and fault["waited_ms"] >= asked
    message = events[6].data["entry"]["message"]
    assert message["stopReason"] == "stop" and text_of(events[6].data) == "Fine now."
    assert server.requests[0] == server.requests[1]
    assert assert_requests_match(session) == 2
    assert verified(session) is None


@pytest.mark.parametrize("kind", KINDS)
def test_retries_stop_at_max_retries(faulty, kind):
    server, session = faulty(kind, max_retries=2)
    server.script(*[Failure(503, error_body(kind, "unavailable"))] * 3)
    ended = agent.agent_run_foreground(session.id, "hi")
    assert [e.reason for e in ended] == ["error"]
    reply = assert_recorded_as_failed(session, attempts=3)
    assert "All 3 attempts failed" in reply["entry"]["message"]["errorMessage"]
    sent = [e.data for e in turn_events(session, 1) if e.type == "request/sent"]
    assert [s["previous_fault"]["kind"] for s in sent[1:]] == ["server_error", "server_error"]
    assert len(server.requests) == 3


@pytest.mark.parametrize("kind", KINDS)
def test_a_cut_stream_is_retried_from_scratch(faulty, kind):
    server, session = faulty(kind, max_retries=1)
    server.script(
        Stream(text_prefix(kind, "Half ", "an "), cut=True), text_answer(kind, "A whole answer.")
    )
    ended = agent.agent_run_foreground(session.id, "hi")
    assert [e.reason for e in ended] == ["completed"]
    [reply] = replies(session)
    assert text_of(reply.data) == "A whole answer."
    second = [e.data for e in turn_events(session, 1) if e.type == "request/sent"][1]
    assert second["previous_fault"]["kind"] == "cut"
    assert second["previous_fault"]["received_chars"] == len("Half an ")


@pytest.mark.parametrize("kind", KINDS)
def test_an_unreachable_server_is_retried_then_recorded(faulty, kind):
    server, session = faulty(kind, max_retries=1)
    server.close()  # nothing listens on its port any more
    ended = agent.agent_run_foreground(session.id, "hi")
    assert [e.reason for e in ended] == ["error"]
    reply = assert_recorded_as_failed(session, attempts=2)
    assert reply["fault"]["kind"] == "connection"
    assert "could not reach" in reply["entry"]["message"]["errorMessage"]


def test_deterministic_faults_are_not_retried(faulty):
    server, session = faulty("openai", max_retries=3)
    server.script(Failure(400, error_body("openai", "unknown parameter: foo")))
    agent.agent_run_foreground(session.id, "hi")
    reply = assert_recorded_as_failed(session)
    assert reply["fault"]["kind"] == "bad_request" and len(server.requests) == 1


def test_a_retry_after_beyond_the_limit_is_not_waited_for(faulty):
    server, session = faulty("anthropic", max_retries=3, retry_max_wait_s=5)
    body = error_body("anthropic", "Rate limited", "rate_limit_error")
    server.script(Failure(429, body, {"retry-after": "120"}))
    agent.agent_run_foreground(session.id, "hi")
    reply = assert_recorded_as_failed(session)
    assert reply["fault"]["retry_after_ms"] == 120_000
    assert "retry_max_wait_s" in reply["entry"]["message"]["errorMessage"]
    assert len(server.requests) == 1


def test_cancel_while_waiting_to_retry_ends_the_turn_aborted(faulty):
    server, session = faulty("openai", max_retries=2, retry_backoff_s=30)
    server.script(Failure(503, error_body("openai", "unavailable")))
    agent.agent_send_message(session.id, "hi")
    deadline = time.monotonic() + 10
    while not server.requests and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.3)  # the answer (an immediate 503) is in; the run waits 30 s to retry
    assert agent.agent_cancel(session.id)
    ended = agent.agent_wait(session.id, 20)
    assert ended is not None and [e.reason for e in ended] == ["aborted"]
    [reply] = replies(session)
    message = reply.data["entry"]["message"]
    assert message["stopReason"] == "error" and "cancelled" in message["errorMessage"]
    events = turn_events(session, 1)
    assert [e.data["reason"] for e in events if e.type in ("step/end", "turn/end")] == [
        "aborted",
        "aborted",
    ]
    assert len(server.requests) == 1


@pytest.mark.parametrize("kind", KINDS)
def test_retry_starts_a_new_turn_from_the_same_point(faulty, kind):
    server, session = faulty(kind)
    server.script(Failure(500, error_body(kind, "boom")))
    agent.agent_run_foreground(session.id, "hi")
    [failed] = replies(session)
    failed_sent = next(e for e in turn_events(session, 1) if e.type == "request/sent")
    server.script(text_answer(kind, "Hello again."))
    sent = agent.agent_retry(session.id)
    assert sent.turn == 2
    ended = agent.agent_wait(session.id, 20)
    assert ended is not None and [e.reason for e in ended] == ["completed"]
    events = turn_events(session, 2)
    assert [e.type for e in events] == [
        "turn/start",
        "leaf/moved",
        "step/start",
        "request/sent",
        "assistant/message",
        "step/end",
        "turn/end",
    ]
    assert events[0].data["trigger"] == "retry" and events[0].data["retry_of"] == failed.entry_id
    user = failed.data["entry"]["parentId"]
    assert events[1].data["to"] == user and events[1].data["reason"] == "retry"
    retried = events[3].data
    assert retried["leaf_entry_id"] == failed_sent.data["leaf_entry_id"] == user
    assert retried["payload_sha256"] == failed_sent.data["payload_sha256"]
    answer = events[4]
    assert answer.data["entry"]["parentId"] == user and text_of(answer.data) == "Hello again."
    session.refresh_from_db()
    assert session.leaf_entry_id == answer.entry_id
    # The failed reply stays in the tree, on the branch left behind.
    assert failed.entry_id in {e.id for e in store.entries_of(session.id)}
    assert assert_requests_match(session) == 2
    assert verified(session) is None


def test_retry_refuses_a_reply_that_did_not_fail(faulty):
    server, session = faulty("openai")
    server.script(text_answer("openai", "Fine."))
    agent.agent_run_foreground(session.id, "hi")
    with pytest.raises(agent.AgentError, match="not a failed reply"):
        agent.agent_retry(session.id)
    assert [e.type for e in store.events_after(session.id)][-1] == "turn/end"
    assert len(turn_events(session, 2)) == 0


def test_the_retried_turn_can_fail_again_and_be_retried_again(faulty):
    server, session = faulty("openai")
    server.script(Failure(502, error_body("openai", "bad gateway")))
    agent.agent_run_foreground(session.id, "hi")
    server.script(Raw(200, "application/json", b'{"id": "x"}'))
    agent.agent_retry(session.id)
    assert [e.reason for e in agent.agent_wait(session.id, 20) or []] == ["error"]
    server.script(text_answer("openai", "Third time."))
    agent.agent_retry(session.id)
    assert [e.reason for e in agent.agent_wait(session.id, 20) or []] == ["completed"]
    kinds = [r.data.get("fault", {}) or {} for r in replies(session)]
    assert [k.get("kind") for k in kinds] == ["server_error", "not_a_stream", None]
    assert verified(session) is None
