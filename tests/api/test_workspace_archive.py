"""The workspace as an archive, both ways: the whole workspace at an entry streamed as a tar
(API and page), and an upload of files or an archive recorded as one `upload` snapshot at
the current leaf."""

from __future__ import annotations

import io
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from sessions_app import store
from sessions_app.models import Session
from sessions_app.selectors.workspace import workspace_at
from sessions_app.store.blobs import blobs_get
from tests.api.conftest import Api, body_of, content_of
from tests.api.test_workspace_files import leaf, move, new_session, say

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def api(workspace_root: Path, as_alice: Api) -> Api:
    return as_alice


def tar_of(
    files: dict[str, bytes], *, compress: str = "", modes: dict[str, int] | None = None
) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode=f"w:{compress}") as archive:  # type: ignore[call-overload]
        for name, content in files.items():
            member = tarfile.TarInfo(name)
            member.size = len(content)
            member.mode = (modes or {}).get(name, 0o644)
            archive.addfile(member, io.BytesIO(content))
    return out.getvalue()


def upload(api: Api, session: Session, body: bytes, kind: str = "application/x-tar") -> Any:
    return api.client.generic("POST", f"/api/sessions/{session.id}/files", body, content_type=kind)


def untar(data: bytes) -> dict[str, tuple[bytes, int]]:
    out = {}
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as archive:
        for member in archive:
            assert member.isreg(), member.name
            handle = archive.extractfile(member)
            assert handle is not None
            out[member.name] = (handle.read(), member.mode)
    return out


def matches_manifest(data: bytes, session: Session, entry: str | None) -> dict[str, bytes]:
    """The archive holds exactly the workspace at `entry`: paths, contents and modes."""
    manifest = workspace_at(session.id, entry) or {}
    got = untar(data)
    assert sorted(got) == sorted(manifest)
    contents = blobs_get(owner_id=session.owner_id, shas=[f.sha256 for f in manifest.values()])
    for path, state in manifest.items():
        assert got[path] == (contents[state.sha256], state.mode & 0o777)
    return {path: content for path, (content, _) in got.items()}


def test_the_workspace_at_any_entry_downloads_as_the_tar_of_its_manifest(api: Api) -> None:
    session = new_session(api)
    say(api, session, "write notes.txt: first")
    first = leaf(session)
    response = upload(
        api,
        session,
        tar_of({"src/app.py": b"print('hi')\n", "run.sh": b"#!/bin/sh\n"}, modes={"run.sh": 0o755}),
    )
    assert response.status_code == 200, response.content
    say(api, session, "write notes.txt: second")

    now = api.get(f"/sessions/{session.id}/workspace.tar")
    assert now.status_code == 200 and now["Content-Type"] == "application/x-tar"
    assert now.streaming
    files = matches_manifest(content_of(now), session, leaf(session))
    assert files["notes.txt"] == b"second" and files["src/app.py"] == b"print('hi')\n"
    assert untar(content_of(api.get(f"/sessions/{session.id}/workspace.tar")))["run.sh"][1] == 0o755

    earlier = api.get(f"/sessions/{session.id}/workspace.tar?entry={first}")
    assert matches_manifest(content_of(earlier), session, first) == {
        "notes.txt": b"first",  # the upload is recorded at the leaf it was made at
        "run.sh": b"#!/bin/sh\n",
        "src/app.py": b"print('hi')\n",
    }


def test_the_page_download_answers_as_the_api_with_the_cookie(
    api: Api, alice: Any, bob: Any
) -> None:
    session = new_session(api)
    say(api, session, "write a.txt: on the page")
    page = Client()
    page.force_login(alice)
    url = reverse("session-workspace-tar", args=[session.id])
    response = page.get(url)
    assert response.status_code == 200
    assert matches_manifest(content_of(response), session, leaf(session)) == {
        "a.txt": b"on the page"
    }
    unknown = page.get(url + "?entry=nosuch")
    assert unknown.status_code == 400 and body_of(unknown)["error"] == "invalid"
    stranger = Client()
    stranger.force_login(bob)
    assert stranger.get(url).status_code == 404
    assert Client().get(url).status_code == 302  # to sign in


def test_another_users_session_and_an_unknown_entry_are_refused(api: Api, as_bob: Api) -> None:
    session = new_session(api)
    say(api, session, "write a.txt: alice's")
    theirs = as_bob.get(f"/sessions/{session.id}/workspace.tar")
    assert theirs.status_code == 404 and body_of(theirs)["error"] == "not_found"
    assert upload(as_bob, session, tar_of({"x": b"y"})).status_code == 404
    unknown = api.get(f"/sessions/{session.id}/workspace.tar?entry=nosuch")
    assert 400 <= unknown.status_code < 500 and "nosuch" in body_of(unknown)["detail"]


@pytest.mark.parametrize("compress", ["", "gz", "bz2", "xz"])
def test_an_uploaded_tar_is_written_and_recorded_once_at_the_leaf(api: Api, compress: str) -> None:
    session = new_session(api)
    say(api, session, "write keep.txt: kept")
    before = Session.objects.get(id=session.id).last_seq
    body = tar_of({"data/a.csv": b"1,2\n", "keep.txt": b"replaced"}, compress=compress)
    response = upload(api, session, body, "application/octet-stream")
    assert response.status_code == 200, response.content
    done = body_of(response)
    assert done["files"] == 2 and done["entry"] == leaf(session)
    [snapshot] = store.events_after(session.id, before, 100)
    assert snapshot.type == "workspace/snapshot" and snapshot.data["reason"] == "upload"
    assert snapshot.data["at"] == leaf(session)
    assert sorted(snapshot.data["files"]) == ["data/a.csv", "keep.txt"]
    folder = Path(session.cwd)
    assert (folder / "data/a.csv").read_bytes() == b"1,2\n"
    assert (folder / "keep.txt").read_bytes() == b"replaced"
    [read] = say(api, session, "read keep.txt")
    assert "replaced" in "".join(b.get("text", "") for b in read["content"])


def test_an_upload_at_another_leaf_moves_the_folder_there_first(api: Api) -> None:
    session = new_session(api)
    say(api, session, "list files")
    start = leaf(session)
    say(api, session, "write branch.txt: only on the branch")
    (Path(session.cwd) / "by-hand.txt").write_text("typed")
    move(api, session, start)
    response = upload(api, session, tar_of({"up.txt": b"uploaded"}))
    assert response.status_code == 200, response.content
    reasons = [
        e.data["reason"]
        for e in store.events_after(session.id, -1, 1000)
        if e.type == "workspace/snapshot"
    ]
    assert reasons[-3:] == ["outside", "restore", "upload"]
    folder = Path(session.cwd)
    assert sorted(p.name for p in folder.iterdir()) == ["up.txt"]
    # Nothing was lost: the branch's files, and the one made by hand, are at its leaf.
    branch = [e for e in store.events_after(session.id, -1, 1000) if e.type == "workspace/snapshot"]
    outside = branch[-3].data["at"]
    assert {"branch.txt", "by-hand.txt"} <= set(workspace_at(session.id, outside) or {})


def test_a_tar_made_of_a_folder_with_tar_c_dot_uploads(api: Api) -> None:
    """`tar -C project -czf up.tgz .`: members `.`, `./src`, `./src/app.py`."""
    session = new_session(api)
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as archive:
        for name in (".", "./src"):
            folder = tarfile.TarInfo(name)
            folder.type = tarfile.DIRTYPE
            archive.addfile(folder)
        member = tarfile.TarInfo("./src/app.py")
        member.size = 5
        archive.addfile(member, io.BytesIO(b"print"))
    response = upload(api, session, out.getvalue(), "application/gzip")
    assert response.status_code == 200, response.content
    assert (Path(session.cwd) / "src/app.py").read_bytes() == b"print"


def test_multipart_files_and_a_zip_upload(api: Api) -> None:
    session = new_session(api)
    one = io.BytesIO(b"one")
    one.name = "one.txt"
    two = io.BytesIO(b"two")
    two.name = "two.txt"
    response = api.client.post(
        f"/api/sessions/{session.id}/files", {"files": [one, two], "folder": "docs"}
    )
    assert response.status_code == 200, response.content
    folder = Path(session.cwd)
    assert (folder / "docs/one.txt").read_bytes() == b"one"
    packed = io.BytesIO()
    with zipfile.ZipFile(packed, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("lib/z.py", "x = 1\n")
    response = upload(api, session, packed.getvalue(), "application/zip")
    assert response.status_code == 200, response.content
    assert sorted(workspace_at(session.id, leaf(session)) or {}) == [
        "docs/one.txt",
        "docs/two.txt",
        "lib/z.py",
    ]


def test_the_page_form_uploads_and_says_so(api: Api, alice: Any) -> None:
    session = new_session(api)
    page = Client()
    page.force_login(alice)
    archive = io.BytesIO(tar_of({"from-page.txt": b"hello"}))
    archive.name = "work.tar"
    response = page.post(
        reverse("session-workspace-upload", args=[session.id]), {"archive": archive}, follow=True
    )
    assert response.status_code == 200
    assert "Uploaded 1 file" in response.content.decode()
    assert (Path(session.cwd) / "from-page.txt").read_bytes() == b"hello"
