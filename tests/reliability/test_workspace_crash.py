"""A turn killed with SIGKILL while its tool is writing: after recovery the folder and the
facts agree.

The rule: crash recovery, when it closes the dead turn (under its turn lock, in the same
append as the `turn/end` that closes it), records what the tool left in the folder as a
`recovery` snapshot at the entry the folder shows. So once recovery is done, the folder
holds exactly the workspace the facts give at the leaf, half-written file included, and
`verify` finds nothing; a file changed by hand afterwards is reported by `verify` as drift
until the next turn records it (as `outside`).

Alice's agent (the `coding` preset, so `bash` in its sandbox) appends a line to a file
every few milliseconds; the server is killed once the file has some lines, then started
again and its first request starts recovery.
"""

from __future__ import annotations

import json
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
from runtime.tools import WorkspaceQuota
from runtime.workspace import scan
from sessions_app import store
from sessions_app.models import Session
from sessions_app.presets import CODING_PRESET
from sessions_app.selectors.verify import verify_session
from sessions_app.selectors.workspace import workspace_at
from sessions_app.services import tokens
from tests.runtime.conftest import child_database_url

PORT = 24_000 + os.getpid() % 1000

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not sandbox.available(), reason="bubblewrap cannot run here"),
]

COMMAND = "for i in $(seq 1 3000); do echo line $i >> slow.txt; sleep 0.005; done"


def serve(port: int, roots: Path, presets: dict[str, Any]) -> subprocess.Popen[bytes]:
    """daphne on the test database, its workspaces under `roots`, offering `presets`,
    recovering at start as a real server does: the server a crash test kills."""
    return daphne.start(
        port,
        {
            "DATABASE_URL": child_database_url(),
            "STRAND_WORKSPACE_ROOTS": str(roots),
            "STRAND_OFFLINE_CHUNK_DELAY_MS": "0",
            "STRAND_TOOL_DELAY_MS": "0",
            "STRAND_RECOVER_AT_START": "1",
            "STRAND_PRESETS": json.dumps(presets),
        },
    )


def start(roots: Path) -> subprocess.Popen[bytes]:
    return serve(PORT, roots, {"slow": {**CODING_PRESET, "tool_timeout_s": 60}})


def wait_for(predicate: Any, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := predicate()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)
    return found


def types(session: Session) -> list[str]:
    return [e.type for e in store.events_after(session.id, -1, 100_000)]


def on_disk(folder: Path) -> dict[str, str]:
    found = scan(folder, {}, WorkspaceQuota(max_bytes=0, max_entries=0))
    return {path: state.sha256 for path, state in found.manifest.items()}


def in_facts(session: Session) -> dict[str, str]:
    session.refresh_from_db()
    manifest = workspace_at(session.id, session.leaf_entry_id) or {}
    return {path: state.sha256 for path, state in manifest.items()}


def test_a_turn_killed_mid_write_is_recovered_with_folder_and_facts_agreeing(
    tmp_path: Path, alice: Any
) -> None:
    roots = tmp_path / "workspaces"
    roots.mkdir()
    http = requests.Session()
    http.headers["Authorization"] = f"Bearer {tokens.token_create(alice, 'crash')[1]}"
    base = f"http://127.0.0.1:{PORT}/api/sessions"
    server: subprocess.Popen[bytes] | None = start(roots)
    try:
        created = http.post(base, json={"title": "crash", "preset": "slow"}, timeout=30)
        assert created.status_code == 201, created.text
        session = Session.objects.get(id=created.json()["id"])
        folder = Path(session.cwd)
        wrote = http.post(
            f"{base}/{session.id}/messages", json={"text": "write kept.txt: before"}, timeout=30
        )
        assert wrote.status_code == 202, wrote.text
        approve(http, base, session)
        wait_for(lambda: types(session).count("turn/end") == 1)
        sent = http.post(
            f"{base}/{session.id}/messages", json={"text": f"run {COMMAND}"}, timeout=30
        )
        assert sent.status_code == 202, sent.text
        approve(http, base, session)
        slow = folder / "slow.txt"
        wait_for(lambda: slow.exists() and slow.read_text().count("\n") > 20)
        assert server is not None
        server.send_signal(signal.SIGKILL)
        server.wait(10)
        server = None
        # The sandbox dies with its parent; the file stops growing.
        time.sleep(0.5)
        size = slow.stat().st_size
        time.sleep(0.3)
        assert slow.stat().st_size == size
        lines = slow.read_text().count("\n")
        assert 0 < lines < 3000, "the kill did not land while the command was writing"
        assert types(session).count("turn/end") == 1  # the killed turn is still open

        server = start(roots)
        assert http.get(f"http://127.0.0.1:{PORT}/api/me", timeout=30).status_code == 200
        wait_for(lambda: types(session).count("turn/end") == 2)
        events = store.events_after(session.id, -1, 100_000)
        ended = [e for e in events if e.type == "turn/end"][-1]
        assert ended.data["reason"] == "interrupted"
        recovered = [
            e for e in events if e.type == "workspace/snapshot" and e.data["reason"] == "recovery"
        ]
        assert len(recovered) == 1 and "slow.txt" in recovered[0].data["files"]
        assert recovered[0].seq == ended.seq - 1  # in the append that closes the turn

        assert on_disk(folder) == in_facts(session)
        assert in_facts(session)["slow.txt"] == on_disk(folder)["slow.txt"]
        assert verify_session(Session.objects.get(id=session.id)) is None

        # A change by hand is drift until a turn records it.
        (folder / "kept.txt").write_text("changed by hand")
        problem = verify_session(Session.objects.get(id=session.id))
        assert problem is not None and "drifted" in problem and "kept.txt" in problem
        listed = http.post(f"{base}/{session.id}/messages", json={"text": "list files"}, timeout=30)
        assert listed.status_code == 202, listed.text
        wait_for(lambda: types(session).count("turn/end") == 3)
        assert verify_session(Session.objects.get(id=session.id)) is None
        assert on_disk(folder) == in_facts(session)
    finally:
        if server is not None:
            daphne.stop(server)


def approve(http: requests.Session, base: str, session: Session) -> None:
    pending = wait_for(lambda: http.get(f"{base}/{session.id}/approvals", timeout=30).json())
    decided = http.post(
        f"{base}/{session.id}/approvals/{pending[0]['approval_id']}",
        json={"outcome": "allowed"},
        timeout=30,
    )
    assert decided.status_code == 204, decided.text
