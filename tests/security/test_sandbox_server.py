"""Hostile commands through daphne: the server keeps answering other users meanwhile.

Alice's agent, on the `coding` preset, runs (once she allows it) one command that does
everything hostile at once: it reads the server's environment and the secret key, knocks
on the server's own port, floods its output, fork-bombs and then sleeps forever. It is
stopped at the tool's time limit with an error result that holds nothing of the server,
while Bob's requests to the same daphne process are all answered.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import requests
from django.conf import settings

from deploy import daphne
from runtime import sandbox
from sessions_app import store
from sessions_app.models import Session
from sessions_app.presets import CODING_PRESET
from sessions_app.services import tokens
from tests.runtime.conftest import child_database_url

PORT = 27_000 + os.getpid() % 1000 * 2
CANARY = f"canary-{uuid.uuid4()}"

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not sandbox.available(), reason="bubblewrap cannot run here"),
]


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
            "STRAND_SANDBOX_CANARY": CANARY,
            "STRAND_PRESETS": json.dumps({"hostile": {**CODING_PRESET, "tool_timeout_s": 8}}),
        },
    )
    yield f"http://127.0.0.1:{PORT}"
    daphne.stop(process)


def test_a_hostile_command_fails_cleanly_and_bob_is_answered(server: str, alice, bob) -> None:
    alice_http, bob_http = requests.Session(), requests.Session()
    alice_http.headers["Authorization"] = f"Bearer {tokens.token_create(alice, 't')[1]}"
    bob_http.headers["Authorization"] = f"Bearer {tokens.token_create(bob, 't')[1]}"
    created = alice_http.post(
        f"{server}/api/sessions", json={"title": "hostile", "preset": "hostile"}, timeout=30
    )
    assert created.status_code == 201, created.text
    session = Session.objects.get(id=created.json()["id"])
    bobs = bob_http.post(f"{server}/api/sessions", json={"title": "Bob's own"}, timeout=30)
    assert bobs.status_code == 201, bobs.text
    key = (Path(settings.STATE_DIR) / "secret_key").read_text().strip()

    answered: list[int] = []
    stop = threading.Event()

    def bob_lists_his_sessions() -> None:
        while not stop.is_set():
            answered.append(bob_http.get(f"{server}/api/sessions", timeout=60).status_code)

    command = (
        f"cat /proc/1/environ; env; cat {settings.STATE_DIR}/secret_key; "
        f"exec 3<>/dev/tcp/127.0.0.1/{PORT} && echo connected-to-the-server; "
        "yes | head -c 50000000; (b(){ b|b& }; b); sleep infinity"
    )
    base = f"{server}/api/sessions/{session.id}"
    bob_thread = threading.Thread(target=bob_lists_his_sessions)
    bob_thread.start()
    try:
        sent = alice_http.post(f"{base}/messages", json={"text": f"run {command}"}, timeout=30)
        assert sent.status_code == 202, sent.text
        deadline = time.monotonic() + 120
        while not any(e.type == "turn/end" for e in store.events_after(session.id, -1, 1000)):
            assert time.monotonic() < deadline, "Alice's turn did not end"
            for pending in alice_http.get(f"{base}/approvals", timeout=30).json():
                alice_http.post(
                    f"{base}/approvals/{pending['approval_id']}",
                    json={"outcome": "allowed"},
                    timeout=30,
                )
            time.sleep(0.1)
    finally:
        stop.set()
        bob_thread.join(60)

    [result] = [e for e in store.events_after(session.id, -1, 1000) if e.type == "tool/result"]
    message = result.data["entry"]["message"]
    text = "".join(part.get("text", "") for part in message["content"])
    assert message["toolName"] == "bash" and message["isError"]
    assert result.data.get("error_code") in ("TOOL_TIMEOUT", "OUTPUT_LIMIT")
    for secret in (CANARY, key, "DATABASE_URL", "connected-to-the-server"):
        assert secret not in text
    assert "y\ny\ny\n" in text  # the flood ran, and its head is kept
    assert "Resource temporarily unavailable" in text  # the bomb met the process limit
    assert len(text) < 64 * 1024  # head and tail of 50 MB of output
    assert answered and all(status == 200 for status in answered)
