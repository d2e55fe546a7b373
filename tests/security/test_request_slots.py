"""Three hundred requests at once from one user, through daphne: before `RequestSlots`, each
ran on a thread and a Postgres connection of its own, Postgres ran out of connections and
202 of them (and anyone else's meanwhile) were answered 500. Now they wait their turn:
every answer is a 200 (or a rate limit's 429), and Bob, asking meanwhile, is served."""

from __future__ import annotations

import asyncio
import json
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import requests

from config.request_slots import RequestSlots
from deploy import daphne
from sessions_app.services import tokens
from tests.runtime.conftest import child_database_url

pytestmark = pytest.mark.django_db(transaction=True)

AT_ONCE = 300


@pytest.fixture
def server() -> Any:
    port = daphne.free_port()
    process = daphne.start(port, {"DATABASE_URL": child_database_url(), "STRAND_RATE_LIMITS": "{}"})
    yield f"http://127.0.0.1:{port}"
    daphne.stop(process)


def burst(base: str, alice: str, bob: str) -> tuple[list[int], int]:
    """`AT_ONCE` requests of Alice's and one of Bob's, released together, each on a thread
    and a connection of its own: their statuses."""
    gate = threading.Barrier(AT_ONCE + 1)

    def get(token: str) -> int:
        with requests.Session() as http:
            http.headers["Authorization"] = f"Bearer {token}"
            gate.wait()
            return http.get(f"{base}/api/sessions", params={"title": "x"}, timeout=60).status_code

    with ThreadPoolExecutor(AT_ONCE + 1) as pool:
        alices = [pool.submit(get, alice) for _ in range(AT_ONCE)]
        bobs = pool.submit(get, bob)
        return [f.result() for f in alices], bobs.result()


def test_hundreds_of_requests_at_once_wait_their_turn(server: str, alice: Any, bob: Any) -> None:
    alice_token = tokens.token_create(alice, "burst")[1]
    bob_token = tokens.token_create(bob, "meanwhile")[1]
    answers, bobs = burst(server, alice_token, bob_token)
    statuses = Counter(answers)
    assert set(statuses) <= {200, 429}, statuses
    assert bobs == 200


def test_a_request_that_waits_too_long_for_a_slot_is_answered_503() -> None:
    """One slot, held by a slow request: the next waits its 0.05 s and gets a 503 with a
    JSON body and Retry-After; once the slot is free, the next one goes in."""
    release = asyncio.Event()
    served: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        served.append(scope["path"])
        if scope["path"] == "/slow":
            await release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    slots = RequestSlots(app, slots=1, wait_s=0.05)

    async def call(path: str) -> list[dict[str, Any]]:
        sent: list[dict[str, Any]] = []

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await slots({"type": "http", "path": path}, None, send)
        return sent

    async def run() -> tuple[list[dict[str, Any]], ...]:
        slow = asyncio.create_task(call("/slow"))
        await asyncio.sleep(0.01)
        refused = await call("/next")
        release.set()
        return refused, await slow, await call("/after")

    refused, slow, after = asyncio.run(run())
    assert refused[0]["status"] == 503
    headers = dict(refused[0]["headers"])
    assert headers[b"content-type"] == b"application/json" and int(headers[b"retry-after"]) >= 1
    assert json.loads(refused[1]["body"])["error"] == "busy"
    assert slow[0]["status"] == 200 and after[0]["status"] == 200
    assert served == ["/slow", "/after"]  # the refused one never reached the app


class _Held:
    """An application whose requests stay in it until released, by path."""

    def __init__(self) -> None:
        self.inside: list[str] = []
        self.order: list[str] = []
        self.gates: dict[str, asyncio.Event] = {}

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        path = scope["path"]
        self.inside.append(path)
        self.order.append(path)
        await self.gates.setdefault(path, asyncio.Event()).wait()
        self.inside.remove(path)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    def release(self, path: str) -> None:
        self.gates.setdefault(path, asyncio.Event()).set()


def _from(token: str, path: str) -> dict[str, Any]:
    return {
        "type": "http",
        "path": path,
        "headers": [(b"authorization", f"Bearer {token}".encode())],
    }


async def _call(slots: RequestSlots, scope: dict[str, Any]) -> int:
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await slots(scope, None, send)
    return int(sent[0]["status"])


def test_one_client_holds_at_most_its_share_and_the_next_goes_to_another() -> None:
    """Four slots, two a client: Alice's six requests held in the app take two, Bob's goes
    in beside them at once; as Alice's end, a freed slot goes to Bob's second request, who
    holds fewer, before Alice's next, and then to Carol, never served, before Alice."""
    app = _Held()
    slots = RequestSlots(app, slots=4, wait_s=5, per_client=2)

    async def run() -> None:
        alice = [asyncio.create_task(_call(slots, _from("a", f"/a{n}"))) for n in range(6)]
        await asyncio.sleep(0.01)
        assert sorted(app.inside) == ["/a0", "/a1"]
        bob = asyncio.create_task(_call(slots, _from("b", "/b0")))
        await asyncio.sleep(0.01)
        assert sorted(app.inside) == ["/a0", "/a1", "/b0"]
        app.release("/b0")
        assert await bob == 200

        # Two slots, two a client, both Alice's: Bob and then Carol wait behind her four.
        tight = RequestSlots(app, slots=2, wait_s=5, per_client=2)
        held = [asyncio.create_task(_call(tight, _from("a", f"/t{n}"))) for n in range(4)]
        await asyncio.sleep(0.01)
        later = [
            asyncio.create_task(_call(tight, _from("b", "/tb"))),
            asyncio.create_task(_call(tight, _from("c", "/tc"))),
        ]
        await asyncio.sleep(0.01)
        app.release("/t0")
        await asyncio.sleep(0.01)
        app.release("/t1")
        await asyncio.sleep(0.01)
        assert app.order[-4:] == ["/t0", "/t1", "/tb", "/tc"]  # not Alice's /t2 and /t3
        for path in ("/tb", "/tc", "/t2", "/t3"):
            app.release(path)
        for n in range(6):
            app.release(f"/a{n}")
        assert await asyncio.gather(*alice, *held, *later) == [200] * 12

    asyncio.run(run())


def test_the_client_is_its_token_else_its_session_cookie_else_its_address() -> None:
    from config.request_slots import client_key

    cookie = b"sessionid"
    token = {"headers": [(b"cookie", b"sessionid=s1"), (b"authorization", b"Bearer t1")]}
    assert client_key(token, cookie) == b"a:Bearer t1"
    session = {"headers": [(b"cookie", b"csrftoken=x; sessionid=s1")], "client": ("10.0.0.1", 5)}
    assert client_key(session, cookie) == b"s:s1"
    assert client_key({"headers": [], "client": ("10.0.0.1", 5)}, cookie) == b"c:10.0.0.1"
