"""A model's tool call cannot freeze the server for other users.

Alice's agent greps her folder with catastrophic regular expressions (`(a+)+$` and friends,
which make a backtracking engine run for minutes on a line of a's that ends otherwise) while
Bob lists his sessions over HTTP against the same daphne process. Every one of Bob's requests
is answered correctly, some of them while Alice's tools run, and Alice's greps finish with a
plain answer. The latencies are printed (run with `-s`); `make bench` records them.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import requests

from deploy import daphne
from sessions_app import store
from sessions_app.models import Session
from sessions_app.services import tokens
from tests.runtime.conftest import child_database_url

PORT = 26_000 + os.getpid() % 1000 * 2
PATTERNS = [r"(a+)+$", r"(a|aa)+$", r"(.*a){25}$"]

pytestmark = pytest.mark.django_db(transaction=True)


def fill_with_traps(folder: Path, files: int = 32) -> int:
    """`files` files of 1 MiB: lines of 999 a's ending in '!'. Bytes written."""
    line = b"a" * 999 + b"!\n"
    body = line * (1024 * 1024 // len(line))
    for index in range(files):
        (folder / f"trap-{index:02}.txt").write_bytes(body)
    return files * len(body)


def _at(moment: datetime) -> float:
    return moment.timestamp()


@pytest.fixture
def server(tmp_path: Path) -> Any:
    roots = tmp_path / "workspaces"
    roots.mkdir()
    process = daphne.start(
        PORT,
        {
            "DATABASE_URL": child_database_url(),
            "STRAND_WORKSPACE_ROOTS": str(roots),
            "STRAND_OFFLINE_CHUNK_DELAY_MS": "0",
            "STRAND_TOOL_DELAY_MS": "0",
        },
    )
    yield f"http://127.0.0.1:{PORT}"
    daphne.stop(process)


def test_a_catastrophic_pattern_in_one_session_does_not_stall_another_user(server, alice, bob):
    alice_http, bob_http = requests.Session(), requests.Session()
    alice_http.headers["Authorization"] = f"Bearer {tokens.token_create(alice, 't')[1]}"
    bob_http.headers["Authorization"] = f"Bearer {tokens.token_create(bob, 't')[1]}"
    created = alice_http.post(f"{server}/api/sessions", json={"title": "traps"}, timeout=30)
    assert created.status_code == 201, created.text
    session = Session.objects.get(id=created.json()["id"])
    assert session.cwd, "the server gave Alice no folder"
    fill_with_traps(Path(session.cwd))
    bobs = bob_http.post(f"{server}/api/sessions", json={"title": "Bob's own"}, timeout=30)
    assert bobs.status_code == 201, bobs.text
    bob_session = bobs.json()["id"]

    answered: list[tuple[float, float, int, list[str]]] = []
    stop = threading.Event()

    def bob_lists_his_sessions() -> None:
        while not stop.is_set():
            started = time.time()
            response = bob_http.get(f"{server}/api/sessions", timeout=60)
            ids = [item["id"] for item in response.json().get("items", [])]
            answered.append((started, time.time(), response.status_code, ids))

    bob_thread = threading.Thread(target=bob_lists_his_sessions)
    bob_thread.start()
    try:
        time.sleep(0.2)  # a few answers before the tools start, for comparison
        text = " and ".join(f"search for regex '{p}'" for p in PATTERNS)
        sent = alice_http.post(
            f"{server}/api/sessions/{session.id}/messages", json={"text": text}, timeout=30
        )
        assert sent.status_code == 202, sent.text
        deadline = time.monotonic() + 120
        while not any(e.type == "turn/end" for e in store.events_after(session.id, -1, 1000)):
            assert time.monotonic() < deadline, "Alice's turn did not end"
            time.sleep(0.05)
        time.sleep(0.2)
    finally:
        stop.set()
        bob_thread.join(60)

    events = store.events_after(session.id, -1, 1000)
    results = [e for e in events if e.type == "tool/result"]
    assert len(results) == len(PATTERNS)
    for event, pattern in zip(results, PATTERNS, strict=True):
        message = event.data["entry"]["message"]
        shown = "".join(part.get("text", "") for part in message["content"])
        assert not message["isError"], shown
        assert shown == "No matches found", (pattern, shown)  # Pi's grep (the default tools)

    # Bob was answered every time, with his session and never Alice's.
    assert answered and all(status == 200 for _, _, status, _ in answered)
    assert all(bob_session in ids and str(session.id) not in ids for *_, ids in answered)
    calls = [_at(e.time) for e in events if e.type == "tool/call"]
    window = (min(calls), max(_at(e.time) for e in results))
    during = [end - start for start, end, *_ in answered if window[0] <= start and end <= window[1]]
    before = [end - start for start, end, *_ in answered if end < window[0]]
    assert during, "no request of Bob's was answered while Alice's tools ran"
    print(
        f"\ntools ran {window[1] - window[0]:.3f} s over {len(PATTERNS)} greps of 32 MiB; "
        f"Bob answered {len(during)} times meanwhile: median "
        f"{statistics.median(during) * 1000:.1f} ms, max {max(during) * 1000:.1f} ms "
        f"(before: median {statistics.median(before) * 1000 if before else 0:.1f} ms)"
    )
