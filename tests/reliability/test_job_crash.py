"""A background job whose server is killed with SIGKILL: recovery records it as lost,
exactly once.

Alice's agent starts a job that appends a line to a file every few milliseconds; its turn
ends at once. While the job runs, recovery in another process leaves it alone (the job's
lock is held by the server running it). The server is killed once the file has some lines:
the sandbox dies with it and the file stops growing. The next server's start-up recovery
writes `job/ended` reason `lost`; recovering again (another process's, a turn's) writes
nothing more.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import requests

from deploy import daphne
from runtime import sandbox
from sessions_app import agent, store
from sessions_app.models import Session
from sessions_app.presets import CODING_PRESET
from sessions_app.services import tokens
from tests.reliability.test_workspace_crash import COMMAND, approve, serve

PORT = 24_000 + (os.getpid() + 500) % 1000

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not sandbox.available(), reason="bubblewrap cannot run here"),
]


def start(roots: Path) -> subprocess.Popen[bytes]:
    return serve(PORT, roots, {"jobs": CODING_PRESET})


def wait_for(predicate: Any, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := predicate()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)
    return found


def of_type(session: Session, kind: str) -> list[Any]:
    return [e for e in store.events_after(session.id, -1, 100_000) if e.type == kind]


def test_a_job_killed_with_its_server_is_recorded_lost_exactly_once(
    tmp_path: Path, alice: Any
) -> None:
    roots = tmp_path / "workspaces"
    roots.mkdir()
    http = requests.Session()
    http.headers["Authorization"] = f"Bearer {tokens.token_create(alice, 'crash')[1]}"
    base = f"http://127.0.0.1:{PORT}/api/sessions"
    server: subprocess.Popen[bytes] | None = start(roots)
    try:
        created = http.post(base, json={"title": "job crash", "preset": "jobs"}, timeout=30)
        assert created.status_code == 201, created.text
        session = Session.objects.get(id=created.json()["id"])
        slow = Path(session.cwd) / "slow.txt"
        sent = http.post(
            f"{base}/{session.id}/messages",
            json={"text": f"run in background {COMMAND}"},
            timeout=30,
        )
        assert sent.status_code == 202, sent.text
        approve(http, base, session)
        wait_for(lambda: of_type(session, "turn/end"))
        [started] = of_type(session, "job/started")
        assert started.data["job_id"] == "bash-1"
        wait_for(lambda: slow.exists() and slow.read_text().count("\n") > 20)

        # Recovery elsewhere while the server runs the job: the job is alive, left alone.
        [report] = agent.agent_recover([session.id])
        assert report.lost_jobs == 0 and not of_type(session, "job/ended")

        assert server is not None
        server.send_signal(signal.SIGKILL)
        server.wait(10)
        server = None
        time.sleep(0.5)
        size = slow.stat().st_size
        time.sleep(0.3)
        assert slow.stat().st_size == size, "the job outlived its server"
        assert 0 < slow.read_text().count("\n") < 3000
        assert not of_type(session, "job/ended")

        server = start(roots)
        assert http.get(f"http://127.0.0.1:{PORT}/api/me", timeout=30).status_code == 200
        [lost] = wait_for(lambda: of_type(session, "job/ended"))
        assert lost.data["job_id"] == "bash-1" and lost.data["reason"] == "lost"
        assert lost.turn == started.turn
        # Once: recovering again, here and in the server (a turn's start), adds nothing.
        [again] = agent.agent_recover([session.id])
        assert again.lost_jobs == 0
        # The model's tools report it.
        listed = http.post(f"{base}/{session.id}/messages", json={"text": "list jobs"}, timeout=30)
        assert listed.status_code == 202, listed.text
        wait_for(lambda: len(of_type(session, "turn/end")) == 2)
        assert len(of_type(session, "job/ended")) == 1
        [result] = of_type(session, "tool/result")[-1:]
        text = result.data["entry"]["message"]["content"][0]["text"]
        assert text.startswith("bash-1  lost: the process running it stopped")
    finally:
        if server is not None:
            daphne.stop(server)
        agent.agent_shutdown()
