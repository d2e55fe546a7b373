"""A server process killed with SIGKILL while a subagent's child session runs: after the
restart, recovery closes the child's turn (`interrupted`) and gives the parent's `task` call
its one error result, each exactly once, however often recovery runs again."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import requests

from deploy import daphne
from sessions_app import agent, services, store, workspaces
from sessions_app.models import Session
from sessions_app.selectors.verify import verify_session
from sessions_app.services import tokens
from tests.runtime.conftest import child_database_url

PORT = 25_000 + os.getpid() % 500

pytestmark = pytest.mark.django_db(transaction=True)


def _wait(predicate: Any, what: str, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def _open_turns(session_id: Any) -> set[int]:
    open_: set[int] = set()
    for event in store.events_after(session_id, -1, 100_000):
        if event.type == "turn/start":
            open_.add(event.data["turn"])
        elif event.type == "turn/end":
            open_.discard(event.data["turn"])
    return open_


def test_sigkill_while_a_child_runs_closes_child_and_call_exactly_once(
    alice: Any, tmp_path: Path, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    roots = str(tmp_path / "workspaces")
    settings.STRAND_WORKSPACE_ROOTS = [roots]
    monkeypatch.setenv("STRAND_WORKSPACE_ROOTS", roots)
    workspace = Path(workspaces.default_cwd(alice))
    (workspace / "notes.txt").write_text("notes\n")
    parent = services.session_create(owner=alice, cwd=str(workspace), preset="delegating")
    _, token = tokens.token_create(alice, "crash")
    http = requests.Session()
    http.headers["Authorization"] = f"Bearer {token}"
    base = f"http://127.0.0.1:{PORT}/api/sessions"
    env = {"DATABASE_URL": child_database_url(), "STRAND_RECOVER_AT_START": "1"}

    def approvals(sid: Any) -> list[Any]:
        return list(http.get(f"{base}/{sid}/approvals", timeout=10).json())

    process = daphne.start(PORT, env)
    try:
        sent = http.post(
            f"{base}/{parent.id}/messages", json={"text": "delegate: write a.txt: x"}, timeout=10
        )
        assert sent.status_code == 202, sent.text
        [asked] = _wait(lambda: approvals(parent.id), "the task call asked no approval")
        http.post(
            f"{base}/{parent.id}/approvals/{asked['approval_id']}", json={"outcome": "allowed"}
        )
        child = _wait(
            lambda: Session.objects.filter(parent=parent, origin="subagent").first(),
            "no child session",
        )
        # The child waits for the approval of its write, the parent for the child.
        _wait(lambda: approvals(child.id), "the child asked no approval")
        assert _open_turns(parent.id) == {1} and _open_turns(child.id) == {1}
        process.send_signal(signal.SIGKILL)
        process.wait(10)

        process = daphne.start(PORT, env)
        http.get(f"http://127.0.0.1:{PORT}/api/me", timeout=10)  # recovery starts
        _wait(lambda: not _open_turns(parent.id) and not _open_turns(child.id), "not recovered")
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(10)
    # Recovery once more, in this process: nothing left to close.
    again = agent.agent_recover([parent.id, child.id])
    assert [r.status for r in again] == ["nothing", "nothing"]
    agent.agent_shutdown()

    parent_events = store.events_after(parent.id, -1, 100_000)
    child_events = store.events_after(child.id, -1, 100_000)
    child_ends = [e.data["reason"] for e in child_events if e.type == "turn/end"]
    parent_ends = [e.data["reason"] for e in parent_events if e.type == "turn/end"]
    assert child_ends == ["interrupted"] and parent_ends == ["interrupted"]
    results = Counter(
        e.data["entry"]["message"]["toolCallId"] for e in parent_events if e.type == "tool/result"
    )
    [task_call] = [e for e in parent_events if e.type == "tool/call"]
    assert task_call.data["tool"] == "task"
    assert results == {task_call.data["call_id"]: 1}
    [result] = [e for e in parent_events if e.type == "tool/result"]
    assert result.data["error_code"] == "TOOL_OUTCOME_UNKNOWN"
    assert result.data["entry"]["message"]["isError"] is True
    assert str(child.id) in result.data["entry"]["message"]["content"][0]["text"]
    # The child's write never ran; its approval was left open and its call closed.
    assert not Path(child.cwd, "a.txt").exists()
    parent.refresh_from_db()
    child.refresh_from_db()
    assert verify_session(parent) is None and verify_session(child) is None
