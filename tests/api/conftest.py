"""Clients of the API for each persona, and the fixtures of the API tests.

The personas (Alice, Bob and Carol, staff) are those of `tests/conftest.py`. Each talks to
the API either with a personal token (`Authorization: Bearer …`) or with a signed-in
browser session that sends the CSRF token, as a browser would.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from projections.records import EventRecord
from sessions_app import agent, services, store, workspaces
from sessions_app.models import Session
from sessions_app.services import tokens
from sessions_app.store import NewEvent

CSRF_SECRET = "A" * 32  # a CSRF cookie value Django accepts; the header repeats it

# The name of a preset the server offers in these tests (`served_presets`): the offline
# model, with a kept window small enough that a few messages can be compacted on request.
OFFLINE_PRESET = "offline-small"


def user_msg(text: str) -> NewEvent:
    return NewEvent(
        "user/message",
        {"entry": {"type": "message", "message": {"role": "user", "content": text}}},
    )


@dataclass
class Api:
    """A client for one persona: JSON in, (status, decoded body) out."""

    client: Client
    csrf: bool = False  # send the CSRF header on unsafe methods (cookie sign-in)

    def call(self, method: str, path: str, body: Any = None, **extra: Any) -> Any:
        if self.csrf and method not in ("GET", "HEAD", "OPTIONS"):
            extra.setdefault("HTTP_X_CSRFTOKEN", CSRF_SECRET)
        data = json.dumps(body) if body is not None else ""
        url = path if path.startswith("/api/") else "/api" + path
        return self.client.generic(method, url, data, content_type="application/json", **extra)

    def get(self, path: str, **extra: Any) -> Any:
        return self.call("GET", path, **extra)

    def post(self, path: str, body: Any = None, **extra: Any) -> Any:
        return self.call("POST", path, body if body is not None else {}, **extra)

    def patch(self, path: str, body: Any) -> Any:
        return self.call("PATCH", path, body)

    def put(self, path: str, body: Any) -> Any:
        return self.call("PUT", path, body)

    def delete(self, path: str) -> Any:
        return self.call("DELETE", path)


def token_api(user: Any) -> Api:
    _, plaintext = tokens.token_create(user, "tests")
    return Api(Client(HTTP_AUTHORIZATION=f"Bearer {plaintext}"))


def cookie_api(user: Any) -> Api:
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    client.cookies["csrftoken"] = CSRF_SECRET
    return Api(client, csrf=True)


def body_of(response: Any) -> Any:
    return json.loads(response.content)


def tree_walk(api: Api, sid: Any, limit: int = 2000, query: str = "") -> tuple[list[dict], int]:
    """Every row the tree API gives from its first window on, following each cursor once
    (the rows before, after, the path above, every subtree, an entry's further children,
    the other roots), and the bytes of all answers. Rows come in reading order: earlier
    windows first, subtrees and further children after the rows they hang from."""
    path = f"/sessions/{sid}/tree?limit={limit}{query}"
    size = 0

    def fetch(cursor: str | None) -> dict:
        nonlocal size
        response = api.get(path + (f"&cursor={cursor}" if cursor else ""))
        assert response.status_code == 200, response.content[:300]
        size += len(response.content)
        page = body_of(response)
        assert len(page["nodes"]) <= limit
        return page

    def expand(page: dict) -> list[dict]:
        out: list[dict] = []
        for cursor in page.get("children_cursors", {}).values():
            out.extend(down(cursor))
        for row in page["nodes"]:
            out.append(row)
            for key in ("subtree_cursor", "children_cursor"):
                if row.get(key):
                    out.extend(down(row[key]))
        return out + down(page.get("roots_cursor"))

    def down(cursor: str | None) -> list[dict]:
        rows: list[dict] = []
        while cursor:
            page = fetch(cursor)
            rows.extend(expand(page))
            cursor = page["next_cursor"]
        return rows

    first = fetch(None)
    rows = expand(first)
    cursor = first["previous_cursor"]
    while cursor:
        page = fetch(cursor)
        rows = expand(page) + rows
        cursor = page["previous_cursor"]
    return rows + down(first["next_cursor"]), size


def content_of(response: Any) -> bytes:
    """The body of a response, streamed (the exports) or not."""
    if getattr(response, "streaming", False):
        return b"".join(response.streaming_content)
    return bytes(response.content)


@pytest.fixture
def as_alice(alice: Any) -> Api:
    return token_api(alice)


@pytest.fixture
def as_bob(bob: Any) -> Api:
    return token_api(bob)


@pytest.fixture
def as_carol(carol: Any) -> Api:
    return token_api(carol)


@pytest.fixture
def anonymous() -> Api:
    return Api(Client())


@pytest.fixture(autouse=True)
def served_presets(serve_preset: Any) -> None:
    serve_preset(OFFLINE_PRESET, **{**services.DEFAULT_PRESET, "keep_recent_tokens": 10})


@pytest.fixture
def workspace_root(tmp_path: Path, settings: Any) -> Path:
    """The workspace root: each user's own folder is `user-<id>` in it."""
    root = tmp_path / "workspaces"
    root.mkdir()
    settings.STRAND_WORKSPACE_ROOTS = [str(root)]
    return root


@pytest.fixture
def workspace(workspace_root: Path, alice: Any) -> Path:
    """Alice's own folder, with a file: where her sessions work."""
    folder = Path(workspaces.default_cwd(alice))
    (folder / "notes.txt").write_text("hello world\n")
    return folder


@pytest.fixture
def alice_session(alice: Any) -> Session:
    """Alice's session: three messages with a secret marker, a branch and a label."""
    session = services.session_create(owner=alice, title="Alice's secret plans")
    a, _b = store.append_events(
        session.id, 0, [user_msg("secret-marker-7731 first"), user_msg("second")]
    ).entry_ids
    store.append_events(
        session.id,
        2,
        [
            NewEvent("leaf/moved", {"to": a, "reason": "navigate"}),
            user_msg("secret-marker-7731 on a branch"),
            NewEvent("entry/label", {"entry": {"type": "label", "targetId": a, "label": "start"}}),
        ],
    )
    session.refresh_from_db()
    return session


# --- the agent ---------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _fast_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STRAND_OFFLINE_CHUNK_DELAY_MS", "0")
    monkeypatch.delenv("STRAND_TOOL_DELAY_MS", raising=False)


@pytest.fixture(scope="session", autouse=True)
def _agent_engine(request: pytest.FixtureRequest) -> Iterator[None]:
    # The agent's database threads hold connections of their own: close them before the
    # test database is dropped.
    request.getfixturevalue("django_db_setup")
    yield
    agent.agent_shutdown()


@pytest.fixture(autouse=True)
def _stop_runs() -> Iterator[None]:
    yield
    agent.agent_stop_local_runs()


def wait_idle(session: Session, timeout: float = 20) -> None:
    """Until no turn runs in the session (this process's runs)."""
    agent.agent_wait(session.id, timeout)
    deadline = time.monotonic() + timeout
    while agent.agent_turn_status(session) == "running":
        assert time.monotonic() < deadline, "the turn did not end"
        time.sleep(0.02)


def wait_for(predicate: Any, timeout: float = 20) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def converse(api: Api, session: Session, text: str, decision: str = "allowed") -> list[EventRecord]:
    """Send `text`, answer every approval the turn asks with `decision`; the turn's events."""
    before = store.events_after(session.id, -1, 100_000)
    after_seq = before[-1].seq if before else -1
    sent = api.post(f"/sessions/{session.id}/messages", {"text": text})
    assert sent.status_code == 202, sent.content
    base = f"/sessions/{session.id}"

    def settled() -> bool:
        for pending in body_of(api.get(f"{base}/approvals")):
            decided = api.post(f"{base}/approvals/{pending['approval_id']}", {"outcome": decision})
            assert decided.status_code in (204, 409), decided.content
        return body_of(api.get(base))["turn_status"] == "idle"

    wait_for(settled, timeout=120)
    wait_idle(session)
    return list(store.events_after(session.id, after_seq, 100_000))
