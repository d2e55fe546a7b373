"""`POST /v1/traces`: OTLP/HTTP trace export into observed sessions.

What an OpenTelemetry SDK's OTLP/HTTP exporter sends, pointed at Strand
(`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=https://strand.example/v1/traces`,
`OTEL_EXPORTER_OTLP_TRACES_HEADERS=Authorization=Bearer strand_…`): an
`ExportTraceServiceRequest` as protobuf (`application/x-protobuf`) or OTLP/JSON
(`application/json`), optionally `Content-Encoding: gzip`. The answer is an
`ExportTraceServiceResponse` in the request's encoding, with `partial_success` naming how
many spans were not recorded and why (spans that are not GenAI spans, say).

Refusals: 401 without a valid API token; 413 for a body over `STRAND_MAX_OTLP_BYTES` as sent
(refused at the door, before it is read) or over `STRAND_MAX_OTLP_DECODED_BYTES` once
gunzipped (decompression stops there: a gzip bomb costs no more than that); 415 for another
content type or encoding; 400 for a body that is not OTLP trace data; 429 (with Retry-After,
which OTLP exporters honour) past the `otlp` rate limit. A JSON refusal is the API's
`{"error", "detail"}` with OTLP's `google.rpc.Status` fields (`code`, `message`) beside them;
a protobuf one is that `Status` encoded. A refused request records nothing.
"""

from __future__ import annotations

import json
import zlib
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from projections.otel_ingest import OtlpError, parse_otlp_json
from sessions_app.errors import DomainError
from sessions_app.limits import RateLimited
from sessions_app.services import otel_ingest, ratelimit, tokens
from sessions_app.store import StoreError

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
# google.rpc.Code for each HTTP refusal, as OTLP/HTTP pairs them.
_RPC_CODE = {400: 3, 401: 16, 403: 7, 404: 5, 409: 10, 413: 11, 415: 3, 422: 3, 429: 8}


class Refused(Exception):
    def __init__(self, status: int, code: str, detail: str) -> None:
        super().__init__(detail)
        self.status, self.code, self.detail = status, code, detail


@csrf_exempt
def traces(request: HttpRequest) -> HttpResponse:
    kind = _content_type(request)
    try:
        if request.method != "POST":
            raise Refused(405, "method_not_allowed", "send trace data with POST")
        user = _user(request)
        ratelimit.rate_hit(user, "otlp")
        if kind not in (PROTOBUF, JSON):
            raise Refused(
                415,
                "unsupported_media_type",
                f"send {PROTOBUF} or {JSON}, not {kind or 'no content type'}",
            )
        spans = _spans(_body(request), kind)
        result = otel_ingest.otel_ingest(owner=user, spans=spans)
    except Refused as refused:
        return _refusal(kind, refused.status, refused.code, refused.detail)
    except RateLimited as limited:
        response = _refusal(kind, 429, limited.code, str(limited))
        response["Retry-After"] = str(limited.retry_after)
        return response
    except StoreError as exc:
        status = 413 if exc.code in ("too_large", "quota_exceeded") else 422
        status = 409 if exc.code == "conflict" else status
        return _refusal(kind, status, exc.code, str(exc))
    except DomainError as exc:
        return _refusal(kind, 422, exc.code, str(exc))
    return _answer(kind, result)


def _content_type(request: HttpRequest) -> str:
    return (request.content_type or "").split(";")[0].strip().lower()


def _user(request: HttpRequest) -> Any:
    scheme, _, token = request.headers.get("Authorization", "").strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Refused(401, "unauthorized", "send an API token: Authorization: Bearer strand_…")
    try:
        return tokens.token_user(token.strip())
    except tokens.InvalidToken as exc:
        raise Refused(401, "unauthorized", str(exc)) from None


def _body(request: HttpRequest) -> bytes:
    try:
        raw = request.body  # at most STRAND_MAX_OTLP_BYTES: the door refused more unread
    except Exception as exc:  # RequestDataTooBig past DATA_UPLOAD_MAX_MEMORY_SIZE
        raise Refused(413, "too_large", str(exc) or "the body is too large") from None
    encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding in ("", "identity"):
        return raw
    if encoding != "gzip":
        raise Refused(415, "unsupported_encoding", f"send gzip or no encoding, not {encoding}")
    return gunzip_bounded(raw, int(settings.STRAND_MAX_OTLP_DECODED_BYTES))


def gunzip_bounded(raw: bytes, limit: int) -> bytes:
    """`raw` gunzipped, refused as soon as it would pass `limit` bytes (never inflated
    further than that), or when it is not one whole gzip stream."""
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        out = inflater.decompress(raw, limit + 1)
    except zlib.error as exc:
        raise Refused(400, "bad_request", f"the body is not valid gzip: {exc}") from None
    if len(out) > limit or inflater.unconsumed_tail:
        raise Refused(
            413,
            "too_large",
            f"the body is over {limit} bytes once gunzipped (STRAND_MAX_OTLP_DECODED_BYTES)",
        )
    if not inflater.eof:
        raise Refused(400, "bad_request", "the gzip body ends before its stream does")
    return out


def _spans(body: bytes, kind: str) -> list[Any]:
    try:
        if kind == PROTOBUF:
            message = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
            return parse_otlp_json(json_format.MessageToDict(message), ids="base64")
        return parse_otlp_json(json.loads(body.decode("utf-8")))
    except (DecodeError, RecursionError) as exc:
        raise Refused(400, "bad_request", f"the body is not OTLP trace data: {exc}") from None
    except (UnicodeDecodeError, ValueError) as exc:
        # OtlpError is a ValueError too: it names the field that is wrong.
        prefix = "" if isinstance(exc, OtlpError) else "the body is not JSON: "
        raise Refused(400, "bad_request", f"{prefix}{exc}"[:2000]) from None


def _answer(kind: str, result: otel_ingest.IngestResult) -> HttpResponse:
    response = trace_service_pb2.ExportTraceServiceResponse()
    if result.rejected:
        response.partial_success.rejected_spans = result.rejected
        response.partial_success.error_message = result.message
    if kind == PROTOBUF:
        return HttpResponse(response.SerializeToString(), content_type=PROTOBUF)
    return HttpResponse(json.dumps(json_format.MessageToDict(response)), content_type=JSON)


def _refusal(kind: str, status: int, code: str, detail: str) -> HttpResponse:
    rpc = _RPC_CODE.get(status, 2)
    if kind == PROTOBUF:
        response = HttpResponse(_rpc_status(rpc, detail), status=status, content_type=PROTOBUF)
    else:
        body = {"error": code, "detail": detail, "code": rpc, "message": detail}
        response = HttpResponse(json.dumps(body), status=status, content_type=JSON)
    if status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="strand"'
    return response


def _rpc_status(code: int, message: str) -> bytes:
    """A `google.rpc.Status` (code = field 1, message = field 2), encoded by hand: its
    two fields are all OTLP reads, and its package is not a dependency of the server."""
    text = message.encode("utf-8")
    return b"\x08" + _varint(code) + b"\x12" + _varint(len(text)) + text


def _varint(number: int) -> bytes:
    out = bytearray()
    while True:
        low, number = number & 0x7F, number >> 7
        if number:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)
