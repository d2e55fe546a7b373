"""`POST /v1/traces` over real HTTP (daphne): bodies that are malformed, oversized (as sent
and once gunzipped: a gzip bomb), unauthenticated or of an unsupported type are refused with
a 4xx saying why, and write nothing; another user's spans with the same conversation id
make a session of that user's own; spans that are not GenAI spans are reported as a partial
success; spans in one body in any order are placed by their times."""

from __future__ import annotations

import gzip
import json
import zlib
from typing import Any

import pytest
import requests
from django.contrib.auth.models import User
from django.test import Client
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from sessions_app.models import Event, ObservedConversation, Session
from sessions_app.services import tokens
from tests.ingest.spans import agent_run, body, span

pytestmark = pytest.mark.django_db

MB = 1024 * 1024


def post(
    url: str, token: str | None, data: bytes, kind: str = "application/json", **headers: str
) -> requests.Response:
    sent = {"Content-Type": kind, **headers}
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    return requests.post(f"{url}/v1/traces", data=data, headers=sent, timeout=60)


def encoded(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload).encode()


def sessions_of(user: Any) -> int:
    return Session.objects.filter(owner=user).count()


def test_unauthenticated_and_bad_tokens_are_refused(strand_url: str, people: Any) -> None:
    data = encoded(body(*agent_run("conv-unauth")))
    for token in (None, "strand_not-a-real-token", "nonsense"):
        answer = post(strand_url, token, data)
        assert answer.status_code == 401, answer.text
        assert answer.json()["error"] == "unauthorized"
        assert answer.headers["WWW-Authenticate"].startswith("Bearer")
    assert not ObservedConversation.objects.filter(key__contains="conv-unauth").exists()


def test_a_revoked_token_is_refused() -> None:
    # In this process: a token made and revoked in the test's transaction.
    erin = User.objects.create_user(username="erin", password="erin-pass-1234")
    row, token = tokens.token_create(erin, "to revoke")
    tokens.token_revoke(erin, row.pk)
    client = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
    data = encoded(body(*agent_run("conv-revoked")))
    answer = client.post("/v1/traces", data, content_type="application/json")
    assert answer.status_code == 401 and "revoked" in answer.json()["detail"]
    assert sessions_of(erin) == 0


@pytest.mark.parametrize(
    ("data", "kind", "status", "says"),
    [
        (b"{not json", "application/json", 400, "not JSON"),
        (b"\xff\xfe", "application/json", 400, "not JSON"),
        (b"[" * 100_000, "application/json", 400, "not"),
        (encoded({"resourceSpans": 3}), "application/json", 400, "resourceSpans"),
        (encoded(body(span("chat m", "zz"))), "application/json", 400, "spanId"),
        (b"\x0a\xff\xff\xff\xff\x0f", "application/x-protobuf", 400, "not OTLP"),
        (b"<spans/>", "application/xml", 415, "application/x-protobuf"),
    ],
)
def test_malformed_bodies_are_refused_saying_why(
    strand_url: str, people: Any, data: bytes, kind: str, status: int, says: str
) -> None:
    alice = people["alice"]
    before = sessions_of(alice["user"])
    answer = post(strand_url, alice["token"], data, kind)
    assert answer.status_code == status, answer.text
    if kind == "application/x-protobuf":
        status_message = answer.content  # google.rpc.Status: code 3, then the message
        assert status_message[:2] == b"\x08\x03" and says.encode() in status_message
    else:
        refusal = answer.json()
        assert says in refusal["detail"] and refusal["message"] == refusal["detail"]
    assert sessions_of(alice["user"]) == before


def test_one_bad_span_refuses_the_whole_body(strand_url: str, people: Any) -> None:
    alice = people["alice"]
    before = sessions_of(alice["user"])
    spans = [*agent_run("conv-half"), span("chat m", "5" * 16, trace="0" * 32)]
    answer = post(strand_url, alice["token"], encoded(body(*spans)))
    assert answer.status_code == 400 and "traceId" in answer.json()["detail"]
    assert sessions_of(alice["user"]) == before


def test_an_oversized_body_is_refused_at_the_door(strand_url: str, people: Any) -> None:
    answer = post(strand_url, people["alice"]["token"], b" " * (5 * MB))
    assert answer.status_code == 413
    assert answer.json()["error"] == "too_large"
    # Without a token, the anonymous limit (8 KiB) applies.
    answer = post(strand_url, None, b" " * (64 * 1024))
    assert answer.status_code == 413


def gzip_bomb(size: int) -> bytes:
    """`size` bytes of zeros, gzipped a piece at a time (never held inflated here)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    piece = bytes(MB)
    out = [packer.compress(piece) for _ in range(size // MB)]
    return b"".join(out) + packer.flush()


def test_a_gzip_bomb_is_refused_once_it_passes_the_decoded_limit(
    strand_url: str, people: Any
) -> None:
    bomb = gzip_bomb(128 * MB)  # eight times the decoded limit
    assert len(bomb) < 1 * MB  # small as sent: only the inflated size gives it away
    answer = post(
        strand_url,
        people["alice"]["token"],
        bomb,
        "application/json",
        **{"Content-Encoding": "gzip"},
    )
    assert answer.status_code == 413, answer.text
    assert "once gunzipped" in answer.json()["detail"]
    broken = gzip.compress(encoded(body(*agent_run("conv-cut"))))[:-12]
    answer = post(
        strand_url,
        people["alice"]["token"],
        broken,
        "application/json",
        **{"Content-Encoding": "gzip"},
    )
    assert answer.status_code == 400 and "gzip" in answer.json()["detail"]
    answer = post(
        strand_url, people["alice"]["token"], b"x", "application/json", **{"Content-Encoding": "br"}
    )
    assert answer.status_code == 415


def test_another_users_conversation_id_never_lands_in_your_session(
    strand_url: str, people: Any
) -> None:
    alice, bob = people["alice"], people["bob"]
    run = agent_run("shared-conversation-id")
    assert post(strand_url, alice["token"], encoded(body(*run))).status_code == 200
    alices = (
        Session.objects.get(owner=alice["user"], observedconversation__isnull=False)
        if False
        else None
    )
    del alices
    mine = ObservedConversation.objects.get(
        owner=alice["user"], key="conversation:shared-conversation-id"
    )
    before = Event.objects.filter(session_id=mine.session_id).count()
    # Bob sends spans with the same conversation id (and the same span ids).
    theirs = agent_run("shared-conversation-id", answer="Bob's answer.")
    assert post(strand_url, bob["token"], encoded(body(*theirs))).status_code == 200
    assert Event.objects.filter(session_id=mine.session_id).count() == before
    bobs = ObservedConversation.objects.get(
        owner=bob["user"], key="conversation:shared-conversation-id"
    )
    assert bobs.session_id != mine.session_id
    assert Session.objects.get(pk=bobs.session_id).owner == bob["user"]
    # And Bob cannot read Alice's.
    seen = requests.get(
        f"{strand_url}/api/sessions/{mine.session_id}/views/chat",
        headers={"Authorization": f"Bearer {bob['token']}"},
        timeout=30,
    )
    assert seen.status_code in (403, 404)


def test_spans_that_are_not_genai_are_a_partial_success(strand_url: str, people: Any) -> None:
    spans = [
        *agent_run("conv-partial", trace="c" * 32),
        span("GET /weather", "9" * 16, trace="c" * 32, start_ms=50, end_ms=51),
    ]
    request = trace_service_pb2.ExportTraceServiceRequest()
    from google.protobuf import json_format

    json_format.ParseDict(_base64_ids(body(*spans)), request)
    answer = post(
        strand_url, people["alice"]["token"], request.SerializeToString(), "application/x-protobuf"
    )
    assert answer.status_code == 200, answer.content
    response = trace_service_pb2.ExportTraceServiceResponse.FromString(answer.content)
    assert response.partial_success.rejected_spans == 1
    assert "not a GenAI span" in response.partial_success.error_message
    conversation = ObservedConversation.objects.get(key="conversation:conv-partial")
    assert (
        Event.objects.filter(session_id=conversation.session_id, type="request/sent").count() == 2
    )


def _base64_ids(payload: dict[str, Any]) -> dict[str, Any]:
    import base64

    for resource in payload["resourceSpans"]:
        for scope in resource["scopeSpans"]:
            for one in scope["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in one:
                        one[key] = base64.b64encode(bytes.fromhex(one[key])).decode()
    return payload


def test_spans_in_any_order_are_recorded_in_time_order(strand_url: str, people: Any) -> None:
    run = agent_run("conv-shuffled", trace="d" * 32)
    answer = post(strand_url, people["alice"]["token"], encoded(body(*reversed(run))))
    assert answer.status_code == 200
    conversation = ObservedConversation.objects.get(key="conversation:conv-shuffled")
    events = list(Event.objects.filter(session_id=conversation.session_id).order_by("seq"))
    assert [e.type for e in events][1:4] == ["turn/start", "user/message", "step/start"]
    assert events[-1].type == "turn/end"
    times = [e.data["observed"]["time"] for e in events[1:] if e.type != "step/end"]
    assert times == sorted(times)


def test_past_the_rate_limit_an_exporter_is_told_when_to_retry(settings: Any) -> None:
    settings.STRAND_RATE_LIMITS = {"otlp": (2, 60)}
    dave = User.objects.create_user(username="dave", password="dave-pass-1234")
    client = Client(HTTP_AUTHORIZATION=f"Bearer {tokens.token_create(dave, 't')[1]}")
    data = encoded(body(*agent_run("conv-limited", trace="e" * 32)))
    statuses = [
        client.post("/v1/traces", data, content_type="application/json").status_code
        for _ in range(3)
    ]
    assert statuses == [200, 200, 429]
    refused = client.post("/v1/traces", data, content_type="application/json")
    assert int(refused["Retry-After"]) >= 1
    assert refused.json()["error"] == "rate_limited"


def test_spans_of_no_genai_operation_make_no_session(strand_url: str, people: Any) -> None:
    bob = people["bob"]
    before = sessions_of(bob["user"])
    lone = span("GET /health", "7" * 16, trace="f" * 32, start_ms=1, end_ms=2)
    answer = post(strand_url, bob["token"], encoded(body(lone)))
    assert answer.status_code == 200
    assert answer.json()["partialSuccess"]["rejectedSpans"] == "1"
    assert sessions_of(bob["user"]) == before
