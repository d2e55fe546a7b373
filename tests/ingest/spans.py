"""OTLP/JSON trace bodies built by hand, span by span, as an exporter writes them (hex ids,
nanosecond strings, typed attribute values)."""

from __future__ import annotations

import json
from typing import Any

T0 = 1_790_000_000_000_000_000  # nanoseconds: an instant in 2026
MS = 1_000_000


def value(v: Any) -> dict[str, Any]:
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, float):
        return {"doubleValue": v}
    if isinstance(v, list | tuple):
        return {"arrayValue": {"values": [value(x) for x in v]}}
    if isinstance(v, dict):
        return {"kvlistValue": {"values": [{"key": k, "value": value(x)} for k, x in v.items()]}}
    return {"stringValue": str(v)}


def span(
    name: str,
    span_id: str,
    *,
    trace: str = "a" * 32,
    parent: str | None = None,
    start_ms: int = 0,
    end_ms: int = 10,
    error: str | None = None,
    **attributes: Any,
) -> dict[str, Any]:
    """One span; attribute names are given with `__` for `.` (gen_ai__operation__name)."""
    out: dict[str, Any] = {
        "traceId": trace,
        "spanId": span_id,
        "name": name,
        "kind": 1,
        "startTimeUnixNano": str(T0 + start_ms * MS),
        "endTimeUnixNano": str(T0 + end_ms * MS),
        "attributes": [
            {"key": k.replace("__", "."), "value": value(v)} for k, v in attributes.items()
        ],
        "status": {"code": 2, "message": error} if error else {},
    }
    if parent:
        out["parentSpanId"] = parent
    return out


def body(*spans: dict[str, Any]) -> dict[str, Any]:
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": [{"key": "service.name", "value": value("hand")}]},
                "scopeSpans": [{"scope": {"name": "tests"}, "spans": list(spans)}],
            }
        ]
    }


def messages(*items: tuple[str, list[dict[str, Any]]]) -> str:
    return json.dumps([{"role": role, "parts": parts} for role, parts in items])


def text(content: str) -> dict[str, Any]:
    return {"type": "text", "content": content}


def agent_run(
    conversation: str = "conv-1",
    trace: str = "a" * 32,
    question: str = "Hi?",
    answer: str = "Hello.",
) -> list[dict[str, Any]]:
    """invoke_agent → chat (asks for a tool) → execute_tool → chat (answers)."""
    root = "1" * 16
    call = {"type": "tool_call", "id": "c1", "name": "lookup", "arguments": '{"q": "x"}'}
    first_in = messages(("user", [text(question)]))
    second_in = messages(
        ("user", [text(question)]),
        ("assistant", [call]),
        ("user", [{"type": "tool_call_response", "id": "c1", "result": "found"}]),
    )
    common = {"gen_ai__conversation__id": conversation, "gen_ai__agent__name": "helper"}
    model = {
        "gen_ai__operation__name": "chat",
        "gen_ai__provider__name": "openai",
        "gen_ai__request__model": "m-1",
        "gen_ai__system_instructions": json.dumps([text("Be kind.")]),
        **common,
    }
    return [
        span(
            "invoke_agent helper",
            root,
            trace=trace,
            start_ms=0,
            end_ms=100,
            gen_ai__operation__name="invoke_agent",
            **common,
        ),
        span(
            "chat m-1",
            "2" * 16,
            trace=trace,
            parent=root,
            start_ms=5,
            end_ms=30,
            gen_ai__input__messages=first_in,
            gen_ai__output__messages=messages(("assistant", [call])),
            gen_ai__usage__input_tokens=11,
            gen_ai__usage__output_tokens=3,
            custom__thing="kept",
            **model,
        ),
        span(
            "execute_tool lookup",
            "3" * 16,
            trace=trace,
            parent=root,
            start_ms=31,
            end_ms=40,
            gen_ai__operation__name="execute_tool",
            gen_ai__tool__name="lookup",
            gen_ai__tool__call__id="c1",
            gen_ai__tool__call__arguments='{"q": "x"}',
            gen_ai__tool__call__result="found",
            **common,
        ),
        span(
            "chat m-1",
            "4" * 16,
            trace=trace,
            parent=root,
            start_ms=41,
            end_ms=90,
            gen_ai__input__messages=second_in,
            gen_ai__output__messages=messages(("assistant", [text(answer)])),
            gen_ai__usage__input_tokens=20,
            gen_ai__usage__output_tokens=4,
            **model,
        ),
    ]
