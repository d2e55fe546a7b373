from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from projections.request import project_request
from sessions_app import agent, services, store, workspaces
from sessions_app.models import Session

OFFLINE = {
    "name": "offline",
    "provider": "offline",
    "model": "strand-offline-1",
    "system_prompt": "You are a careful assistant.",
    "tools": ["read_file", "list_files", "grep", "write_file"],
}


@pytest.fixture(autouse=True)
def _fast_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STRAND_OFFLINE_CHUNK_DELAY_MS", "0")
    monkeypatch.delenv("STRAND_TOOL_DELAY_MS", raising=False)


@pytest.fixture(scope="session", autouse=True)
def _agent_engine(request: pytest.FixtureRequest) -> Iterator[None]:
    # Torn down before the test database goes (if a test set it up): the engine's
    # connections must be closed by then.
    request.getfixturevalue("django_db_setup")
    yield
    agent.agent_shutdown()


@pytest.fixture(autouse=True)
def _stop_runs(request: pytest.FixtureRequest) -> Iterator[None]:
    # Set up after the database fixture, so torn down before it flushes the tables: no
    # run of this test outlives its data.
    if request.node.get_closest_marker("django_db"):
        request.getfixturevalue("_django_db_helper")
    yield
    agent.agent_stop_local_runs()


@pytest.fixture
def owner(alice: Any) -> Any:
    """Whose sessions the runtime tests run: Alice."""
    return alice


@pytest.fixture
def workspace(tmp_path: Path, settings: Any, monkeypatch: pytest.MonkeyPatch, owner: Any) -> Path:
    """The owner's own folder (a session's working directory must be in it), here and in
    the server processes a test starts."""
    settings.STRAND_WORKSPACE_ROOTS = [str(tmp_path / "workspaces")]
    monkeypatch.setenv("STRAND_WORKSPACE_ROOTS", str(tmp_path / "workspaces"))
    root = Path(workspaces.default_cwd(owner))
    (root / "notes.txt").write_text("hello world\nTODO: water the plants\n")
    (root / "src").mkdir()
    (root / "src" / "app.py").write_text("print('hi')  # TODO: more\n")
    return root


@pytest.fixture
def make_session(owner: Any, workspace: Path, serve_preset: Any) -> Any:
    """A session of the owner's in their folder, whose preset (the offline one, with any
    settings given) the server offers under a name of its own."""
    served = 0

    def make(cwd: Path | str | None = None, **preset: Any) -> Session:
        nonlocal served
        served += 1
        name = serve_preset(f"test-{served}", **{**OFFLINE, **preset})
        return services.session_create(
            owner=owner,
            title="t",
            cwd=str(cwd if cwd is not None else workspace),
            preset=name,
        )

    return make


def types_after(session: Session, after_seq: int = 0) -> list[str]:
    return [e.type for e in store.events_after(session.id, after_seq, 10_000)]


def assert_requests_match(session: Session) -> int:
    """Every request/sent of the session rebuilds to its recorded hash; how many."""
    events = store.events_after(session.id, -1, 100_000)
    entries = store.entries_of(session.id)
    sent = [e for e in events if e.type == "request/sent"]
    for event in sent:
        view = project_request(events, entries, event.seq)
        assert view.matches, (event.seq, view.error, view.recorded_sha256, view.payload_sha256)
    return len(sent)


def wait_done(session: Session, timeout: float = 20) -> list[Any]:
    ended = agent.agent_wait(session.id, timeout)
    assert ended is not None
    return ended


def child_database_url() -> str:
    """A DATABASE_URL for child processes that points at the test database."""
    from django.db import connection

    s = connection.settings_dict
    query = f"host={s['HOST']}" + (f"&port={s['PORT']}" if s["PORT"] else "")
    return f"postgresql://{s['USER']}:{s['PASSWORD']}@/{s['NAME']}?{query}"


@pytest.fixture
def child() -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """Starts `manage.py ARGS` in a child process on the test database (extra environment as
    keywords); whatever is still running at the end is killed."""
    started: list[subprocess.Popen[str]] = []

    def start(*args: str, **env: str) -> subprocess.Popen[str]:
        environ = {
            **os.environ,
            "DATABASE_URL": child_database_url(),
            "STRAND_OFFLINE_CHUNK_DELAY_MS": "0",
            **env,
        }
        process = subprocess.Popen(
            [sys.executable, "manage.py", *args],
            cwd=Path(__file__).resolve().parents[2],
            env=environ,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        started.append(process)
        return process

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=10)


def wait_for(condition: Callable[[], Any], timeout: float = 20.0) -> Any:
    """`condition()`'s first true value, asked every 50 ms for up to `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("timed out waiting")
