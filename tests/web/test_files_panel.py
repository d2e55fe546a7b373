"""The Files view of the session page and the download of one file, through HTTP: the
workspace at the branch shown, paged and escaped; another user learns nothing of it."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.urls import reverse

from sessions_app import services, store
from sessions_app.models import Session
from sessions_app.store import NewEvent
from sessions_app.store.blobs import blobs_put
from sessions_app.web.files_views import FILE_SHOWN_BYTES, FILES_PAGE
from tests.web.conftest import client_for, message

pytestmark = pytest.mark.django_db

SCRIPT = "<script>alert(1)</script>"


def snapshot(at: str, files: dict[str, bytes], owner: User, **data: Any) -> NewEvent:
    """A `tool` snapshot at entry `at` writing `files`, their contents stored first."""
    blobs_put(owner_id=owner.pk, blobs={hashlib.sha256(c).hexdigest(): c for c in files.values()})
    states = {
        path: {"sha256": hashlib.sha256(content).hexdigest(), "size": len(content), "mode": 0o644}
        for path, content in files.items()
    }
    return NewEvent("workspace/snapshot", {"at": at, "reason": "tool", "files": states, **data})


def session_with_files(owner: User, *steps: dict[str, bytes]) -> tuple[Session, list[str]]:
    """A session of one user message per step, each step's files written at it."""
    session = services.session_create(owner=owner, title="Files", cwd="")
    entries: list[str] = []
    for n, files in enumerate(steps):
        seq = Session.objects.get(id=session.id).last_seq
        [entry] = store.append_events(session.id, seq, [message("user", f"step {n}")]).entry_ids
        entries.append(entry)
        if files:
            store.append_events(session.id, seq + 1, [snapshot(entry, files, owner)])
    session.refresh_from_db()
    return session, entries


def page(user: User, session: Session, query: str = "") -> Any:
    return client_for(user).get(reverse("session", args=[session.id]) + "?view=files" + query)


def download(user: User, session: Session, path: str, entry: str = "") -> Any:
    url = reverse("session-file", args=[session.id, path])
    return client_for(user).get(url + (f"?entry={entry}" if entry else ""))


def test_the_files_view_shows_the_workspace_at_the_branch_shown(alice: User) -> None:
    session, (first, second) = session_with_files(
        alice, {"notes.txt": b"first\n"}, {"src/app.py": b"def main():\n    return 1\n"}
    )
    html = page(alice, session).content.decode()
    assert 'data-file="notes.txt"' in html and 'data-file="src/app.py"' in html
    assert "<summary>src/</summary>" in html
    assert f'href="/sessions/{session.id}/workspace.tar?entry={second}"' in html
    earlier = page(alice, session, f"&leaf={first}").content.decode()
    assert 'data-file="notes.txt"' in earlier and "src/app.py" not in earlier


def test_a_file_is_shown_highlighted_and_a_missing_one_said_so(alice: User) -> None:
    session, _ = session_with_files(alice, {"src/app.py": b"def main():\n    return 1\n"})
    html = page(alice, session, "&file=src/app.py").content.decode()
    assert 'class="highlight"' in html and '<span class="k">def</span>' in html
    assert reverse("session-file", args=[session.id, "src/app.py"]) in html
    absent = page(alice, session, "&file=nope.txt").content.decode()
    assert "There is no file <code>nope.txt</code>" in absent


def test_a_file_named_and_holding_script_is_escaped(alice: User) -> None:
    name = f"{SCRIPT}.html"
    session, _ = session_with_files(alice, {name: SCRIPT.encode()})
    html = page(alice, session, f"&file={name}").content.decode()
    assert SCRIPT not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_binary_and_long_files_are_shown_as_such(alice: User) -> None:
    big = b"x" * (FILE_SHOWN_BYTES + 10)
    session, _ = session_with_files(alice, {"img.bin": b"\x89PNG\x00\x01\x02", "big.txt": big})
    binary = page(alice, session, "&file=img.bin").content.decode()
    assert "Binary file, 7 bytes" in binary
    long = page(alice, session, "&file=big.txt").content.decode()
    assert "file-truncated" in long and f"of {FILE_SHOWN_BYTES + 10:,} bytes" in long
    assert long.count("x" * 1000) <= FILE_SHOWN_BYTES // 1000


def test_the_tree_is_paged_past_a_few_hundred_files(alice: User) -> None:
    files = {f"many/{n:04}.txt": b"%d\n" % n for n in range(FILES_PAGE + 5)}
    session, _ = session_with_files(alice, files)
    first = page(alice, session).content.decode()
    assert first.count('data-file="many/') == FILES_PAGE
    assert "5 more files" in first and f"files_from={FILES_PAGE}" in first
    rest = page(alice, session, f"&files_from={FILES_PAGE}").content.decode()
    assert rest.count('data-file="many/') == 5 and "<summary>many/</summary>" in rest


def test_a_file_downloads_as_raw_bytes_of_its_entry(alice: User) -> None:
    session, (first, second) = session_with_files(
        alice, {"a.txt": b"one\n"}, {"a.txt": b"two <b>\n"}
    )
    response = download(alice, session, "a.txt")
    assert response.status_code == 200 and response.content == b"two <b>\n"
    assert response["Content-Type"] == "application/octet-stream"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Content-Disposition"] == 'attachment; filename="a.txt"'
    assert download(alice, session, "a.txt", first).content == b"one\n"
    assert download(alice, session, "b.txt").status_code == 404
    assert download(alice, session, "a.txt", "no-such-entry").status_code == 404


def test_another_user_gets_not_found_and_never_the_files(alice: User, bob: User) -> None:
    session, _ = session_with_files(alice, {"secret.txt": b"alice's secret\n"})
    for response in (page(bob, session, "&file=secret.txt"), download(bob, session, "secret.txt")):
        assert response.status_code == 404
        assert b"alice's secret" not in response.content and b"secret.txt" not in response.content


def test_staff_may_read_the_files(alice: User, carol: User) -> None:
    session, _ = session_with_files(alice, {"a.txt": b"shared\n"})
    assert download(carol, session, "a.txt").content == b"shared\n"
    assert 'data-file="a.txt"' in page(carol, session).content.decode()
