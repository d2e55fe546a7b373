"""The live OTLP export: each finished turn's GenAI spans (`projectors.otel_spans`) pushed
to `STRAND_OTLP_ENDPOINT` over OTLP/HTTP (protobuf, gzip), off the append path.

It is a projector like the others (`projectors.runner`): a batch is the events after each
session's checkpoint, and a `turn/end` among them sends that turn's spans (only finished
spans go out: a running turn's are read whole, with what came before this batch, once its
`turn/end` is committed). The push happens inside the batch's transaction, before the
checkpoints move: when it fails, the batch rolls back and nothing is marked sent, so the
same spans go again later. That makes delivery at least once; the ids derived from the
session and seqs (`projections.otel_genai`) make it once at any backend that keeps a span
by its id.

A failed push (the collector down, refusing, too slow) defers the projector: it is not run
again before a wait that doubles from `STRAND_OTLP_BACKOFF_S` up to
`STRAND_OTLP_BACKOFF_MAX_S`, while the other projectors go on. After a restart the wait
starts over and the checkpoints say what is still to send. A body the collector refuses as
malformed (400, 413, 415) would be refused forever: it is logged and skipped.
"""

from __future__ import annotations

import gzip
import logging
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import connection
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as PbSpan

from projections.otel_genai import SCHEMA_URL, SCOPE_NAME, Span, resource_attributes
from projections.records import EventRecord
from sessions_app.projectors.otel_spans import KeptPaths, agent_name, turns_spans
from sessions_app.projectors.pending import Deferred, PendingSession

NAME = "otlp"
SCOPE_VERSION = "1"
# One push carries at most this many bytes of spans (a batch may need several).
PUSH_BYTES = 4 * 1024 * 1024
# The entries of the sessions' paths kept between batches, and the bytes of their stored
# data (`otel_spans.KeptPaths`).
KEPT_ENTRIES = 50_000
KEPT_BYTES = 256 * 1024 * 1024
# Statuses that say the body itself is wrong: sending it again would not help.
_REFUSED_FOR_GOOD = frozenset({400, 413, 415})

log = logging.getLogger("strand.projectors.otlp")


class PushFailed(Deferred):
    """The collector did not take the spans; they go again after the backoff."""


@dataclass
class Backoff:
    """The failed pushes in a row, and when the next may be tried (monotonic seconds)."""

    failures: int = 0
    not_before: float = 0.0

    def failed(self, now: float) -> float:
        self.failures += 1
        base = settings.STRAND_OTLP_BACKOFF_S
        wait = min(base * 2 ** (self.failures - 1), settings.STRAND_OTLP_BACKOFF_MAX_S)
        self.not_before = now + wait
        return wait

    def succeeded(self) -> None:
        self.failures, self.not_before = 0, 0.0


# This process's backoff: a projector object is made anew for each run.
backoff = Backoff()
# The paths this process read last (a projector object is made anew for each run).
kept_paths = KeptPaths(KEPT_ENTRIES, KEPT_BYTES)


def enabled() -> bool:
    return bool(settings.STRAND_OTLP_ENDPOINT)


class OtlpProjector:
    name = NAME

    def ready(self) -> bool:
        return time.monotonic() >= backoff.not_before

    def apply(self, batch: Sequence[tuple[PendingSession, Sequence[EventRecord]]]) -> None:
        ended = {
            str(session.id): [e.turn for e in events if e.type == "turn/end" and e.turn is not None]
            for session, events in batch
        }
        ended = {sid: turns for sid, turns in ended.items() if turns}
        if not ended:
            return
        spans = [
            span
            for turn_spans in turns_spans(
                ended,
                agents=_agents(list(ended)),
                capture_content=settings.STRAND_OTLP_CAPTURE_CONTENT,
                max_chars=settings.STRAND_OTLP_ATTRIBUTE_CHARS,
                kept=kept_paths,
            )
            for span in turn_spans
        ]
        push(spans)

    def forget(self, session_id: uuid.UUID | str) -> None:
        """Only the session's kept path: what was sent stays with the collector."""
        kept_paths.forget(session_id)


def _agents(session_ids: list[str]) -> dict[str, str]:
    """Each session's agent name, by its id as text."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT id, preset ->> 'name' FROM sessions_app_session WHERE id = ANY(%s)",
            [session_ids],
        )
        return {str(sid): agent_name({"name": name}) for sid, name in cur.fetchall()}


# --- the push ------------------------------------------------------------------------------


def push(spans: Sequence[Span]) -> None:
    """Send `spans` in bodies of at most `PUSH_BYTES`; raise `PushFailed` (after starting
    the backoff) when the collector does not take one."""
    for body in bodies(spans):
        try:
            _post(body)
        except PushFailed as exc:
            wait = backoff.failed(time.monotonic())
            log.warning("OTLP push failed (%s); trying again in %.1f s", exc, wait)
            raise
    backoff.succeeded()


def bodies(spans: Iterable[Span]) -> Iterable[bytes]:
    """Serialised `ExportTraceServiceRequest`s holding `spans`, each under `PUSH_BYTES`
    (a span larger than that alone goes alone)."""
    chunk: list[PbSpan] = []
    size = 0
    for span in spans:
        message = pb_span(span)
        span_size = message.ByteSize()
        if chunk and size + span_size > PUSH_BYTES:
            yield _request(chunk).SerializeToString()
            chunk, size = [], 0
        chunk.append(message)
        size += span_size
    if chunk:
        yield _request(chunk).SerializeToString()


def to_protobuf(spans: Sequence[Span]) -> ExportTraceServiceRequest:
    """OTLP/JSON spans as the protocol's protobuf message (the same fields; ids as bytes)."""
    return _request([pb_span(span) for span in spans])


def _request(spans: Sequence[PbSpan]) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add(schema_url=SCHEMA_URL)
    for attribute in resource_attributes():
        _set_value(
            resource_spans.resource.attributes.add(key=attribute["key"]).value, attribute["value"]
        )
    scope_spans = resource_spans.scope_spans.add(schema_url=SCHEMA_URL)
    scope_spans.scope.name = SCOPE_NAME
    scope_spans.scope.version = SCOPE_VERSION
    scope_spans.spans.extend(spans)
    return request


def pb_span(span: Span) -> PbSpan:
    """One OTLP/JSON span as a protobuf `Span`, field by field."""
    message = PbSpan(
        trace_id=bytes.fromhex(span["traceId"]),
        span_id=bytes.fromhex(span["spanId"]),
        name=span["name"],
        kind=span["kind"],
        start_time_unix_nano=int(span["startTimeUnixNano"]),
        end_time_unix_nano=int(span["endTimeUnixNano"]),
    )
    if "parentSpanId" in span:
        message.parent_span_id = bytes.fromhex(span["parentSpanId"])
    for attribute in span["attributes"]:
        _set_value(message.attributes.add(key=attribute["key"]).value, attribute["value"])
    message.status.code = span["status"]["code"]
    if span["status"].get("message"):
        message.status.message = span["status"]["message"]
    return message


def _set_value(target: AnyValue, value: Mapping[str, Any]) -> None:
    if "stringValue" in value:
        target.string_value = value["stringValue"]
    elif "intValue" in value:
        target.int_value = int(value["intValue"])
    elif "doubleValue" in value:
        target.double_value = value["doubleValue"]
    elif "boolValue" in value:
        target.bool_value = value["boolValue"]
    elif "arrayValue" in value:
        for item in value["arrayValue"]["values"]:
            _set_value(target.array_value.values.add(), item)


def headers() -> dict[str, str]:
    """`STRAND_OTLP_HEADERS` (`name=value,name=value`, values URL-decoded as OTel's are)."""
    from urllib.parse import unquote

    found: dict[str, str] = {}
    for pair in settings.STRAND_OTLP_HEADERS.split(","):
        name, sep, value = pair.partition("=")
        if sep and name.strip():
            found[name.strip()] = unquote(value.strip())
    return found


def _post(body: bytes) -> None:
    request = urllib.request.Request(
        settings.STRAND_OTLP_ENDPOINT,
        data=gzip.compress(body, compresslevel=1),
        method="POST",
        headers={
            **headers(),
            "Content-Type": "application/x-protobuf",
            "Content-Encoding": "gzip",
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=settings.STRAND_OTLP_TIMEOUT_S) as answer:
            answer.read(64 * 1024)
    except urllib.error.HTTPError as exc:
        if exc.code in _REFUSED_FOR_GOOD:
            log.error(
                "the OTLP collector refused %d bytes of spans (HTTP %d): skipped",
                len(body),
                exc.code,
            )
            return
        raise PushFailed(f"HTTP {exc.code}") from None
    except (OSError, ValueError) as exc:  # refused, reset, timed out, a bad URL
        raise PushFailed(str(exc) or type(exc).__name__) from None
