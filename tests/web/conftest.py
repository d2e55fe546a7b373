from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from sessions_app import services, store
from sessions_app.models import Session
from sessions_app.store import NewEvent

HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)> [click](javascript:alert(2))'


def client_for(user: User | None) -> Client:
    client = Client()
    if user is not None:
        client.force_login(user)
    return client


def message(role: str, text: str, **fields: Any) -> NewEvent:
    event_type = {"user": "user/message", "assistant": "assistant/message"}[role]
    content: Any = text if role == "user" else [{"type": "text", "text": text}]
    return NewEvent(
        event_type,
        {"entry": {"type": "message", "message": {"role": role, "content": content, **fields}}},
    )


def conversation(owner: User, title: str = "A talk", *pairs: tuple[str, str]) -> Session:
    """A session holding user/assistant message pairs, one after the other."""
    session = services.session_create(owner=owner, title=title, cwd="")
    events = []
    for question, answer in pairs or (("What is Strand?", "A **session** store."),):
        events += [message("user", question), message("assistant", answer)]
    store.append_events(session.id, session.last_seq, events)
    session.refresh_from_db()
    return session


@pytest.fixture
def talk(alice: User) -> Session:
    return conversation(alice, "Alice's talk", ("Where are the tests?", "In `tests/`."))


@pytest.fixture
def agent_shutdown() -> Iterator[None]:
    """Stop the agent engine after a test that ran turns (its threads hold connections)."""
    yield
    from sessions_app.agent import agent_shutdown as shutdown

    shutdown()


@pytest.fixture
def fast_offline_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STRAND_OFFLINE_CHUNK_DELAY_MS", "0")
