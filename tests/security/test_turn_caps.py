"""Turns are a bounded resource, tried for real against a daphne process.

Each turn below asks to write a file, so it waits for an approval: the turn that once held
a Postgres connection of its own, forever. Now a user has a few turns open at once (a
small `STRAND_MAX_TURNS_PER_USER` here), beyond which every door that starts a turn
answers 429 with `Retry-After` and writes nothing, while another user is served; the
waiting turns share their process's one lock connection; a turn waits for its approval a
bounded time and ends as `approval_timeout`; and deleting a session stops its turn first,
so that neither the turn nor its place is left behind.

Waits in these tests are client-side guards against hanging (`WAIT_S`), never timings.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
import requests
from django.conf import settings
from django.db import connection

from deploy import daphne
from sessions_app import agent, services
from sessions_app.agent.admission import turn_place_key
from sessions_app.models import Event, Session
from sessions_app.pg import connection_params
from sessions_app.services import tokens
from sessions_app.turn_lock import turn_lock_key
from tests.runtime.conftest import child_database_url, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

WAIT_S = 30
WRITE = "write f.txt: x"  # the offline model answers with a write call: an approval


@dataclass
class Server:
    url: str
    process: Any


@pytest.fixture
def serve() -> Iterator[Callable[..., Server]]:
    """Starts daphne on the test database with extra settings (as environment)."""
    started: list[Server] = []

    def start(**env: str) -> Server:
        port = daphne.free_port()
        process = daphne.start(
            port,
            {
                "DATABASE_URL": child_database_url(),
                "STRAND_RECOVER_AT_START": "0",
                "STRAND_OFFLINE_CHUNK_DELAY_MS": "0",
                "STRAND_WORKSPACE_ROOTS": os.pathsep.join(settings.STRAND_WORKSPACE_ROOTS),
                # Many messages in a test: the message rate limit is not under test here.
                "STRAND_RATE_LIMITS": '{"message": [1000, 60]}',
                # Every connection of this process names it (libpq reads PGAPPNAME), so a
                # count of its connections is not disturbed by other processes.
                "PGAPPNAME": f"strand-test-{port}",
                **env,
            },
        )
        server = Server(f"http://127.0.0.1:{port}", process)
        started.append(server)
        return server

    yield start
    for server in started:
        daphne.stop(server.process)


class Client:
    """A user of the API with a token of their own."""

    def __init__(self, server: Server, user: Any) -> None:
        _, token = tokens.token_create(user, "tests")
        self.base = f"{server.url}/api"
        self.http = requests.Session()
        self.http.headers["Authorization"] = f"Bearer {token}"

    def post(self, path: str, body: Any = None) -> requests.Response:
        return self.http.post(self.base + path, json=body or {}, timeout=WAIT_S)

    def get(self, path: str) -> Any:
        answer = self.http.get(self.base + path, timeout=WAIT_S)
        assert answer.status_code == 200, answer.text[:300]
        return answer.json()

    def delete(self, path: str) -> requests.Response:
        return self.http.delete(self.base + path, timeout=WAIT_S)

    def send(self, session: Session, text: str = WRITE) -> requests.Response:
        return self.post(f"/sessions/{session.id}/messages", {"text": text})

    def waiting(self, session: Session) -> str:
        """Until the session's turn waits for an approval: its id."""
        pending = until(lambda: self.get(f"/sessions/{session.id}/approvals"))
        return str(pending[0]["approval_id"])

    def idle(self, session: Session) -> None:
        until(lambda: self.get(f"/sessions/{session.id}")["turn_status"] == "idle")


class Browser:
    """A signed-in browser: the pages' forms, with their CSRF token."""

    def __init__(self, server: Server, username: str) -> None:
        self.url = server.url
        self.http = requests.Session()
        login = f"{server.url}/accounts/login/"
        self.http.get(login, timeout=WAIT_S)
        answer = self.post("/accounts/login/", username=username, password=f"{username}-pass-1234")
        assert answer.status_code == 302, answer.text[:300]

    def post(self, path: str, **data: str) -> requests.Response:
        return self.http.post(
            self.url + path,
            data={"csrfmiddlewaretoken": self.http.cookies["csrftoken"], **data},
            headers={"Referer": self.url + path},
            allow_redirects=False,
            timeout=WAIT_S,
        )


def until(predicate: Callable[[], Any]) -> Any:
    deadline = time.monotonic() + WAIT_S
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def sessions_of(user: Any, count: int) -> list[Session]:
    return [services.session_create(owner=user, title=f"turn {i}") for i in range(count)]


def events_of(session: Session) -> list[Event]:
    return list(Event.objects.filter(session_id=session.id).order_by("seq"))


def advisory_holders(keys: list[int]) -> dict[int, int]:
    """Which backend holds each advisory lock of `keys` (those held)."""
    unsigned = {(k & 0xFFFFFFFFFFFFFFFF): k for k in keys}
    with connection.cursor() as cur:
        cur.execute(
            "SELECT classid::bigint, objid::bigint, pid FROM pg_locks "
            "WHERE locktype = 'advisory' AND granted AND objsubid = 1 "
            "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        )
        held = {(int(c) << 32) | int(o): int(pid) for c, o, pid in cur.fetchall()}
    return {unsigned[u]: pid for u, pid in held.items() if u in unsigned}


def connections_of(server: Server) -> int:
    """The database connections the server's process holds open."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND backend_type = 'client backend' AND application_name = %s",
            [f"strand-test-{server.url.rsplit(':', 1)[1]}"],
        )
        row = cur.fetchone()
        assert row is not None
        return int(row[0])


def assert_capped(answer: requests.Response) -> None:
    assert answer.status_code == 429, answer.text[:300]
    body = answer.json()
    assert body["error"] == "rate_limited"
    assert "too many turns at once: at most 3" in body["detail"]
    assert int(answer.headers["Retry-After"]) == body["retry_after"] > 0


# --- the cap --------------------------------------------------------------------------------


def test_turns_beyond_the_cap_are_refused_at_every_door(
    serve: Callable[..., Server], alice: Any, bob: Any
) -> None:
    server = serve(STRAND_MAX_TURNS_PER_USER="3")
    as_alice, as_bob = Client(server, alice), Client(server, bob)
    done, *waiting_ones = sessions_of(alice, 4)
    extra, spare = sessions_of(alice, 2)

    # A turn that completes gives its place back, and leaves a request to replay.
    assert as_alice.send(done, "hello").status_code == 202
    as_alice.idle(done)
    sent_seq = next(e.seq for e in events_of(done) if e.type == "request/sent")

    approvals = []
    for session in waiting_ones:
        assert as_alice.send(session).status_code == 202
        approvals.append(as_alice.waiting(session))

    before = {s.id: len(events_of(s)) for s in (done, extra, spare)}
    assert_capped(as_alice.send(extra))
    assert_capped(as_alice.post(f"/sessions/{extra.id}/follow-up", {"text": "then this"}))
    assert_capped(as_alice.post(f"/sessions/{extra.id}/steer", {"text": "or this"}))
    assert_capped(as_alice.post(f"/sessions/{done.id}/retry", {}))
    assert_capped(as_alice.post(f"/sessions/{done.id}/requests/{sent_seq}/replay", {}))
    browser = Browser(server, "alice")
    asked = next(e.entry_id for e in events_of(done) if e.type == "user/message")
    for path, form in [
        (f"/sessions/{spare.id}/messages", {"text": WRITE}),
        (f"/sessions/{done.id}/resend", {"entry_id": str(asked), "text": "hello again"}),
    ]:
        page = browser.post(path, **form)
        assert page.status_code == 429, page.text[:300]
        assert int(page.headers["Retry-After"]) > 0
        assert "Too many turns at once: at most 3 of yours" in page.text
    assert {s.id: len(events_of(s)) for s in (done, extra, spare)} == before  # nothing written

    # Another user is served meanwhile, to the end of a turn.
    bobs = services.session_create(owner=bob, title="bob's")
    assert as_bob.send(bobs, "hello").status_code == 202
    as_bob.idle(bobs)
    assert events_of(bobs)[-1].data["reason"] == "completed"

    # One waiting turn ends: its place is free for the next.
    answer = as_alice.post(
        f"/sessions/{waiting_ones[0].id}/approvals/{approvals[0]}", {"outcome": "rejected"}
    )
    assert answer.status_code == 204, answer.text[:300]
    as_alice.idle(waiting_ones[0])
    assert as_alice.send(extra).status_code == 202
    as_alice.waiting(extra)
    assert_capped(as_alice.send(spare))


def test_the_places_are_counted_across_processes(serve: Callable[..., Server], alice: Any) -> None:
    """Two processes, one cap: the places are advisory locks, not a count in memory."""
    first, second = serve(STRAND_MAX_TURNS_PER_USER="3"), serve(STRAND_MAX_TURNS_PER_USER="3")
    on_first, on_second = Client(first, alice), Client(second, alice)
    sessions = sessions_of(alice, 4)
    for client, session in zip((on_first, on_second, on_first), sessions, strict=False):
        assert client.send(session).status_code == 202
        client.waiting(session)
    assert_capped(on_second.send(sessions[3]))
    assert_capped(on_first.send(sessions[3]))
    places = advisory_holders([turn_place_key(alice.id, n) for n in range(3)])
    assert len(places) == 3 and len(set(places.values())) == 2  # both processes hold some


# --- connections ------------------------------------------------------------------------


def test_waiting_turns_hold_no_connection_of_their_own(
    serve: Callable[..., Server], alice: Any
) -> None:
    server = serve(STRAND_MAX_TURNS_PER_USER="40")
    as_alice = Client(server, alice)
    warm, *sessions = sessions_of(alice, 21)
    assert as_alice.send(warm).status_code == 202  # the process's lock connection opens
    as_alice.waiting(warm)
    before = connections_of(server)

    for session in sessions:
        assert as_alice.send(session).status_code == 202
    for session in sessions:
        as_alice.waiting(session)

    # Twenty more waiting turns; a connection each would be twenty more connections, held
    # for as long as they wait. (The threads that served the requests may hold theirs a
    # moment longer on a busy machine: the count is asked until it settles.)
    assert before > 0
    wait_for(lambda: connections_of(server) <= before + 2, timeout=10)
    holders = advisory_holders([turn_lock_key(s.id) for s in [warm, *sessions]])
    assert len(holders) == 21 and len(set(holders.values())) == 1  # one connection holds all


# --- the approval timeout ---------------------------------------------------------------


def test_a_turn_waits_for_its_approval_a_bounded_time(
    serve: Callable[..., Server], alice: Any
) -> None:
    server = serve(STRAND_APPROVAL_TIMEOUT_S="1", STRAND_MAX_TURNS_PER_USER="1")
    as_alice = Client(server, alice)
    session, after = sessions_of(alice, 2)
    assert as_alice.send(session).status_code == 202
    approval = as_alice.waiting(session)
    as_alice.idle(session)  # nobody decides

    events = events_of(session)
    decided = next(e for e in events if e.type == "approval/decided")
    assert decided.data == {"approval_id": approval, "outcome": "cancelled", "by": "timeout"}
    result = next(e for e in events if e.type == "tool/result")
    assert result.data["error_code"] == "APPROVAL_TIMEOUT"
    assert result.data["entry"]["message"]["isError"] is True
    assert events[-1].type == "turn/end" and events[-1].data["reason"] == "approval_timeout"
    assert not (Path(Session.objects.get(id=session.id).cwd) / "f.txt").exists()

    trace = as_alice.get(f"/sessions/{session.id}/views/trace")
    assert trace["spans"][0]["status"] == "approval_timeout"
    chat = as_alice.get(f"/sessions/{session.id}/views/chat")
    notes = [item["notice"] for item in chat["items"] if item["kind"] == "note"]
    assert [n["kind"] for n in notes] == ["approval_timeout"]
    assert notes[0]["text"] == "Stopped: no decision on an approval came in time."
    listed = Browser(server, "alice").http.get(f"{server.url}/", timeout=WAIT_S)
    assert 'class="pill state approval_timeout"' in listed.text

    # The place went with the turn: the next one starts.
    assert as_alice.send(after, "hello").status_code == 202
    as_alice.idle(after)


# --- delete while a turn runs -----------------------------------------------------------


@pytest.mark.parametrize("door", ["api", "page"])
def test_deleting_a_session_stops_its_turn_first(
    serve: Callable[..., Server], alice: Any, door: str
) -> None:
    server = serve(STRAND_MAX_TURNS_PER_USER="1")
    as_alice = Client(server, alice)
    session, next_one = sessions_of(alice, 2)
    assert as_alice.send(session).status_code == 202
    as_alice.waiting(session)
    assert advisory_holders([turn_lock_key(session.id)])

    if door == "api":
        answer = as_alice.delete(f"/sessions/{session.id}")
        assert answer.status_code == 204, answer.text[:300]
    else:
        answer = Browser(server, "alice").post(f"/sessions/{session.id}/delete")
        assert answer.status_code == 302 and answer.headers["Location"] == "/", answer.text[:300]

    assert not Session.objects.filter(id=session.id).exists()
    assert not Event.objects.filter(session_id=session.id).exists()
    assert advisory_holders([turn_lock_key(session.id), turn_place_key(alice.id, 0)]) == {}
    # The turn's place is free: with a cap of one, the next turn starts.
    assert as_alice.send(next_one, "hello").status_code == 202
    as_alice.idle(next_one)


# --- a lost lock connection -------------------------------------------------------------


def test_a_lost_lock_connection_is_taken_back_or_its_turn_stopped(alice: Any) -> None:
    """The process's lock connection dies (here: its backend is terminated) and, before the
    process notices, someone else takes one of its sessions' locks. The engine's check
    takes the other lock back, so that turn keeps waiting, and cancels the turn whose lock
    is gone, so that it does not write on as if it held it."""
    kept, taken = sessions_of(alice, 2)
    for session in (kept, taken):
        agent.agent_send_message(session.id, WRITE)
    until(lambda: all(agent.agent_pending_approvals(s.id) for s in (kept, taken)))
    keys = {s.id: turn_lock_key(s.id) for s in (kept, taken)}
    holder = advisory_holders(list(keys.values()))[keys[kept.id]]

    with psycopg.connect(**connection_params(), autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s)", [holder])
        until(lambda: not advisory_holders(list(keys.values())))
        other.execute("SELECT pg_advisory_lock(%s)", [keys[taken.id]])

        ended = until(
            lambda: [e for e in events_of(taken) if e.type == "turn/end"]
        )  # the engine's periodic check found the lock gone
        assert ended[0].data["reason"] == "aborted"
        back = until(lambda: advisory_holders([keys[kept.id]]))
        assert back[keys[kept.id]] != holder  # a new lock connection took it back
        assert agent.agent_turn_status(kept.id) == "running"
        assert agent.agent_pending_approvals(kept.id)
