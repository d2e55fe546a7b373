"""Bodies are refused at the door, through daphne: a 1 GB body streamed from a generator (never
built in memory) to the sign-in page and to the API is answered 413 after the headers, or,
streamed without a length, as soon as it passes its route's limit. The server answers
before the client has sent more than the kernel's socket buffers hold, its memory does not
grow, nothing is written, and another user is served meanwhile.

(Before the door, four such sign-ins were read whole: 403 after ~20 s each, +0.6 GB resident
for good, ~4 GB of temporary files; a signed-in 300 MB append was answered 413 only after all
of it had arrived.)
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from asgiref.testing import ApplicationCommunicator

from config.body_limits import BodyLimits
from sessions_app import services, store
from sessions_app.services import tokens
from tests.security.daphne_child import Upload, chunked, port_for, resident_kb, serving, zeros

pytestmark = pytest.mark.django_db(transaction=True)

GB = 1024**3
MB = 1024 * 1024
# What the client may have pushed before the answer reached it: what loopback sockets
# buffer on both sides (a few MB at most), never a meaningful part of the body.
EARLY = 8 * MB
# What a server process may grow by over several refused bodies: allocator noise.
GROWTH_KB = 16 * 1024


@pytest.fixture
def server(alice: Any, bob: Any) -> Iterator[Any]:
    with serving(port_for(0)) as process:
        process.port = port_for(0)  # type: ignore[attr-defined]
        yield process


def bearer(user: Any) -> dict[str, str]:
    _, token = tokens.token_create(user, "body limits")
    return {"Authorization": f"Bearer {token}"}


def url(server: Any, path: str) -> str:
    return f"http://127.0.0.1:{server.port}{path}"


def served(server: Any, headers: dict[str, str], username: str) -> None:
    """Another user's request, answered as usual."""
    me = requests.get(url(server, "/api/me"), headers=headers, timeout=30)
    assert me.status_code == 200 and me.json()["username"] == username


def warm(server: Any, headers: dict[str, str]) -> None:
    """Pages and the API answered once, so that what they load is resident before measuring."""
    for path in ("/accounts/login/", "/api/me", "/api/sessions"):
        requests.get(url(server, path), headers=headers, timeout=30)
    form = requests.post(url(server, "/accounts/login/"), data={"username": "x"}, timeout=30)
    assert form.status_code == 403  # no CSRF token: an ordinary refusal, body read


def test_a_gigabyte_sign_in_is_refused_at_the_headers(server: Any, bob: Any) -> None:
    bobs = bearer(bob)
    warm(server, bobs)
    before = resident_kb(server.pid)

    answers = []
    for _ in range(4):
        upload = Upload(
            server.port,
            "/accounts/login/",
            {"Content-Type": "application/x-www-form-urlencoded", "Content-Length": str(GB)},
        )
        served(server, bobs, "bob")  # while that upload is open
        assert not upload.send(zeros(GB)), "the whole gigabyte was taken"
        answers.append(upload.answer())

    for answer in answers:
        assert answer.status == 413
        assert answer.sent < EARLY, answer.sent
        assert answer.headers["content-type"].startswith("text/html")
        assert b"Request body too large" in answer.body and b"8192 bytes" in answer.body
    assert resident_kb(server.pid) - before < GROWTH_KB
    served(server, bobs, "bob")


def test_a_streamed_sign_in_is_cut_off_at_a_few_kilobytes(server: Any, bob: Any) -> None:
    bobs = bearer(bob)
    warm(server, bobs)
    before = resident_kb(server.pid)
    upload = Upload(
        server.port,
        "/accounts/login/",
        {"Content-Type": "application/x-www-form-urlencoded", "Transfer-Encoding": "chunked"},
    )
    assert upload.send(chunked([b"username=alice&password=" + b"x" * 1000]))  # under the limit
    served(server, bobs, "bob")  # while it is being streamed

    assert not upload.send(chunked(zeros(GB)))
    answer = upload.answer()

    assert answer.status == 413 and answer.sent < EARLY
    assert resident_kb(server.pid) - before < GROWTH_KB
    served(server, bobs, "bob")


def test_a_gigabyte_append_is_refused_at_the_headers_and_writes_nothing(
    server: Any, alice: Any, bob: Any
) -> None:
    session = services.session_create(owner=alice, title="target")
    alices, bobs = bearer(alice), bearer(bob)
    warm(server, bobs)
    before = resident_kb(server.pid)
    path = f"/api/sessions/{session.id}/events"

    declared = Upload(
        server.port, path, {**alices, "Content-Type": "application/json", "Content-Length": str(GB)}
    )
    assert not declared.send(zeros(GB))
    streamed = Upload(
        server.port,
        path,
        {**alices, "Content-Type": "application/json", "Transfer-Encoding": "chunked"},
    )
    served(server, bobs, "bob")
    assert not streamed.send(chunked(zeros(GB)))

    for answer in (declared.answer(), streamed.answer()):
        assert answer.status == 413 and answer.sent < EARLY, answer
        assert answer.headers["content-type"] == "application/json"
        refusal = json.loads(answer.body)
        assert refusal["error"] == "too_large" and "4194304 bytes" in refusal["detail"]
    assert resident_kb(server.pid) - before < GROWTH_KB
    assert store.events_after(session.id, -1, 10)[-1].seq == session.last_seq  # nothing added
    served(server, bobs, "bob")


def test_a_made_up_cookie_buys_the_routes_limit_and_no_more(server: Any) -> None:
    upload = Upload(
        server.port,
        "/api/sessions/import",
        {"Cookie": "sessionid=made-up", "Content-Length": str(GB)},
    )
    assert not upload.send(zeros(GB))
    answer = upload.answer()
    assert answer.status == 413 and answer.sent < EARLY
    assert "a Pi file upload" in json.loads(answer.body)["detail"]


def test_bodies_within_their_limits_still_arrive(server: Any, alice: Any) -> None:
    """An append of two events near the 1 MiB an event may hold (past Django's 2.5 MB
    default), and a sign-in form."""
    session = services.session_create(owner=alice, title="large events")
    big = "y" * (900 * 1024)
    events: list[dict[str, Any]] = [
        {
            "type": "user/message",
            "data": {"entry": {"type": "message", "message": {"role": "user", "content": big}}},
        }
        for _ in range(3)
    ]
    response = requests.post(
        url(server, f"/api/sessions/{session.id}/events"),
        json={"expected_seq": session.last_seq, "events": events},
        headers=bearer(alice),
        timeout=60,
    )
    assert response.status_code == 201, response.text[:300]
    assert response.json()["last_seq"] == session.last_seq + 3

    http = requests.Session()
    http.get(url(server, "/accounts/login/"), timeout=30)
    signed_in = http.post(
        url(server, "/accounts/login/"),
        data={
            "username": "alice",
            "password": "alice-pass-1234",
            "csrfmiddlewaretoken": http.cookies["csrftoken"],
        },
        headers={"Referer": url(server, "/accounts/login/")},
        allow_redirects=False,
        timeout=30,
    )
    assert signed_in.status_code == 302


def test_status_lines_name_the_statuses_strand_answers_with(server: Any, alice: Any) -> None:
    """Twisted has no phrase for 422 or 429: daphne's status line said `Unknown Status`."""
    session = services.session_create(owner=alice, title="reasons")
    refused = requests.post(
        url(server, f"/api/sessions/{session.id}/events"),
        json={"expected_seq": "not a number", "events": []},
        headers=bearer(alice),
        timeout=30,
    )
    assert refused.status_code == 422
    assert refused.reason == "Unprocessable Entity"
    assert "Unknown" not in requests.get(url(server, "/api/me"), timeout=30).reason  # 401


# --- the ASGI middleware alone: the door for servers that stream bodies (uvicorn) -----------------


def _inner_app(taken: list[int]) -> Any:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            taken.append(len(message.get("body", b"")))
            if not message.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"read"})

    return app


def _scope(path: str, headers: list[tuple[bytes, bytes]]) -> dict[str, Any]:
    return {"type": "http", "method": "POST", "path": path, "headers": headers}


async def _status(communicator: ApplicationCommunicator) -> tuple[int, bytes]:
    start = await communicator.receive_output(5)
    body = await communicator.receive_output(5)
    return start["status"], body["body"]


@pytest.mark.asyncio
async def test_the_middleware_refuses_a_declared_length_before_the_application_runs() -> None:
    taken: list[int] = []
    communicator = ApplicationCommunicator(
        BodyLimits(_inner_app(taken)),
        _scope("/accounts/login/", [(b"content-length", str(GB).encode())]),
    )
    status, body = await _status(communicator)
    assert status == 413 and b"a sign-in" in body and taken == []


@pytest.mark.asyncio
async def test_the_middleware_cuts_a_streamed_body_off_at_the_limit() -> None:
    taken: list[int] = []
    communicator = ApplicationCommunicator(
        BodyLimits(_inner_app(taken)),
        _scope("/api/sessions/x/events", [(b"authorization", b"Bearer t")]),
    )
    for _ in range(100):  # 6.4 MB in 64 KB pieces, over the 4 MiB an API body may hold
        await communicator.send_input(
            {"type": "http.request", "body": b"0" * 65536, "more_body": True}
        )
    status, body = await _status(communicator)
    assert status == 413 and json.loads(body)["error"] == "too_large"
    assert sum(taken) <= 4 * MB
