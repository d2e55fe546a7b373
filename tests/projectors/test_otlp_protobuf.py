"""The live push: its protobuf bodies (field by field the same message that protobuf's own
JSON mapping reads from the OTLP/JSON document, cut into bodies under the bound), the
headers it sends, and what it does with each answer of a collector."""

from __future__ import annotations

import base64
import gzip
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from google.protobuf.json_format import ParseDict
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from projections import otel_genai as g
from sessions_app.projectors import otlp
from tests.phoenix import free_port
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


class _Sink(BaseHTTPRequestHandler):
    """A collector that answers each push with the next status of `statuses`."""

    statuses: list[int] = []
    received: list[tuple[dict[str, str], bytes]] = []

    def do_POST(self) -> None:  # noqa: N802 - the handler's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.received.append(({k.lower(): v for k, v in self.headers.items()}, body))
        self.send_response(self.statuses.pop(0))
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def sink(settings: Any) -> Iterator[type[_Sink]]:
    server = ThreadingHTTPServer(("127.0.0.1", free_port(range(26720, 26760))), _Sink)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    settings.STRAND_OTLP_ENDPOINT = f"http://127.0.0.1:{server.server_port}/v1/traces"
    settings.STRAND_OTLP_BACKOFF_S = 2.0
    settings.STRAND_OTLP_BACKOFF_MAX_S = 5.0
    _Sink.statuses, _Sink.received = [], []
    otlp.backoff.succeeded()
    try:
        yield _Sink
    finally:
        server.shutdown()
        server.server_close()
        otlp.backoff.succeeded()


def test_a_push_sends_the_configured_headers_and_a_gzipped_body(sink: Any, settings: Any) -> None:
    settings.STRAND_OTLP_HEADERS = "authorization=Bearer%20s3cret, x-tenant = team-1,broken"
    spans = g.turn_spans(facts_of(completed_log()))
    sink.statuses = [200]
    otlp.push(spans)
    [(headers, body)] = sink.received
    assert headers["authorization"] == "Bearer s3cret" and headers["x-tenant"] == "team-1"
    assert headers["content-type"] == "application/x-protobuf"
    assert headers["content-encoding"] == "gzip"
    assert ExportTraceServiceRequest.FromString(gzip.decompress(body)) == otlp.to_protobuf(spans)


def test_a_refusal_waits_doubling_and_a_malformed_body_is_skipped(sink: Any) -> None:
    spans = g.turn_spans(facts_of(completed_log()))
    sink.statuses = [503, 429, 400]
    with pytest.raises(otlp.PushFailed):
        otlp.push(spans)
    first = otlp.backoff.not_before - time.monotonic()
    with pytest.raises(otlp.PushFailed):
        otlp.push(spans)
    second = otlp.backoff.not_before - time.monotonic()
    assert otlp.backoff.failures == 2 and 1.5 < first <= 2.0 and 3.5 < second <= 4.0
    otlp.push(spans)  # 400: the body would be refused forever; logged, not retried
    assert otlp.backoff.failures == 0 and len(sink.received) == 3
