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
