"""The live push's protobuf bodies: field by field the same message that protobuf's own
JSON mapping reads from the OTLP/JSON document, and cut into bodies under the bound."""

from __future__ import annotations

import base64
from typing import Any

from google.protobuf.json_format import ParseDict
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from projections import otel_genai as g
from sessions_app.projectors import otlp
from tests.projections.test_otel_genai import completed_log, facts_of


def _hex_to_base64(span: dict[str, Any]) -> dict[str, Any]:
    # OTLP/JSON writes ids in hex; protobuf's JSON mapping reads bytes as base64.
    return {
        k: base64.b64encode(bytes.fromhex(v)).decode()
        if k in ("traceId", "spanId", "parentSpanId")
        else v
        for k, v in span.items()
    }


def test_the_protobuf_body_is_the_json_document() -> None:
    spans = g.turn_spans(facts_of(completed_log()))
    expected = ParseDict(
        g.document([_hex_to_base64(s) for s in spans], scope_version=otlp.SCOPE_VERSION),
        ExportTraceServiceRequest(),
    )
    assert otlp.to_protobuf(spans) == expected
    [body] = otlp.bodies(spans)
    assert ExportTraceServiceRequest.FromString(body) == expected


def test_bodies_stay_under_the_bound(monkeypatch: Any) -> None:
    spans = g.turn_spans(facts_of(completed_log())) * 50
    monkeypatch.setattr(otlp, "PUSH_BYTES", 4000)
    bodies = list(otlp.bodies(spans))
    assert len(bodies) > 1 and all(len(b) <= 4000 for b in bodies)
    read = [ExportTraceServiceRequest.FromString(b) for b in bodies]
    count = sum(len(ss.spans) for r in read for rs in r.resource_spans for ss in rs.scope_spans)
    assert count == len(spans)
