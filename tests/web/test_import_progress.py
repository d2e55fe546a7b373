"""The import form's progress: asked for as JSON lines, the import answers with the entries
written as it reads the file, then the new session's address, or what is wrong with the
file (and nothing is written)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.urls import reverse

from bench.pi import generate
from sessions_app.models import Entry, Event, Session
from sessions_app.services import pi_io
from tests.web.conftest import client_for

pytestmark = pytest.mark.django_db

PROGRESS = "application/x-ndjson"


@pytest.fixture(scope="module")
def pi_file(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    path: Path = tmp_path_factory.mktemp("pi") / "progress.jsonl"
    generate(path, 3 * pi_io.PROGRESS_EVERY + 10)
    return path.read_bytes()


def _post(user: User, content: bytes, name: str = "work.jsonl") -> tuple[Any, list[dict]]:
    upload = io.BytesIO(content)
    upload.name = name
    response = client_for(user).post(
        reverse("session-import"), {"file": upload}, headers={"accept": PROGRESS}
    )
    body = b"".join(response.streaming_content).decode()  # type: ignore[attr-defined]
    assert body.endswith("\n")
    return response, [json.loads(line) for line in body.splitlines()]


def test_the_import_streams_its_progress_then_the_session(alice: User, pi_file: bytes) -> None:
    response, lines = _post(alice, pi_file)
    assert response.status_code == 200 and response["Content-Type"] == PROGRESS
    *progress, last = lines
    entries = [line["entries"] for line in progress]
    assert entries[:3] == [1000, 2000, 3000] and entries[-1] == pi_file.count(b"\n") - 1
    read = [line["bytes"] for line in progress]
    assert read == sorted(read) and read[-1] == len(pi_file)
    assert {line["total"] for line in progress} == {len(pi_file)}
    session = Session.objects.get(owner=alice)
    assert last == {
        "session": reverse("session", args=[session.id]),
        "entries": entries[-1],
        "warnings": 0,
    }
    assert Entry.objects.filter(session=session).count() == entries[-1]


def test_a_file_bad_at_its_end_says_why_and_leaves_nothing(alice: User, pi_file: bytes) -> None:
    lines_before = pi_file.count(b"\n")
    bad = b'{"type":"message","id":"x<b>","parentId":null,"timestamp":"t","message":{"role":"oracle"}}\n'
    _, lines = _post(alice, pi_file + bad, name="bad<b>.jsonl")
    *progress, last = lines
    assert len(progress) == 3  # it got that far before the last line
    assert last["error"].startswith(f"Could not import bad<b>.jsonl: line {lines_before + 1}")
    # Escaped by the page's script (textContent); here it is JSON text, as written.
    assert not Session.objects.filter(owner=alice).exists()
    assert not Event.objects.filter(session__owner=alice).exists()


def test_without_the_progress_header_the_form_posts_as_before(alice: User, pi_file: bytes) -> None:
    upload = io.BytesIO(pi_file)
    upload.name = "plain.jsonl"
    response = client_for(alice).post(reverse("session-import"), {"file": upload})
    session = Session.objects.get(owner=alice)
    assert response.status_code == 302 and response["Location"] == reverse(
        "session", args=[session.id]
    )


def test_the_progress_import_needs_a_signed_in_user(pi_file: bytes) -> None:
    upload = io.BytesIO(pi_file)
    upload.name = "anon.jsonl"
    response = client_for(None).post(
        reverse("session-import"), {"file": upload}, headers={"accept": PROGRESS}
    )
    assert response.status_code == 302 and "login" in response["Location"]
    assert not Session.objects.exists()


def test_the_import_command_draws_its_progress_on_a_terminal(
    alice: User, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    from django.core.management import call_command

    path = tmp_path / "big.jsonl"
    generate(path, 2 * pi_io.PROGRESS_EVERY + 5, seed=3)
    # The bar is drawn for a file over 1 MB on a terminal.
    assert path.stat().st_size > 1_000_000
    monkeypatch.setattr("sys.stderr.isatty", lambda: True)
    call_command("import_pi", str(path), "--owner", alice.username)
    err = capsys.readouterr().err
    drawn = [part for part in err.split("\r") if part]
    assert any("1,000 entries" in part for part in drawn), err
    entries = path.read_bytes().count(b"\n") - 1  # the lines after the header
    assert drawn[-1].rstrip("\n").endswith(f"100% {entries:,} entries")
