"""A large upload through daphne costs the server about one piece of it in memory, not
several copies of all of it: a Pi file of 40 MB sent to the import raises the serving
process's peak resident size (VmHWM) by a fraction of the file, and two sent at once by
the same user no more than that twice.

(Before, Twisted under daphne parsed every multipart body into form fields in memory,
which no part of Strand reads, and daphne then queued the whole body for the application
at once: a 46.6 MB upload raised the peak from 127 MB to 582 MB, before the view ran.)
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from sessions_app.models import Session
from sessions_app.services import tokens
from tests.security.daphne_child import Upload, peak_kb, port_for, serving

pytestmark = pytest.mark.django_db(transaction=True)

MB = 1024 * 1024
ENTRIES = 400
TEXT = 100 * 1024  # characters of each user message: 400 of them make a file of ~40 MB
BOUNDARY = "strand-upload-memory"
# A fraction of one 40 MB file: what the import itself holds (a batch of rows, about 8 MB
# on each side of the COPY) and allocator slack, never the file.
PEAK_GROWTH_KB = 24 * 1024


def pi_lines(entries: int) -> Iterator[bytes]:
    yield (
        json.dumps(
            {"type": "session", "version": 3, "id": "big", "timestamp": "2026-01-01T00:00:00.000Z"}
        ).encode()
        + b"\n"
    )
    parent = None
    for n in range(entries):
        entry = {
            "type": "message",
            "id": f"e{n:07d}",
            "parentId": parent,
            "timestamp": "2026-01-01T00:00:01.000Z",
            "message": {"role": "user", "content": f"{n} " + "x" * TEXT, "timestamp": 1},
        }
        parent = entry["id"]
        yield json.dumps(entry).encode() + b"\n"


def multipart(name: str, entries: int) -> tuple[bytes, list[bytes], bytes]:
    head = (
        f"--{BOUNDARY}\r\n"
        'Content-Disposition: form-data; name="name"\r\n\r\n'
        f"{name}\r\n"
        f"--{BOUNDARY}\r\n"
        'Content-Disposition: form-data; name="file"; filename="big.jsonl"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode()
    return head, list(pi_lines(entries)), f"\r\n--{BOUNDARY}--\r\n".encode()


def upload(port: int, token: str, name: str, answers: list[Any], entries: int = ENTRIES) -> None:
    head, lines, tail = multipart(name, entries)
    length = len(head) + sum(len(line) for line in lines) + len(tail)
    request = Upload(
        port,
        "/api/sessions/import",
        {
            "Authorization": f"Bearer {token}",
            "Content-Type": f"multipart/form-data; boundary={BOUNDARY}",
            "Content-Length": str(length),
        },
    )
    assert request.send([head, *lines, tail])
    answers.append(request.answer())


@pytest.fixture
def server(alice: Any) -> Iterator[Any]:
    port = port_for(1)
    with serving(port) as process:
        process.port = port  # type: ignore[attr-defined]
        yield process


def test_a_40_mb_import_costs_the_server_a_fraction_of_it_in_memory(
    server: Any, alice: Any
) -> None:
    _, token = tokens.token_create(alice, "upload memory")
    warm: list[Any] = []
    # What an import loads (a file past Twisted's 100 KB in memory), resident before measuring.
    upload(server.port, token, "warm", warm, entries=4)
    assert warm[0].status == 201, warm[0].body[:300]
    before = peak_kb(server.pid)

    answers: list[Any] = []
    threads = [
        threading.Thread(target=upload, args=(server.port, token, f"big {n}", answers))
        for n in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    grown = peak_kb(server.pid) - before
    assert [a.status for a in answers] == [201, 201], [a.body[:300] for a in answers]
    assert {json.loads(a.body)["entries"] for a in answers} == {ENTRIES}
    assert Session.objects.filter(owner=alice, title__startswith="big ").count() == 2
    assert grown < 2 * PEAK_GROWTH_KB, f"the peak grew by {grown / 1024:.0f} MB"
