"""Browser tests: Debian's chromium driven by Playwright, against daphne processes that
serve the test database.

They run in their own pytest invocation (`pytest -m browser`): Playwright's sync API keeps
an event loop running in the main thread, which the asyncio tests must not share. Two
daphne processes are started on free ports below 32768, both on the test database, so a
test can watch one process deliver what the other committed. Every test saves a
screenshot under test-artifacts/screenshots/.

Under xdist each worker has its own test database, its own two daphnes and its own
Chromium. The databases are named apart from those of the other tests
(`test_strand_gw0_browser`), so both invocations can run at the same time.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast
from urllib.parse import quote

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection
from playwright.sync_api import Page, expect

from deploy.daphne import free_port

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "test-artifacts" / "screenshots"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
PASSWORD = "a-long-test-password-42"
# `make test` runs these beside the other tests, on the same cores: a page may take longer
# than Playwright's default 5 s to show what it will show. A page that never shows it still
# fails the test.
expect.set_options(timeout=15_000)
OTHER_PRESET = "offline-2"  # offered beside the built-in one (replays choose it)


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict[str, Any]) -> dict[str, Any]:
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)")
    return {**browser_type_launch_args, "executable_path": chromium, "args": CHROMIUM_ARGS}


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix: None) -> None:
    # A name of their own: the other tests' invocation may be using `test_strand_gw0`.
    for db in settings.DATABASES.values():
        test = cast(dict[str, Any], db.setdefault("TEST", {}))
        test["NAME"] = f"{test.get('NAME') or 'test_' + str(db['NAME'])}_browser"


@pytest.fixture(scope="session", autouse=True)
def _sync_orm_beside_playwright() -> None:
    # Playwright's sync API runs an event loop in this thread; the ORM calls of the tests
    # themselves are still plain synchronous calls.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"


def _database_url() -> str:
    """A URL for the test database that pytest-django created (the daphnes use it)."""
    db = connection.settings_dict
    user = quote(str(db.get("USER") or ""))
    password = quote(str(db.get("PASSWORD") or ""))
    auth = f"{user}:{password}@" if password else f"{user}@"
    host, port, name = str(db.get("HOST") or ""), str(db.get("PORT") or ""), str(db["NAME"])
    if host.startswith("/"):
        query = f"?host={quote(host)}" + (f"&port={port}" if port else "")
        return f"postgres://{auth}/{quote(name)}{query}"
    return f"postgres://{auth}{host}{':' + port if port else ''}/{quote(name)}"


@dataclass
class Server:
    url: str
    process: subprocess.Popen[bytes]
    log: Path


def _start_daphne(port: int, env: dict[str, str], log: Path) -> Server:
    handle = log.open("wb")
    process = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("daphne")),
            "-b",
            "127.0.0.1",
            "-p",
            str(port),
            "config.asgi:application",
        ],
        cwd=ROOT,
        env=env,
        stdout=handle,
        stderr=subprocess.STDOUT,
    )
    return Server(f"http://127.0.0.1:{port}", process, log)


def _wait_ready(server: Server, timeout: float = 120.0) -> None:
    # A guard against a server that never answers, not a timing: its first page (imports,
    # templates, connections) can take half a minute while the other tests load the cores.
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"daphne exited early:\n{server.log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(server.url + "/accounts/login/", timeout=2) as reply:
                if reply.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.2)
    raise RuntimeError(f"daphne did not answer in {timeout}s:\n{server.log.read_text()[-3000:]}")


def _stop(server: Server) -> None:
    server.process.terminate()
    try:
        server.process.wait(10)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait(5)


@pytest.fixture(scope="session")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The directory under which sessions made in the browser get their working directory
    (each user's own folder, `user-<id>`, as `workspaces.default_cwd` makes it)."""
    return tmp_path_factory.mktemp("workspace")


def user_folder(workspace: Path, user: User) -> Path:
    """The working directory the user's new sessions get, with a README to read."""
    folder = workspace / f"user-{user.pk}"
    folder.mkdir(exist_ok=True)
    (folder / "README.md").write_text("# A workspace for the browser tests\n")
    return folder


@pytest.fixture(scope="session")
def servers(
    django_db_setup: Any, django_db_blocker: Any, workspace: Path, tmp_path_factory: Any
) -> Iterator[tuple[Server, Server]]:
    """Two daphne processes on the test database (the first is the one tests mostly use)."""
    with django_db_blocker.unblock():
        url = _database_url()
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "STRAND_WORKSPACE_ROOTS": str(workspace),
        "STRAND_OFFLINE_CHUNK_DELAY_MS": "30",
        "PYTHONUNBUFFERED": "1",
        # A second preset the servers offer, for replays with another model.
        "STRAND_PRESETS": json.dumps(
            {OTHER_PRESET: {"provider": "offline", "model": "strand-offline-2"}}
        ),
    }
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    logs = tmp_path_factory.mktemp("daphne")
    started = [_start_daphne(free_port(), env, logs / f"daphne-{i}.log") for i in (1, 2)]
    try:
        for server in started:
            _wait_ready(server)
        yield started[0], started[1]
    finally:
        for server in started:
            _stop(server)


@pytest.fixture(scope="session")
def server(servers: tuple[Server, Server]) -> Server:
    return servers[0]


@pytest.fixture
def make_user(
    django_db_setup: Any, django_db_blocker: Any, request: pytest.FixtureRequest, workspace: Path
) -> Any:
    """A new account with a known password, committed so that the servers see it."""

    def make(prefix: str = "user", *, staff: bool = False) -> User:
        name = f"{prefix}-{request.node.name[:40]}-{random.randint(0, 10**6)}"
        with django_db_blocker.unblock():
            user = User.objects.create_user(username=name, password=PASSWORD, is_staff=staff)
        user_folder(workspace, user)
        return user

    return make


@pytest.fixture
def db_access(django_db_setup: Any, django_db_blocker: Any) -> Iterator[None]:
    """Direct database access from a test (reads and appends outside any transaction)."""
    with django_db_blocker.unblock():
        yield


@pytest.fixture
def user(make_user: Any) -> User:
    """A new user of the tests' servers (a test file may make its own)."""
    return make_user()


@pytest.fixture
def signed_in(page: Page, server: Server, user: User) -> Page:
    """`page`, signed in as `user`."""
    sign_in(page, server, user)
    return page


def sign_in(page: Page, server: Server, user: User) -> None:
    page.goto(server.url + "/accounts/login/")
    page.fill("input[name=username]", user.get_username())
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    expect(page.locator("h1", has_text="Sessions")).to_be_visible()


def new_session(page: Page, title: str, cwd: str = "") -> str:
    """Start a session with the offline model from the list page (in a folder of its own,
    unless `cwd` names one); its URL."""
    page.fill(".new-session input[name=title]", title)
    if cwd:
        page.fill(".new-session input[name=cwd]", cwd)
    page.click(".new-session button[type=submit]")
    expect(page.locator(".session-head h1")).to_have_text(title)
    wait_live(page)
    return page.url


def wait_live(page: Page) -> None:
    # Predicates passed to wait_for_function are written as functions: a bare expression is
    # run with eval inside the page, which the pages' Content-Security-Policy refuses.
    page.wait_for_function("() => window.strandLive && window.strandLive.ready === true")


def send(page: Page, text: str) -> None:
    """Send a message from the composer; `wait_turn` then waits for its turn to end."""
    expect_turn(page)
    page.fill("textarea[data-composer]", text)
    page.click("#composer-state button.primary")


def expect_turn(page: Page) -> None:
    """Remember how many turns have ended, before doing what starts one."""
    page.evaluate("window.__turnsBefore = window.strandLive.turnsEnded")


def wait_turn(page: Page, timeout: float = 20_000) -> None:
    """Wait until the turn started by `send` has ended and the page shows it."""
    page.wait_for_function(
        "() => window.strandLive.turnsEnded > window.__turnsBefore", timeout=timeout
    )
    expect(page.locator("#composer-state")).to_have_attribute(
        "data-running", "false", timeout=timeout
    )


def screenshot(page: Page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=False)
