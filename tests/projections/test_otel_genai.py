"""The mapping of Strand's facts to OpenTelemetry GenAI spans, on hand-written logs: the
spans of a turn, their ids, the `{role, parts[]}` messages, content left out, bounds."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from projections import otel_genai as g
from projections.context import build_session_context
from projections.otel_genai import RequestInput, TurnFacts, attribute_map, turn_spans
from projections.trace import project_trace
from tests.projections.fixtures import SessionLog, text, tool_call, usage
from tests.projections.test_trace import completed_log


def facts_of(log: SessionLog, turn: int = 1) -> TurnFacts:
    events = [e for e in log.events if e.turn == turn or e.type == "request/header"]
    [span] = [s for s in project_trace(events).spans if s.kind == "turn"]
    by_seq = {e.seq: e for e in log.events}
    inputs = {}
    for sent in (e for e in events if e.type == "request/sent"):
        before = [e for e in log.entries if e.seq < sent.seq]
        context = build_session_context(before, sent.data["leaf_entry_id"])
        inputs[sent.seq] = RequestInput.of(by_seq[sent.data["header_seq"]].data, context)
    return TurnFacts("s-1", "coder", span, by_seq, inputs)


def operation(spans: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [s for s in spans if attribute_map(s)[g.GEN_AI_OPERATION_NAME] == name]


def test_a_turn_is_an_agent_span_over_its_requests_and_tool_calls() -> None:
    spans = turn_spans(facts_of(completed_log()))
    assert [s["name"] for s in spans] == [
        "invoke_agent coder",
        "chat gpt-test",
        "execute_tool read",
        "chat gpt-test",
    ]
    root, first, tool, second = spans
    assert "parentSpanId" not in root
    assert {s["parentSpanId"] for s in spans[1:]} == {root["spanId"]}
    assert {s["traceId"] for s in spans} == {root["traceId"]}
    assert [s["kind"] for s in spans] == [1, 3, 1, 3]
    attrs = attribute_map(first)
    assert attrs[g.GEN_AI_PROVIDER_NAME] == "openai"
    assert attrs[g.GEN_AI_REQUEST_TEMPERATURE] == 0.2
    assert attrs[g.GEN_AI_RESPONSE_FINISH_REASONS] == ["tool_call"]
    assert attrs[g.GEN_AI_USAGE_INPUT_TOKENS] == 100 and attrs[g.GEN_AI_USAGE_OUTPUT_TOKENS] == 20
    assert attrs[g.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] == 0.12
    assert int(first["endTimeUnixNano"]) - int(first["startTimeUnixNano"]) == 400 * 10**6
    # The turn sums its requests.
    assert attribute_map(root)[g.GEN_AI_USAGE_OUTPUT_TOKENS] == 25
    assert attribute_map(root)[g.STRAND_USAGE_COST] == pytest.approx(0.003)
    tool_attrs = attribute_map(tool)
    assert tool_attrs[g.GEN_AI_TOOL_CALL_ID] == "c1"
    assert tool_attrs[g.GEN_AI_TOOL_CALL_ARGUMENTS] == '{"path": "a.txt"}'
    assert tool_attrs[g.GEN_AI_TOOL_CALL_RESULT] == "hello"
    assert tool_attrs[g.STRAND_APPROVAL_OUTCOME] == "allowed"
    # The second request's input ends with the tool's result.
    messages = json.loads(attribute_map(second)[g.GEN_AI_INPUT_MESSAGES])
    assert [m["role"] for m in messages] == ["user", "assistant", "tool"]
    assert messages[1]["parts"] == [
        {"type": "text", "content": "Reading."},
        {"type": "tool_call", "id": "c1", "name": "read", "arguments": {"path": "a.txt"}},
    ]
    assert messages[2]["parts"] == [{"type": "tool_call_response", "id": "c1", "response": "hello"}]


def test_ids_follow_the_session_and_seqs_alone() -> None:
    spans = turn_spans(facts_of(completed_log()))
    again = turn_spans(facts_of(completed_log()))
    assert [(s["traceId"], s["spanId"]) for s in spans] == [
        (s["traceId"], s["spanId"]) for s in again
    ]
    assert len({s["spanId"] for s in spans}) == len(spans)
    assert all(len(s["traceId"]) == 32 and len(s["spanId"]) == 16 for s in spans)
    other = turn_spans(facts_of_session(completed_log(), "s-2"))
    assert not {s["spanId"] for s in spans} & {s["spanId"] for s in other}


def facts_of_session(log: SessionLog, session_id: str) -> TurnFacts:
    facts = facts_of(log)
    return TurnFacts(session_id, facts.agent, facts.span, facts.events, facts.requests)


def test_a_running_turn_has_no_spans_yet() -> None:
    log = SessionLog()
    log.created()
    log.header()
    log.turn_start()
    log.step_start()
    log.user("hi")
    log.request([])
    events = [e for e in log.events if e.turn == 1]
    [span] = project_trace(events).spans
    assert turn_spans(TurnFacts("s", "a", span, {e.seq: e for e in events}, {})) == []


def test_a_failed_reply_is_an_error_with_its_fault_kind() -> None:
    log = SessionLog()
    log.created()
    log.header()
    log.turn_start()
    log.step_start()
    log.user("hi")
    log.request([])
    log.assistant([], stop_reason="error", error_message="rate limited", after_ms=50)
    reply = log.events[-1]
    log.events[-1] = type(reply)(
        reply.seq,
        reply.type,
        reply.version,
        reply.time,
        {**reply.data, "fault": {"kind": "rate_limited", "status": 429}},
        reply.entry_id,
        reply.turn,
        reply.step,
    )
    log.step_end("error")
    log.turn_end("error", error="rate limited")
    root, chat = turn_spans(facts_of(log))
    assert chat["status"] == {"code": g.STATUS_ERROR, "message": "rate limited"}
    assert attribute_map(chat)[g.ERROR_TYPE] == "rate_limited"
    assert attribute_map(chat)[g.GEN_AI_RESPONSE_FINISH_REASONS] == ["error"]
    assert root["status"]["code"] == g.STATUS_ERROR


def test_without_capture_no_content_attribute_goes() -> None:
    spans = turn_spans(facts_of(completed_log()), capture_content=False)
    for span in spans:
        assert not g.CONTENT_ATTRIBUTES & set(attribute_map(span))
    assert "hello" not in json.dumps(spans) and "Read a.txt" not in json.dumps(spans)


def test_a_content_attribute_over_the_bound_is_left_out_and_named() -> None:
    log = SessionLog()
    log.created()
    log.header()
    log.turn_start()
    log.step_start()
    log.user("x" * 5000)
    log.request([])
    log.assistant(
        [text("ok"), tool_call("c1", "read", {"path": "y" * 5000})], usage_=usage(1, 1, 0)
    )
    log.tool_call("c1", "read", json.dumps({"path": "y" * 5000}))
    log.tool_result("c1", "read", "z" * 5000)
    log.step_end()
    log.turn_end()
    spans = turn_spans(facts_of(log), max_chars=1000)
    for span in spans[1:]:
        attrs = attribute_map(span)
        assert all(len(v) <= 1000 for k, v in attrs.items() if k in g.CONTENT_ATTRIBUTES)
        assert attrs.get(g.STRAND_CONTENT_OMITTED)
    assert len(json.dumps(spans)) < 20_000  # none of the three 5,000-character texts


@pytest.mark.parametrize(
    "message, expected",
    [
        (
            {"role": "user", "content": "hi"},
            {"role": "user", "parts": [{"type": "text", "content": "hi"}]},
        ),
        (
            {
                "role": "user",
                "content": [{"type": "image", "data": "AAA=", "mimeType": "image/png"}],
            },
            {
                "role": "user",
                "parts": [
                    {
                        "type": "blob",
                        "modality": "image",
                        "mime_type": "image/png",
                        "content": "AAA=",
                    }
                ],
            },
        ),
        (
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "hmm"}]},
            {"role": "assistant", "parts": [{"type": "reasoning", "content": "hmm"}]},
        ),
        (
            {
                "role": "toolResult",
                "toolCallId": "c9",
                "content": [{"type": "text", "text": "out"}],
            },
            {
                "role": "tool",
                "parts": [{"type": "tool_call_response", "id": "c9", "response": "out"}],
            },
        ),
        ({"role": "custom", "content": "x"}, None),
    ],
)
def test_messages_become_role_and_parts(message: dict[str, Any], expected: Any) -> None:
    assert g.input_message(message) == expected


@settings(deadline=None)  # a loaded machine is slow, not wrong
@given(
    st.dictionaries(
        st.text(min_size=1, max_size=8),
        st.one_of(
            st.booleans(),
            st.integers(-(2**62), 2**62),
            st.floats(allow_nan=False),
            st.text(),
            st.lists(st.text(), max_size=3),
        ),
        max_size=6,
    )
)
def test_attributes_read_back_as_written(values: dict[str, Any]) -> None:
    span = {"attributes": g.attributes(values)}
    assert attribute_map(span) == values


def test_the_streamed_document_is_the_document() -> None:
    spans = turn_spans(facts_of(completed_log()))
    text_ = "".join(g.document_chunks(iter(spans), scope_version="1"))
    assert json.loads(text_) == g.document(spans, scope_version="1")
    assert (
        json.loads("".join(g.document_chunks(iter(()))))["resourceSpans"][0]["scopeSpans"][0][
            "spans"
        ]
        == []
    )
