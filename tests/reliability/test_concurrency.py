"""Many writers, several server processes, one session.

- Twelve API clients append to one session with `expected_seq`, retrying on 409 with the
  seq the answer carries: every event lands exactly once, seqs stay gapless.
- Two daphne processes on one database receive messages for one session at the same time:
  one turn runs, the other sender is told a turn is running, and turns never overlap.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import requests

from deploy import daphne
from sessions_app import services, store, workspaces
from sessions_app.services import tokens
from tests.runtime.conftest import child_database_url

ROOT = Path(__file__).resolve().parents[2]
BASE_PORT = 24_000 + os.getpid() % 1000 * 2

pytestmark = pytest.mark.django_db(transaction=True)


def start_server(port: int, **env: str) -> subprocess.Popen[bytes]:
    return daphne.start(port, {"DATABASE_URL": child_database_url(), **env})


def stop(process: subprocess.Popen[bytes]) -> None:
    daphne.stop(process)


@pytest.fixture
def alice_token(alice: Any) -> tuple[Any, str]:
    _, token = tokens.token_create(alice, "concurrency")
    return alice, token


def test_many_clients_appending_with_expected_seq_lose_and_double_nothing(alice_token):
    alice, token = alice_token
    session = services.session_create(owner=alice, title="many writers")
    # Hundreds of appends (and retries) by one user in seconds: off the append limit.
    server = start_server(BASE_PORT, STRAND_RATE_LIMITS='{"append": [0, 60]}')
    clients, per_client = 12, 12
    url = f"http://127.0.0.1:{BASE_PORT}/api/sessions/{session.id}/events"
    errors: list[str] = []
    conflicts = Counter[int]()

    def client(index: int) -> None:
        http = requests.Session()
        http.headers["Authorization"] = f"Bearer {token}"
        expected = 0
        for n in range(per_client):
            label = {"type": "label", "targetId": "x", "label": f"{index}:{n}"}
            while True:
                response = http.post(
                    url,
                    json={
                        "expected_seq": expected,
                        "events": [{"type": "entry/label", "data": {"entry": label}}],
                    },
                    timeout=30,
                )
                if response.status_code == 201:
                    expected = response.json()["last_seq"]
                    break
                if response.status_code == 409:
                    conflicts[index] += 1
                    expected = response.json()["current_seq"]
                    continue
                errors.append(f"{response.status_code} {response.text}")
                return

    try:
        threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        stop(server)
    assert not errors, errors[:3]
    events = store.events_after(session.id, -1, 100_000)
    assert [e.seq for e in events] == list(range(clients * per_client + 1))
    labels = Counter(e.data["entry"]["label"] for e in events if e.type == "entry/label")
    assert labels == Counter(f"{i}:{n}" for i in range(clients) for n in range(per_client))
    assert sum(conflicts.values()) > 0, "the clients never raced: the test proves nothing"


def test_two_processes_run_at_most_one_turn_of_a_session(
    alice_token, tmp_path, settings, monkeypatch
):
    alice, token = alice_token
    # The servers it starts read the workspace root from the environment.
    roots = str(tmp_path / "workspaces")
    settings.STRAND_WORKSPACE_ROOTS = [roots]
    monkeypatch.setenv("STRAND_WORKSPACE_ROOTS", roots)
    folder = Path(workspaces.default_cwd(alice))
    (folder / "notes.txt").write_text("notes\n")
    session = services.session_create(owner=alice, title="two servers", cwd=str(folder))
    slow = {"STRAND_OFFLINE_CHUNK_DELAY_MS": "30", "STRAND_TOOL_DELAY_MS": "300"}
    servers = [start_server(BASE_PORT + i, **slow) for i in range(2)]
    try:
        rounds = 4
        for round_no in range(rounds):
            answers: list[requests.Response] = []
            barrier = threading.Barrier(2)

            def send(
                port: int,
                barrier: threading.Barrier,
                answers: list[requests.Response],
                round_no: int,
            ) -> None:
                barrier.wait()
                answers.append(
                    requests.post(
                        f"http://127.0.0.1:{port}/api/sessions/{session.id}/messages",
                        json={"text": f"read notes.txt (round {round_no})"},
                        headers={"Authorization": f"Bearer {token}"},
                        timeout=30,
                    )
                )

            threads = [
                threading.Thread(target=send, args=(BASE_PORT + i, barrier, answers, round_no))
                for i in range(2)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            statuses = sorted(a.status_code for a in answers)
            assert statuses == [202, 409], [a.text for a in answers]
            refused = next(a for a in answers if a.status_code == 409).json()
            assert refused["error"] and "turn" in refused["detail"].lower()
            deadline = time.monotonic() + 30
            while not any(
                e.type == "turn/end" and e.data["turn"] == round_no + 1
                for e in store.events_after(session.id, -1, 100_000)
            ):
                assert time.monotonic() < deadline, "the turn did not end"
                time.sleep(0.1)
    finally:
        for server in servers:
            stop(server)
    running = 0
    for event in store.events_after(session.id, -1, 100_000):
        if event.type == "turn/start":
            running += 1
            assert running == 1, "two turns ran at once"
        elif event.type == "turn/end":
            running -= 1
    assert running == 0
