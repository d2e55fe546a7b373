"""Fixtures of the OTLP ingest tests: Strand served by daphne on the test database (one
process for the module), a local model server speaking OpenAI's chat completions, and the
real producer (`tests.ingest.producer`, Pydantic AI) run as a child process.

The personas are those of `tests/conftest.py` (Alice owns the sessions, Bob is another user).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deploy import daphne
from sessions_app.services import tokens
from tests.runtime.conftest import child_database_url
from tests.runtime.servers import Raw, ScriptedServer

ROOT = Path(__file__).resolve().parents[2]
# In this suite's range, apart per process so that runs side by side do not collide.
PORT = 27_000 + os.getpid() % 300 * 3


REPLAY_PRESET = "scripted"  # a preset the server offers, answered by `replay_model`


@pytest.fixture(scope="module")
def replay_model() -> Iterator[ScriptedServer]:
    """The model server behind the `scripted` preset, which replays are sent to."""
    server = ScriptedServer("openai")
    yield server
    server.close()


@pytest.fixture(scope="module")
def strand_url(
    django_db_setup: Any, django_db_blocker: Any, replay_model: ScriptedServer
) -> Iterator[str]:
    """daphne serving Strand on the test database, for the whole module."""
    with django_db_blocker.unblock():
        url = child_database_url()
    preset = {
        "provider": "openai",
        "model": "replay-model",
        "base_url": replay_model.base_url,
        "api_key_env": "STRAND_TEST_REPLAY_KEY",
    }
    env = {
        "DATABASE_URL": url,
        "STRAND_RATE_LIMITS": "{}",
        "STRAND_PRESETS": json.dumps({REPLAY_PRESET: preset}),
        "STRAND_TEST_REPLAY_KEY": "not-a-key",
    }
    process = daphne.start(PORT, env)
    try:
        yield f"http://127.0.0.1:{PORT}"
    finally:
        daphne.stop(process)


@pytest.fixture(scope="module")
def people(django_db_blocker: Any) -> Iterator[dict[str, Any]]:
    """Alice and Bob with a token each, made for a whole module (what a daphne child
    commits outlives a test's transaction), and removed with what they own at its end."""
    from django.contrib.auth.models import User

    from sessions_app import services
    from sessions_app.models import Session

    with django_db_blocker.unblock():
        made = {
            name: User.objects.create_user(username=name, password=f"{name}-pass-1234")
            for name in ("alice", "bob")
        }
        found = {name: {"user": user, "token": bearer(user)} for name, user in made.items()}
    try:
        yield found
    finally:
        with django_db_blocker.unblock():
            for user in made.values():
                for session in Session.objects.filter(owner=user):
                    services.session_delete(session=session, by=user)
                user.delete()


def completion(message: dict[str, Any], finish: str, usage: tuple[int, int]) -> Raw:
    """One non-streamed chat completion, as OpenAI answers it."""
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "test-model",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": usage[0],
            "completion_tokens": usage[1],
            "total_tokens": sum(usage),
        },
    }
    return Raw(200, "application/json", json.dumps(body).encode())


def tool_call(call_id: str, name: str, arguments: dict[str, Any], usage: tuple[int, int]) -> Raw:
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
        ],
    }
    return completion(message, "tool_calls", usage)


FINAL_ANSWER = "In Paris it is sunny, 21C, and 10:00."


def scripted_run() -> ScriptedServer:
    """A model server that answers one run of the producer's agent: two tool calls, one
    after the other, then the answer."""
    server = ScriptedServer("openai")
    server.script(
        tool_call("call_weather", "get_weather", {"city": "Paris"}, (41, 9)),
        tool_call("call_time", "get_time", {"city": "Paris"}, (63, 8)),
        completion({"role": "assistant", "content": FINAL_ANSWER}, "stop", (80, 12)),
    )
    return server


@pytest.fixture
def model_server() -> Iterator[ScriptedServer]:
    server = scripted_run()
    yield server
    server.close()


def bearer(user: Any) -> str:
    return tokens.token_create(user, "otlp")[1]


def run_producer(
    strand_url: str, token: str, model: ScriptedServer, bodies: Path, *, delay: float = 0.0
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.ingest.producer",
            f"{strand_url}/v1/traces",
            token,
            model.base_url,
            str(bodies),
            str(delay),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
