"""A real Pydantic AI agent, instrumented with its own OpenTelemetry GenAI spans and the
official OTLP/HTTP exporter (gzip, protobuf), runs against a local OpenAI-protocol server
and exports to Strand's `/v1/traces` on a live daphne: its run becomes an observed session
whose chat, trace and context views show its messages, its two tool calls and the exact
input of each model request. Sending the very same bodies again changes nothing."""

from __future__ import annotations

import gzip
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from django.contrib.auth.models import User

from sessions_app import services
from sessions_app.models import Event, ObservedSpan, Session
from tests.ingest.conftest import (
    FINAL_ANSWER,
    REPLAY_PRESET,
    bearer,
    run_producer,
    scripted_run,
)
from tests.runtime.servers import ScriptedServer, Stream, oa_chunk, oa_text, oa_tool_call, oa_usage

# The run is recorded once for the module (by the daphne child, committed); each test reads
# it inside a transaction of its own. The module removes what it made when it ends.
pytestmark = pytest.mark.django_db

PROMPT = "What is the weather and the time in Paris?"


@pytest.fixture(scope="module")
def observed(
    strand_url: str, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    """One run of the producer's agent, exported to Strand as Alice."""
    bodies = tmp_path_factory.mktemp("bodies")
    with django_db_blocker.unblock():
        alice = User.objects.create_user(username="alice", password="alice-pass-1234")
        token = bearer(alice)
    model_server = scripted_run()
    try:
        producer = run_producer(strand_url, token, model_server, bodies)
        out, err = producer.communicate(timeout=90)
    finally:
        model_server.close()
    http = requests.Session()
    http.headers["Authorization"] = f"Bearer {token}"
    try:
        assert producer.returncode == 0, err
        assert FINAL_ANSWER in out
        assert "export failed" not in err
        with django_db_blocker.unblock():
            session = Session.objects.get(owner=alice)
        yield {
            "session": session,
            "http": http,
            "api": f"{strand_url}/api/sessions/{session.id}",
            "bodies": sorted(bodies.glob("*.pb")),
            "model_requests": model_server.requests,
            "url": strand_url,
        }
    finally:
        with django_db_blocker.unblock():
            for made in Session.objects.filter(owner=alice):
                services.session_delete(session=made, by=alice)
            alice.delete()


def test_a_run_with_two_tool_calls_is_recorded_as_facts(observed: dict[str, Any]) -> None:
    session = observed["session"]
    events = list(Event.objects.filter(session=session).order_by("seq"))
    types = [e.type for e in events]
    assert types[0] == "session/created"
    assert events[0].data["source"] == "observed:otlp"
    assert types.count("turn/start") == 1 and types[-1] == "turn/end"
    assert types.count("request/sent") == 3  # three model requests
    assert types.count("request/header") == 1  # the same instructions and tools each time
    assert types.count("tool/call") == 2 and types.count("tool/result") == 2
    assert types.count("assistant/message") == 3 and types.count("user/message") == 1
    # Every span of the run was recorded once: the agent, three requests, two tools.
    assert ObservedSpan.objects.filter(session=session).count() == 6
    assert session.title == "weather"


def test_chat_shows_the_messages_and_tool_results(observed: dict[str, Any]) -> None:
    chat = observed["http"].get(f"{observed['api']}/views/chat", timeout=30)
    assert chat.status_code == 200, chat.text
    items = chat.json()["items"]
    kinds = [item["kind"] for item in items]
    assert kinds[0] == "user" and PROMPT in json.dumps(items[0])
    assert FINAL_ANSWER in json.dumps(items[-1])
    text = json.dumps(items)
    assert "Sunny and 21C in Paris" in text and "10:00 in Paris" in text


def test_trace_shows_turn_requests_tools_usage_and_span_times(observed: dict[str, Any]) -> None:
    trace = observed["http"].get(f"{observed['api']}/views/trace", timeout=30)
    assert trace.status_code == 200, trace.text
    body = trace.json()
    (turn,) = body["spans"]
    assert turn["kind"] == "turn" and turn["status"] == "ok"
    steps = [c for c in turn["children"] if c["kind"] == "step"]
    assert len(steps) == 3
    requests_ = [c for s in steps for c in s["children"] if c["kind"] == "request"]
    tools = [c for s in steps for c in s["children"] if c["kind"] == "tool"]
    assert [t["name"] for t in tools] == ["get_weather", "get_time"]
    assert all(t["status"] == "ok" for t in tools)
    # The token counts the model server reported, through the spans.
    assert [r["usage"]["input"] for r in requests_] == [41, 63, 80]
    assert [r["usage"]["output"] for r in requests_] == [9, 8, 12]
    # Times are the spans' own: each request ends before the tool it asked for starts.
    for request, tool in zip(requests_, tools, strict=False):
        assert request["end"] <= tool["start"]
    # Attributes Strand does not map are kept and shown with the span.
    inputs = dict(requests_[0]["inputs"])
    assert "server.port" in inputs["attributes"]


def test_context_view_shows_the_exact_input_of_each_request(observed: dict[str, Any]) -> None:
    session = observed["session"]
    seqs = list(
        Event.objects.filter(session=session, type="request/sent")
        .order_by("seq")
        .values_list("seq", flat=True)
    )
    sent_to_model = observed["model_requests"]
    assert len(sent_to_model) == 3
    for seq, wire in zip(seqs, sent_to_model, strict=True):
        view = observed["http"].get(f"{observed['api']}/views/requests/{seq}", timeout=30)
        assert view.status_code == 200, view.text
        body = view.json()
        assert body["matches"] is True
        recorded = body["recorded_input"]
        # As many messages as the agent sent the model (less the system message).
        non_system = [m for m in wire["messages"] if m["role"] != "system"]
        assert len(recorded["messages"]) == len(non_system)
        assert recorded["system_instructions"][0]["content"].startswith("You are a weather bot")
        assert body["system_prompt"].startswith("You are a weather bot")
        assert {t["name"] for t in body["tools"]} == {"get_weather", "get_time", "read"}
        assert body["model"] == "test-model" and body["provider"] == "openai"
    last = observed["http"].get(f"{observed['api']}/views/requests/{seqs[-1]}", timeout=30)
    roles = [m["role"] for m in last.json()["messages"]]
    assert roles == ["user", "assistant", "toolResult", "assistant", "toolResult"]


def test_sending_the_same_bodies_again_changes_nothing(observed: dict[str, Any]) -> None:
    session = observed["session"]
    before = Event.objects.filter(session=session).count()
    assert len(observed["bodies"]) == 6  # one export per span, as they ended
    for path in observed["bodies"]:
        answer = observed["http"].post(
            f"{observed['url']}/v1/traces",
            data=gzip.compress(path.read_bytes()),
            headers={"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"},
            timeout=30,
        )
        assert answer.status_code == 200, answer.text
    assert Event.objects.filter(session=session).count() == before
    assert Session.objects.filter(owner=session.owner).count() == 1


def test_a_model_request_replays_against_a_preset_and_its_tools_never_run(
    observed: dict[str, Any], replay_model: ScriptedServer
) -> None:
    session = observed["session"]
    first = Event.objects.filter(session=session, type="request/sent").order_by("seq").first()
    assert first is not None
    # The replayed model asks for the observed agent's `read` (a name Strand's own tools
    # have too), then answers.
    replay_model.script(
        Stream(
            [
                oa_tool_call(0, "call_r", "read", '{"path": "README.md"}'),
                oa_chunk(finish="tool_calls"),
                oa_usage(30, 5),
            ]
        ),
        oa_text("Replayed answer."),
    )
    answer = observed["http"].post(
        f"{observed['api']}/requests/{first.seq}/replay",
        json={"preset": REPLAY_PRESET},
        timeout=30,
    )
    assert answer.status_code == 202, answer.text
    (turn,) = answer.json()["turns"]
    deadline = time.monotonic() + 30
    while not Event.objects.filter(session=session, type="turn/end", turn=turn).exists():
        assert time.monotonic() < deadline, "the replay did not end"
        time.sleep(0.2)
    assert Event.objects.get(session=session, type="turn/end", turn=turn).data["reason"] == (
        "completed"
    )
    # The model was offered the recorded tools and the recorded conversation ...
    sent = replay_model.requests[0]
    assert {t["function"]["name"] for t in sent["tools"]} == {"get_weather", "get_time", "read"}
    assert PROMPT in json.dumps(sent["messages"])
    # ... and its call was answered without running anything.
    result = Event.objects.get(session=session, type="tool/result", turn=turn)
    assert result.data["error_code"] == "UNKNOWN_TOOL"
    assert "Replayed answer." in json.dumps(
        list(
            Event.objects.filter(session=session, type="assistant/message", turn=turn).values_list(
                "data", flat=True
            )
        )
    )


def test_usage_and_search_count_the_observed_session(observed: dict[str, Any]) -> None:
    usage = observed["http"].get(f"{observed['url']}/api/usage", timeout=30)
    assert usage.status_code == 200, usage.text
    report = usage.json()
    # (A replay of this module may have added replies of its own model.)
    (observed_model,) = [m for m in report["by_model"] if m["model"] == "openai / test-model"]
    assert observed_model["replies"] == 3
    assert observed_model["input_tokens"] == 41 + 63 + 80
    assert observed_model["output_tokens"] == 9 + 8 + 12
    tools = {t["tool"]: t for t in report["tools"]}
    assert tools["get_weather"]["calls"] == 1 and tools["get_weather"]["errors"] == 0
    assert tools["get_time"]["calls"] == 1
    found = observed["http"].get(f"{observed['url']}/api/search", params={"q": "Sunny"}, timeout=30)
    assert found.status_code == 200, found.text
    hits = {(h["role"], h["tool_name"]) for h in found.json()["items"]}
    assert hits == {("assistant", ""), ("toolResult", "get_weather")}
