"""A daphne process on the test database, and API clients of it for each persona: for the
attacks that run for real over HTTP."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import requests

from deploy import daphne
from sessions_app.services import tokens
from tests.runtime.conftest import child_database_url

# Derived from the process id, so that runs side by side do not collide; below 32768.
PORT = 29_000 + os.getpid() % 1000 * 3

# Every answer is awaited at most this long: an attack that hangs the server fails the
# test instead of hanging it.
TIMEOUT_S = 15


@contextmanager
def served(**env: str) -> Iterator[str]:
    """daphne serving Strand on the test database; yields its base URL."""
    process = daphne.start(
        PORT,
        {
            "DATABASE_URL": child_database_url(),
            # The attacks send a few dozen appends and imports in a second.
            "STRAND_RATE_LIMITS": '{"append": [0, 60], "import": [0, 60]}',
            **env,
        },
    )
    try:
        yield f"http://127.0.0.1:{PORT}"
    finally:
        daphne.stop(process)


def client(user: Any) -> requests.Session:
    """An API client signed in as `user` with a token of their own."""
    http = requests.Session()
    http.headers["Authorization"] = f"Bearer {tokens.token_create(user, 'attack')[1]}"
    return http


@contextmanager
def meanwhile(work: Callable[[], int]) -> Iterator[list[int]]:
    """Runs `work` (a request returning its status) again and again in a thread while the
    block runs, and at least once; yields the statuses it got (filled when the block ends)."""
    statuses: list[int] = []
    stop = threading.Event()

    def loop() -> None:
        while True:
            statuses.append(work())
            if stop.is_set():
                return

    thread = threading.Thread(target=loop)
    thread.start()
    try:
        yield statuses
    finally:
        stop.set()
        thread.join(TIMEOUT_S * 2)
