"""The chat (the session page and `GET …/views/chat`) shows a window of the path bounded in
bytes as well as in entries: a path of messages near the 1 MiB an event may hold is read a
window at a time, the last entry always shown, `older_cursor` reading on."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from tests.api.conftest import Api, body_of
from tests.api.test_page_bytes import BIG, COUNT, filled

pytestmark = pytest.mark.django_db


def test_the_api_chat_stops_at_the_budget_and_reads_on(as_alice: Api, alice: Any) -> None:
    session = filled(alice, COUNT, BIG)

    first = body_of(as_alice.get(f"/sessions/{session.id}/views/chat?limit=2000"))

    assert 0 < first["entries_above"] < COUNT
    assert first["older_cursor"]
    seen = COUNT - first["entries_above"]
    assert seen * BIG <= 1024 * 1024
    cursor = first["older_cursor"]
    while cursor:
        older = body_of(as_alice.get(f"/sessions/{session.id}/views/chat?cursor={cursor}"))
        assert older["entries_above"] < COUNT - seen
        seen = COUNT - older["entries_above"]
        cursor = older["older_cursor"]
    assert seen == COUNT


def test_the_session_page_holds_one_budget_of_messages(alice: Any, settings: Any) -> None:
    session = filled(alice, COUNT, BIG)
    client = Client()
    client.force_login(alice)

    page = client.get(f"/sessions/{session.id}/")

    assert page.status_code == 200
    assert len(page.content) < 2 * settings.STRAND_API_PAGE_BYTES
    assert f"message {COUNT - 1} ".encode() + b"x" * BIG in page.content
