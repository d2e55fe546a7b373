"""A session as an OTLP/JSON file of OpenTelemetry GenAI spans (GET …/export.otlp.json):
its turns, model requests and tool calls with their exact input, usage, faults, compaction
and replay; the same ids on every export; a branch; content left out; who may read it."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from projections import otel_genai as g
from projections.chat import Usage
from projections.otel_genai import attribute_map
from sessions_app import services, store
from sessions_app.models import Session
from tests.api.conftest import Api, body_of, content_of, wait_idle

pytestmark = pytest.mark.django_db(transaction=True)

RICH_PRESET = "otel-rich"


def rich_session(api: Api, owner: Any, workspace: Path, serve_preset: Any) -> Session:
    """A session with a tool call, a request that failed and was tried again, a reply that
    failed for good, a compaction, a turn after it, and a replay of its first request."""
    preset = {
        **services.DEFAULT_PRESET,
        "max_retries": 1,
        "retry_backoff_s": 0.01,
        "keep_recent_tokens": 10,
    }
    name = serve_preset(RICH_PRESET, **preset)
    session = services.session_create(owner=owner, title="traced", cwd=str(workspace), preset=name)
    base = f"/sessions/{session.id}"
    # `once` fails the first request of a payload in this process: the session's id makes
    # the payload its own.
    for text in ("read notes.txt", f"fault 500 once ({session.id})", "fault 401"):
        assert api.post(f"{base}/messages", {"text": text}).status_code == 202, text
        wait_idle(session)
    compacted = api.post(f"{base}/compact", {})
    assert compacted.status_code == 200, compacted.content
    assert api.post(f"{base}/messages", {"text": "what now?"}).status_code == 202
    wait_idle(session)
    first = next(e.seq for e in events_of(session) if e.type == "request/sent")
    replay = api.post(f"{base}/requests/{first}/replay", {})
    assert replay.status_code == 202, replay.content
    wait_idle(session)
    session.refresh_from_db()
    return session


def events_of(session: Session) -> list[Any]:
    return list(store.events_after(session.id, -1, 100_000))


def spans_of(document: dict[str, Any]) -> list[dict[str, Any]]:
    assert document["resourceSpans"][0]["scopeSpans"][0]["schemaUrl"] == g.SCHEMA_URL
    return [s for rs in document["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]


def exported(api: Api, session: Session, query: str = "") -> list[dict[str, Any]]:
    response = api.get(f"/sessions/{session.id}/export.otlp.json{query}")
    assert response.status_code == 200, response.content
    assert response.streaming and response["Content-Type"].startswith("application/json")
    return spans_of(json.loads(content_of(response)))


def by_operation(spans: list[dict[str, Any]], operation: str) -> list[dict[str, Any]]:
    return [s for s in spans if attribute_map(s)[g.GEN_AI_OPERATION_NAME] == operation]


def test_a_session_exports_as_genai_spans(
    as_alice: Api, as_bob: Api, anonymous: Api, alice: Any, workspace: Path, serve_preset: Any
) -> None:
    """One session built once (it takes a few seconds), read each way."""
    session = rich_session(as_alice, alice, workspace, serve_preset)
    every_turn_request_and_tool_call_has_its_facts(as_alice, session)
    faults_compaction_and_replay_are_said(as_alice, session)
    a_second_export_gives_the_same_ids_and_a_branch_its_turns(as_alice, session)
    without_content_only_structure_timings_and_usage_go(as_alice, session)
    only_those_who_may_read_the_session_read_its_export(as_alice, as_bob, anonymous, alice, session)
    the_session_page_links_to_it(as_alice, alice, session)


def every_turn_request_and_tool_call_has_its_facts(as_alice: Api, session: Session) -> None:
    events = events_of(session)
    spans = exported(as_alice, session)
    turns = by_operation(spans, g.OP_INVOKE_AGENT)
    chats = by_operation(spans, g.OP_CHAT)
    tools = by_operation(spans, g.OP_EXECUTE_TOOL)
    assert len(spans) == len(turns) + len(chats) + len(tools)

    # One trace per turn, rooted at its invoke_agent span, every other span under it.
    starts = [e for e in events if e.type == "turn/start"]
    assert [attribute_map(t)[g.STRAND_TURN] for t in turns] == [e.turn for e in starts]
    roots = {t["traceId"]: t["spanId"] for t in turns}
    assert len(roots) == len(turns)
    for span in chats + tools:
        assert span["parentSpanId"] == roots[span["traceId"]]
    for turn in turns:
        attrs = attribute_map(turn)
        assert turn["name"] == f"invoke_agent {RICH_PRESET}"
        assert attrs[g.GEN_AI_CONVERSATION_ID] == str(session.id)

    # Each request/sent is a chat span, at its time, with the reply's usage and timings.
    sent = [e for e in events if e.type == "request/sent"]
    assert sorted(attribute_map(c)[g.STRAND_SEQ] for c in chats) == [e.seq for e in sent]
    replies = {e.seq: e for e in events if e.type == "assistant/message"}
    for chat in chats:
        attrs = attribute_map(chat)
        start = next(e for e in sent if e.seq == attrs[g.STRAND_SEQ])
        assert int(chat["startTimeUnixNano"]) == g.unix_nanos(start.time)
        assert chat["name"] == f"chat {attrs[g.GEN_AI_REQUEST_MODEL]}"
        assert attrs[g.GEN_AI_PROVIDER_NAME] == "strand.offline"
        # Its input is the context view's rebuilt request (which matches the recorded hash).
        view = body_of(as_alice.get(f"/sessions/{session.id}/views/requests/{start.seq}"))
        assert view["matches"] is True
        assert json.loads(attrs[g.GEN_AI_INPUT_MESSAGES]) == [
            g.input_message(m) for m in view["provider_messages"]
        ]
        assert attrs[g.STRAND_REQUEST_PAYLOAD_SHA256] == view["recorded_sha256"]
        reply_entry = attrs.get(g.STRAND_RESPONSE_ENTRY)
        if reply_entry is None:
            continue  # an attempt that failed and was tried again
        reply = next(r for r in replies.values() if r.entry_id == reply_entry)
        assert int(chat["endTimeUnixNano"]) == g.unix_nanos(reply.time)
        usage = Usage.from_message(reply.data["entry"]["message"])
        assert usage is not None
        assert attrs[g.GEN_AI_USAGE_OUTPUT_TOKENS] == usage.output
        assert attrs[g.GEN_AI_USAGE_INPUT_TOKENS] == usage.input + usage.cache_read
        assert attrs[g.STRAND_RESPONSE_DURATION_MS] == reply.data["timing"]["duration_ms"]
        if "ttft_ms" in reply.data["timing"]:
            ttft = reply.data["timing"]["ttft_ms"] / 1000
            assert attrs[g.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] == ttft

    # The exact input: what the context view rebuilds, as {role, parts[]}.
    first = next(c for c in chats if attribute_map(c)[g.STRAND_SEQ] == sent[0].seq)
    attrs = attribute_map(first)
    view = body_of(as_alice.get(f"/sessions/{session.id}/views/requests/{sent[0].seq}"))
    assert json.loads(attrs[g.GEN_AI_SYSTEM_INSTRUCTIONS]) == [
        {"type": "text", "content": view["system_prompt"]}
    ]
    assert json.loads(attrs[g.GEN_AI_INPUT_MESSAGES]) == [
        {"role": "user", "parts": [{"type": "text", "content": "read notes.txt"}]}
    ]
    definitions = json.loads(attrs[g.GEN_AI_TOOL_DEFINITIONS])
    assert [d["name"] for d in definitions] == [t["name"] for t in view["tools"]]
    [output] = json.loads(attrs[g.GEN_AI_OUTPUT_MESSAGES])
    [call] = [p for p in output["parts"] if p["type"] == "tool_call"]
    assert output["finish_reason"] == "tool_call" and call["name"] == "read"
    # The request after the tool call carries its result back.
    second = next(c for c in chats if attribute_map(c)[g.STRAND_SEQ] == sent[1].seq)
    messages = json.loads(attribute_map(second)[g.GEN_AI_INPUT_MESSAGES])
    assert messages[-1] == {
        "role": "tool",
        "parts": [{"type": "tool_call_response", "id": call["id"], "response": "hello world\n"}],
    }

    # The tool call: id, arguments, result, timed from dispatch to result.
    dispatches = [e for e in events if e.type == "tool/call"]
    assert len(tools) == len(dispatches)
    tool = next(t for t in tools if t["traceId"] == first["traceId"])
    attrs = attribute_map(tool)
    dispatched, result = dispatches[0], next(e for e in events if e.type == "tool/result")
    assert tool["name"] == "execute_tool read"
    assert attrs[g.GEN_AI_TOOL_CALL_ID] == call["id"] == dispatched.data["call_id"]
    assert json.loads(attrs[g.GEN_AI_TOOL_CALL_ARGUMENTS]) == {"path": "notes.txt"}
    assert attrs[g.GEN_AI_TOOL_CALL_RESULT] == "hello world\n"
    assert int(tool["startTimeUnixNano"]) == g.unix_nanos(dispatched.time)
    assert int(tool["endTimeUnixNano"]) == g.unix_nanos(result.time)
    assert tool["status"] == {"code": g.STATUS_OK}


def faults_compaction_and_replay_are_said(as_alice: Api, session: Session) -> None:
    spans = exported(as_alice, session)
    chats = by_operation(spans, g.OP_CHAT)
    turns = {attribute_map(t)[g.STRAND_TURN]: t for t in by_operation(spans, g.OP_INVOKE_AGENT)}
    in_turn = {n: [c for c in chats if c["traceId"] == t["traceId"]] for n, t in turns.items()}

    # Turn 2: the first attempt failed (HTTP 500) and was tried again; the second answered.
    failed, answered = in_turn[2]
    assert failed["status"]["code"] == g.STATUS_ERROR
    assert attribute_map(failed)[g.ERROR_TYPE] == "server_error"
    assert attribute_map(answered)[g.STRAND_REQUEST_ATTEMPT] == 2
    assert answered["status"] == {"code": g.STATUS_OK}
    # Turn 3: the reply failed for good (401): the request and the turn are errors.
    [refused] = in_turn[3]
    assert refused["status"]["code"] == g.STATUS_ERROR
    assert attribute_map(refused)[g.ERROR_TYPE] == "auth"
    assert attribute_map(refused)[g.GEN_AI_RESPONSE_FINISH_REASONS] == ["error"]
    assert turns[3]["status"]["code"] == g.STATUS_ERROR

    # Turn 4 starts from the compaction: its request says so.
    compaction = next(e for e in events_of(session) if e.type == "entry/compaction")
    [after] = in_turn[4]
    assert attribute_map(after)[g.STRAND_CONTEXT_COMPACTED] is True
    assert attribute_map(after)[g.STRAND_CONTEXT_COMPACTION] == compaction.entry_id
    messages = json.loads(attribute_map(after)[g.GEN_AI_INPUT_MESSAGES])
    assert messages[-1]["parts"] == [{"type": "text", "content": "what now?"}]

    # Turn 5 replays the first request.
    first_request = min(attribute_map(c)[g.STRAND_SEQ] for c in chats)
    replay = attribute_map(turns[5])
    assert replay[g.STRAND_TURN_TRIGGER] == "replay"
    assert replay[g.STRAND_REPLAY_OF] == first_request
    replayed = in_turn[5][0]
    assert attribute_map(replayed)[g.STRAND_REQUEST_HEADER_REASON] == "replay"
    assert attribute_map(replayed)[g.STRAND_REPLAY_OF] == first_request


def a_second_export_gives_the_same_ids_and_a_branch_its_turns(
    as_alice: Api, session: Session
) -> None:
    whole = exported(as_alice, session)
    again = exported(as_alice, session)
    assert [(s["traceId"], s["spanId"]) for s in whole] == [
        (s["traceId"], s["spanId"]) for s in again
    ]
    assert len({s["spanId"] for s in whole}) == len(whole)
    # The replay answered on a branch of its own, from the first request's point: the
    # branch to its reply holds turn 1's first request and the replay, not turns 2 to 4.
    replies = [e for e in events_of(session) if e.type == "assistant/message"]
    branch = exported(as_alice, session, f"?leaf={replies[-1].entry_id}")
    turns = [attribute_map(t)[g.STRAND_TURN] for t in by_operation(branch, g.OP_INVOKE_AGENT)]
    assert 5 in turns and not {2, 3, 4} & set(turns)
    ids = {s["spanId"] for s in whole}
    assert {s["spanId"] for s in branch} <= ids


def without_content_only_structure_timings_and_usage_go(as_alice: Api, session: Session) -> None:
    full = exported(as_alice, session)
    bare = exported(as_alice, session, "?content=false")
    assert len(bare) == len(full)
    for span in bare:
        attrs = attribute_map(span)
        assert not g.CONTENT_ATTRIBUTES & set(attrs)
        assert g.GEN_AI_OPERATION_NAME in attrs
    text = json.dumps(bare)
    assert "hello world" not in text and "read notes.txt" not in text
    tokens = [attribute_map(s).get(g.GEN_AI_USAGE_OUTPUT_TOKENS) for s in bare]
    assert tokens == [attribute_map(s).get(g.GEN_AI_USAGE_OUTPUT_TOKENS) for s in full]


def only_those_who_may_read_the_session_read_its_export(
    as_alice: Api, as_bob: Api, anonymous: Api, alice: Any, session: Session
) -> None:
    path = f"/sessions/{session.id}/export.otlp.json"
    for api, status, code in ((as_bob, 404, "not_found"), (anonymous, 401, "unauthorized")):
        response = api.get(path)
        assert response.status_code == status
        assert body_of(response)["error"] == code
    other = services.session_create(owner=alice, title="other")
    foreign = store.append_events(other.id, 0, [_user("elsewhere")]).entry_ids[0]
    for leaf in (foreign, "x" * 300, "nope"):
        response = as_alice.get(f"{path}?leaf={leaf}")
        assert response.status_code in (400, 404, 422), leaf
        assert isinstance(body_of(response)["detail"], str)


def test_a_session_without_turns_exports_an_empty_document(as_alice: Api, alice: Any) -> None:
    empty = services.session_create(owner=alice, title="empty")
    assert exported(as_alice, empty) == []


def _user(text: str) -> Any:
    from tests.api.conftest import user_msg

    return user_msg(text)


def the_session_page_links_to_it(as_alice: Api, alice: Any, session: Session) -> None:
    """The page's export menu links to the file of the session and of the branch shown; a
    signed-in browser follows them."""
    browser = Client()
    browser.force_login(alice)
    page = browser.get(f"/sessions/{session.id}/").content.decode()
    links = re.findall(r'href="([^"]*export\.otlp\.json[^"]*)"', page)
    assert links == [
        f"/api/sessions/{session.id}/export.otlp.json",
        f"/api/sessions/{session.id}/export.otlp.json?leaf={session.leaf_entry_id}",
    ]
    for link, query in zip(links, ("", f"?leaf={session.leaf_entry_id}"), strict=True):
        response = browser.get(html.unescape(link))
        assert response.status_code == 200
        assert spans_of(json.loads(content_of(response))) == exported(as_alice, session, query)
