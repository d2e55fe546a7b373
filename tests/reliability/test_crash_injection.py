"""Crash injection: a server process running turns is killed with SIGKILL at random points.

A seeded driver (STRAND_CRASH_SEED, default 7; STRAND_CRASH_KILLS, default 14, about 3 s a
kill: set it higher for a longer hunt) starts daphne on the test database, sends the offline
model messages that read, list, search and write files (writes wait for an approval, which the driver sometimes gives), sometimes asks for a
compaction, and kills the server at a random moment. After each restart — whose first
request starts crash recovery — it checks that:

- every event committed before the kill is still there, unchanged (the log only grows);
- seqs are gapless from 0 (and unique: the database enforces it);
- every turn that was started is closed exactly once, the killed one as `interrupted`;
- every step is closed, every `tool/call` has exactly one `tool/result`;
- the context of the current leaf pairs each tool call with a result;
- `verify` finds no difference between the log and the stored projections;
- the session page opens in the restarted server (and its chat view through the API).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import requests
from django.test import Client

from deploy import daphne
from projections.context import build_session_context
from sessions_app import services, store, workspaces
from sessions_app.models import Session
from sessions_app.selectors.verify import verify_session
from sessions_app.services import tokens
from tests.runtime.conftest import child_database_url

ROOT = Path(__file__).resolve().parents[2]
SEED = int(os.environ.get("STRAND_CRASH_SEED", "7"))
KILLS = int(os.environ.get("STRAND_CRASH_KILLS", "14"))
PORT = 23_000 + os.getpid() % 1000

WRITE = "write out.txt: hello from the crash test"
MESSAGES = [
    "read notes.txt",
    "list files",
    "search for needle",
    "read notes.txt and read todo.md",
    WRITE,
    "list files and search for needle and read todo.md",
    "tell me about this conversation",
]

pytestmark = pytest.mark.django_db(transaction=True)


class Server:
    def __init__(self, token: str, cookie: str) -> None:
        self.process: subprocess.Popen[bytes] | None = None
        self.http = requests.Session()
        self.http.headers["Authorization"] = f"Bearer {token}"
        self.base = f"http://127.0.0.1:{PORT}/api"
        self.browser = requests.Session()
        self.browser.cookies.set("sessionid", cookie)

    def page(self, path: str) -> str:
        response = self.browser.get(f"http://127.0.0.1:{PORT}{path}", timeout=10)
        assert response.status_code == 200, response.status_code
        return response.text

    def start(self) -> None:
        env = {
            "DATABASE_URL": child_database_url(),
            "STRAND_RECOVER_AT_START": "1",
            "STRAND_OFFLINE_CHUNK_DELAY_MS": "4",
            "STRAND_TOOL_DELAY_MS": "40",
        }
        self.process = daphne.start(PORT, env)

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)
        self.process = None

    def get(self, path: str, **params: Any) -> Any:
        response = self.http.get(self.base + path, params=params, timeout=10)
        assert response.status_code == 200, response.text
        return response.json()

    def post(self, path: str, body: dict[str, Any]) -> requests.Response:
        return self.http.post(self.base + path, json=body, timeout=10)


def _open_turns(session: Session) -> list[int]:
    started: set[int] = set()
    for event in store.events_after(session.id, -1, 1_000_000):
        if event.type == "turn/start":
            started.add(event.data["turn"])
        elif event.type == "turn/end":
            started.discard(event.data["turn"])
    return sorted(started)


def _wait_recovered(session: Session, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while _open_turns(session):
        assert time.monotonic() < deadline, "recovery did not close the open turn"
        time.sleep(0.05)


def _check(
    session: Session, before: list[tuple[int, str, Any]], server: Server
) -> list[tuple[int, str, Any]]:
    events = store.events_after(session.id, -1, 1_000_000)
    now = [(e.seq, e.type, e.data) for e in events]
    assert now[: len(before)] == before, "a committed event was lost or changed"
    assert [seq for seq, _, _ in now] == list(range(len(now))), "seqs are not gapless"

    ends = Counter(e.data["turn"] for e in events if e.type == "turn/end")
    starts = Counter(e.data["turn"] for e in events if e.type == "turn/start")
    assert set(ends) == set(starts) and all(n == 1 for n in ends.values()), (starts, ends)
    assert all(n == 1 for n in starts.values())
    step_starts = Counter(
        (e.data["turn"], e.data["step"]) for e in events if e.type == "step/start"
    )
    step_ends = Counter((e.data["turn"], e.data["step"]) for e in events if e.type == "step/end")
    assert step_starts == step_ends
    calls = Counter(e.data["call_id"] for e in events if e.type == "tool/call")
    results = Counter(
        e.data["entry"]["message"]["toolCallId"] for e in events if e.type == "tool/result"
    )
    assert all(n == 1 for n in calls.values()) and all(n == 1 for n in results.values())
    assert set(results) >= set(calls), "a dispatched tool call has no result"

    session.refresh_from_db()
    context = build_session_context(store.entries_of(session.id), session.leaf_entry_id)
    asked = {
        b["id"]
        for m in context.messages
        if m.get("role") == "assistant"
        for b in m.get("content", [])
        if isinstance(b, dict) and b.get("type") == "toolCall"
    }
    answered = {m["toolCallId"] for m in context.messages if m.get("role") == "toolResult"}
    assert asked <= answered, "the context holds a tool call without its result"
    assert verify_session(session) is None
    chat = server.get(f"/sessions/{session.id}/views/chat")
    assert "items" in chat
    assert session.title in server.page(f"/sessions/{session.id}/")
    return now


def _drive(server: Server, session: Session, rng: random.Random, *, ask: bool = False) -> None:
    """Start work, then let it run for a random moment (deciding approvals on the way).
    With `ask`, the work is a write, and the moment starts once its approval is asked: on a
    loaded machine a random moment alone may never reach one."""
    if ask:
        server.post(f"/sessions/{session.id}/messages", {"text": WRITE})
        asked_by = time.monotonic() + 30
        while not server.get(f"/sessions/{session.id}/approvals"):
            assert time.monotonic() < asked_by, "the write asked for no approval"
            time.sleep(0.05)
    elif rng.random() < 0.15:
        server.post(f"/sessions/{session.id}/compact", {})
    else:
        server.post(f"/sessions/{session.id}/messages", {"text": rng.choice(MESSAGES)})
    deadline = time.monotonic() + rng.uniform(0.0, 0.6)
    while time.monotonic() < deadline:
        if rng.random() < 0.5:
            for approval in server.get(f"/sessions/{session.id}/approvals"):
                outcome = rng.choice(["allowed", "allowed", "rejected"])
                server.post(
                    f"/sessions/{session.id}/approvals/{approval['approval_id']}",
                    {"outcome": outcome},
                )
        time.sleep(rng.uniform(0.0, 0.1))


def test_sigkill_at_random_points_loses_and_doubles_nothing(
    alice, tmp_path, settings, monkeypatch, serve_preset
):
    # The servers it starts read the workspace root and the presets from the environment.
    roots = str(tmp_path / "workspaces")
    settings.STRAND_WORKSPACE_ROOTS = [roots]
    monkeypatch.setenv("STRAND_WORKSPACE_ROOTS", roots)
    workspace = Path(workspaces.default_cwd(alice))
    (workspace / "notes.txt").write_text("a needle in the notes, line after line\n" * 120)
    (workspace / "todo.md").write_text("- find the needle\n- write the report\n")
    preset = serve_preset(
        "crash",
        provider="offline",
        model="strand-offline-1",
        tools=["read_file", "list_files", "grep", "write_file"],
        # A small window, so that automatic compaction happens too.
        context_window=6000,
        reserve_tokens=1000,
        keep_recent_tokens=1500,
    )
    session = services.session_create(owner=alice, title="crash", cwd=str(workspace), preset=preset)
    _, token = tokens.token_create(alice, "crash")
    browser = Client(SERVER_NAME="127.0.0.1")
    browser.force_login(alice)
    server = Server(token, browser.cookies["sessionid"].value)
    rng = random.Random(SEED)
    snapshot: list[tuple[int, str, Any]] = []
    interrupted_before = 0
    try:
        for kill in range(KILLS):
            server.start()
            server.get("/me")  # the first request starts recovery
            _wait_recovered(session)
            snapshot = _check(session, snapshot, server)
            _drive(server, session, rng, ask=kill == 1)
            server.kill()
        server.start()
        server.get("/me")
        _wait_recovered(session)
        snapshot = _check(session, snapshot, server)
    finally:
        if server.process is not None:
            server.kill()
    interrupted = sum(1 for _, t, d in snapshot if t == "turn/end" and d["reason"] == "interrupted")
    assert interrupted > interrupted_before, "no kill landed inside a turn: the test proves nothing"
    kinds = Counter(t for _, t, _ in snapshot)
    assert kinds["tool/result"] and kinds["approval/asked"], kinds
