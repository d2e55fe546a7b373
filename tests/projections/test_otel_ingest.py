"""OTLP GenAI spans read and planned as Strand's facts (`projections.otel_ingest`), pure."""

from __future__ import annotations

import copy
import json
import random
from typing import Any

import pytest

from projections.otel_ingest import (
    SEMCONV_VERSION,
    Fact,
    IngestState,
    OtlpError,
    Plan,
    parse_otlp_json,
    plan_spans,
)
from tests.ingest.spans import agent_run, body, messages, span, text

RUN_TYPES = [
    "turn/start",
    "user/message",
    "step/start",
    "request/header",
    "request/sent",
    "assistant/message",
    "tool/call",
    "tool/result",
    "step/end",
    "step/start",
    "request/sent",
    "assistant/message",
    "step/end",
    "turn/end",
]


def plan(spans: list[dict[str, Any]], state: IngestState | None = None, **kw: Any) -> Plan:
    parsed = parse_otlp_json(body(*spans))
    return plan_spans(
        state or IngestState(), parsed, first_seq=1, max_event_bytes=kw.get("max", 1 << 20)
    )


def types(p: Plan) -> list[str]:
    return [f.type for f in p.facts]


def test_the_conventions_are_pinned() -> None:
    assert SEMCONV_VERSION == "1.42.0"


def test_an_agent_run_is_a_turn_of_steps_requests_and_tools() -> None:
    p = plan(agent_run())
    assert types(p) == RUN_TYPES
    assert len(p.recorded_spans) == 4 and not p.rejected
    sent = [f for f in p.facts if f.type == "request/sent"]
    assert [s.data["token_estimate"] for s in sent] == [11, 20]
    assert sent[1].data["header_seq"] == 1 + RUN_TYPES.index("request/header")
    assert [m["role"] for m in sent[1].data["recorded_input"]["messages"]] == [
        "user",
        "assistant",
        "user",
    ]
    reply = [f for f in p.facts if f.type == "assistant/message"][-1].data["entry"]["message"]
    assert reply["content"] == [{"type": "text", "text": "Hello."}]
    assert reply["usage"]["input"] == 20 and reply["usage"]["output"] == 4
    header = next(f for f in p.facts if f.type == "request/header").data
    assert header["system_prompt"] == "Be kind." and header["model"] == "m-1"


def test_spans_in_any_order_within_a_request_are_placed_by_their_times() -> None:
    run = agent_run()
    expected = plan(run)
    for seed in range(5):
        shuffled = run[:]
        random.Random(seed).shuffle(shuffled)
        assert plan(shuffled).facts == expected.facts


def test_spans_arriving_one_request_at_a_time_give_the_same_facts() -> None:
    run = agent_run()
    state, seq, facts = IngestState(), 1, list[Fact]()
    for one in (run[1], run[2], run[3], run[0]):  # as an exporter sends them: by end time
        p = plan_spans(state, parse_otlp_json(body(one)), first_seq=seq, max_event_bytes=1 << 20)
        facts += p.facts
        state, seq = p.state, seq + len(p.facts)
    assert [f.type for f in facts] == RUN_TYPES
    at_once = list(plan(run).facts)
    # The same facts, but that the turn starts when its first span is known to start.
    assert facts[1:] == at_once[1:]
    assert facts[0].data["observed"]["span_id"] == "2" * 16


def test_each_fact_keeps_its_span_time_and_ids_and_unmapped_attributes() -> None:
    p = plan(agent_run())
    sent = next(f for f in p.facts if f.type == "request/sent").data["observed"]
    assert sent["span_id"] == "2" * 16 and sent["trace_id"] == "a" * 32
    assert sent["attributes"] == {"custom.thing": "kept", "gen_ai.agent.name": "helper"}
    assert sent["time"].endswith("Z") and sent["start"] < sent["end"]
    end = p.facts[-1].data["observed"]
    assert end["name"] == "invoke_agent helper" and end["span_id"] == "1" * 16


def test_a_later_run_of_the_conversation_adds_only_its_new_messages() -> None:
    first = plan(agent_run())
    second_run = agent_run(trace="b" * 32, question="And tomorrow?", answer="Rain.")
    # The new run's model sees the first run's messages before its own question.
    history = json.loads(second_run[1]["attributes"][1]["value"]["stringValue"])
    earlier = [
        {"role": "user", "parts": [text("Hi?")]},
        {
            "role": "assistant",
            "parts": [
                {"type": "tool_call", "id": "c1", "name": "lookup", "arguments": '{"q": "x"}'}
            ],
        },
        {"role": "user", "parts": [{"type": "tool_call_response", "id": "c1", "result": "found"}]},
        {"role": "assistant", "parts": [text("Hello.")]},
    ]
    chat = copy.deepcopy(second_run[1])
    chat["attributes"][1]["value"]["stringValue"] = json.dumps(earlier + history)
    chat["spanId"] = "5" * 16
    p = plan([second_run[0] | {"spanId": "6" * 16}, chat], first.state)
    users = [f for f in p.facts if f.type == "user/message"]
    assert [u.data["entry"]["message"]["content"][0]["text"] for u in users] == ["And tomorrow?"]
    assert not [f for f in p.facts if f.type == "tool/result"]
    assert p.facts[0].type == "turn/start" and p.facts[0].data["turn"] == 1


def test_without_captured_content_structure_timings_and_usage_are_recorded() -> None:
    run = agent_run()
    for one in run:
        one["attributes"] = [
            a
            for a in one["attributes"]
            if a["key"]
            not in (
                "gen_ai.input.messages",
                "gen_ai.output.messages",
                "gen_ai.tool.call.result",
                "gen_ai.system_instructions",
            )
        ]
    p = plan(run)
    assert "user/message" not in types(p)
    sent = [f.data for f in p.facts if f.type == "request/sent"]
    assert all(s["content_captured"] is False for s in sent)
    reply = next(f for f in p.facts if f.type == "assistant/message").data["entry"]["message"]
    assert reply["content"] == [] and reply["usage"]["input"] == 11


def test_a_failed_request_is_an_error_reply_and_a_failed_agent_an_error_turn() -> None:
    run = agent_run()[:2]
    run[0]["status"] = {"code": 2, "message": "gave up"}
    run[1]["status"] = {"code": 2, "message": "rate limited"}
    run[1]["attributes"] = [a for a in run[1]["attributes"] if a["key"] != "gen_ai.output.messages"]
    run[1]["attributes"].append({"key": "error.type", "value": {"stringValue": "429"}})
    p = plan(run)
    reply = next(f for f in p.facts if f.type == "assistant/message").data
    assert reply["entry"]["message"]["stopReason"] == "error"
    assert reply["entry"]["message"]["errorMessage"] == "429: rate limited"
    assert reply["fault"]["kind"] == "observed"
    end = p.facts[-1].data
    assert end["reason"] == "error" and end["error"] == "gave up"


def test_spans_that_are_not_genai_or_too_large_are_refused_alone() -> None:
    run = agent_run(answer="long " * 4000)
    run.append(span("GET /weather", "9" * 16, parent="1" * 16, start_ms=50, end_ms=55))
    p = plan(run, max=10_000)
    refused = {s.span_id: why for s, why in p.rejected}
    assert "not a GenAI span" in refused["9" * 16]
    assert "bytes, over the 10000" in refused["4" * 16]
    assert "4" * 16 not in {s.span_id for s in p.recorded_spans}
    assert "turn/end" in types(p)


@pytest.mark.parametrize(
    ("change", "where"),
    [
        ({"traceId": "zz"}, "spans[0].traceId"),
        ({"traceId": "0" * 32}, "spans[0].traceId"),
        ({"spanId": "ab"}, "spans[0].spanId"),
        ({"startTimeUnixNano": "soon"}, "startTimeUnixNano"),
        ({"endTimeUnixNano": "1"}, "endTimeUnixNano is before"),
        ({"attributes": {"a": 1}}, "attributes must be a list"),
        ({"attributes": [{"key": "x", "value": {"intValue": "one"}}]}, "intValue"),
        ({"status": {"code": "bad"}}, "status.code"),
    ],
)
def test_a_body_that_is_not_otlp_is_refused_naming_where(
    change: dict[str, Any], where: str
) -> None:
    one = span("chat m", "2" * 16) | change
    with pytest.raises(OtlpError, match=where.replace("[", r"\[").replace("]", r"\]")):
        parse_otlp_json(body(one))


def test_deeply_nested_attribute_values_are_refused() -> None:
    deep: dict[str, Any] = {"stringValue": "x"}
    for _ in range(40):
        deep = {"arrayValue": {"values": [deep]}}
    one = span("chat m", "2" * 16)
    one["attributes"] = [{"key": "deep", "value": deep}]
    with pytest.raises(OtlpError, match="nest deeper"):
        parse_otlp_json(body(one))


def test_resource_spans_must_be_a_list() -> None:
    with pytest.raises(OtlpError, match="resourceSpans"):
        parse_otlp_json({"resourceSpans": {"x": 1}})


def test_tool_messages_keep_the_name_of_the_call_they_answer() -> None:
    p = plan(agent_run())
    result = next(f for f in p.facts if f.type == "tool/result").data["entry"]["message"]
    assert result["toolName"] == "lookup" and result["toolCallId"] == "c1"
    assert result["content"] == [{"type": "text", "text": "found"}]
    assert (
        messages(("user", [text("a")]))
        == '[{"role": "user", "parts": [{"type": "text", "content": "a"}]}]'
    )
