"""Streamed bodies: an export's small lines go out gathered into pieces (each piece is one
step between the server's threads under ASGI), the import's progress lines each as it is
made, and a body left unread lets go of what it was reading."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import User
from django.http import HttpRequest
from django.test import AsyncClient
from django.urls import reverse

from bench.pi import generate
from sessions_app.models import Session
from sessions_app.services import pi_io
from sessions_app.streaming import GATHER, streamed
from tests.web.conftest import client_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def big_session(alice: User, tmp_path: Path) -> Session:
    """A session whose Pi file is about 2 MB in some 2,500 lines."""
    path = tmp_path / "big.jsonl"
    generate(path, 2_500)
    with path.open("rb") as source:
        return pi_io.pi_import(source=source, owner=alice, name="big").session


def _pieces_are_gathered(chunks: list[bytes], expected: str) -> None:
    assert b"".join(chunks).decode() == expected
    assert len(chunks) > 1
    # Every piece but the last holds at least GATHER characters; none is a lone line.
    assert all(len(chunk.decode()) >= GATHER for chunk in chunks[:-1])
    assert len(chunks) <= len(expected) // GATHER + 1


def test_the_pi_export_goes_out_in_gathered_pieces(alice: User, big_session: Session) -> None:
    expected = "".join(pi_io.pi_export_lines(big_session))
    assert expected.count("\n") > 2_000
    response: Any = client_for(alice).get(reverse("session-export-jsonl", args=[big_session.id]))
    assert response.status_code == 200
    _pieces_are_gathered(list(response.streaming_content), expected)


def test_under_asgi_the_pieces_are_gathered_too(alice: User, big_session: Session) -> None:
    expected = "".join(pi_io.pi_export_lines(big_session))

    async def read() -> tuple[bool, list[bytes]]:
        client = AsyncClient()
        await client.aforce_login(alice)
        response: Any = await client.get(reverse("session-export-jsonl", args=[big_session.id]))
        assert response.status_code == 200
        return response.is_async, [chunk async for chunk in response.streaming_content]

    is_async, chunks = async_to_sync(read)()
    assert is_async
    _pieces_are_gathered(chunks, expected)


def test_the_import_progress_sends_each_line_as_it_is_made(alice: User, tmp_path: Path) -> None:
    path = tmp_path / "progress.jsonl"
    generate(path, 3 * pi_io.PROGRESS_EVERY + 10)
    upload = io.BytesIO(path.read_bytes())
    upload.name = "progress.jsonl"
    response: Any = client_for(alice).post(
        reverse("session-import"), {"file": upload}, headers={"accept": "application/x-ndjson"}
    )
    chunks = list(response.streaming_content)
    assert len(chunks) >= 4  # three progress lines and the session's address
    assert all(chunk.count(b"\n") == 1 and chunk.endswith(b"\n") for chunk in chunks)


def test_a_single_line_longer_than_a_piece_passes_whole_and_the_source_is_closed() -> None:
    closed = []

    def source() -> Any:
        try:
            yield "a" * (3 * GATHER)
            yield "b\n"
            yield "c\n"
        finally:
            closed.append(True)

    pieces: Any = streamed(source(), HttpRequest())  # a plain iterator outside ASGI
    pieces = list(pieces)
    assert pieces == ["a" * (3 * GATHER), "b\nc\n"]
    assert closed == [True]

    closed.clear()
    unread: Any = streamed(source(), HttpRequest())
    assert next(unread) == "a" * (3 * GATHER)
    unread.close()  # a client gone mid-body
    assert closed == [True]
