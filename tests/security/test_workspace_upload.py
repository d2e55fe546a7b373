"""Uploads into a workspace that try to write where they may not, or more than they may: each
is refused with a 4xx JSON body naming the member, and nothing is written — no file in the
folder, no event, no blob."""

from __future__ import annotations

import gzip
import io
import struct
import tarfile
import zipfile
import zlib
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.db import connection

from sessions_app.models import Session, WorkspaceBlob
from sessions_app.turn_lock import turn_lock_key
from tests.api.conftest import Api, body_of
from tests.api.test_workspace_files import new_session, say

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def api(workspace_root: Path, as_alice: Api) -> Api:
    return as_alice


@pytest.fixture
def session(api: Api) -> Session:
    made = new_session(api)
    say(api, made, "write src/main.py: print('hi')")
    return Session.objects.get(id=made.id)


def folder_state(session: Session) -> dict[str, bytes]:
    root = Path(session.cwd)
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def facts(session: Session) -> tuple[int, int]:
    return (
        Session.objects.get(id=session.id).last_seq,
        WorkspaceBlob.objects.filter(owner_id=session.owner_id).count(),
    )


def refused(
    api: Api, session: Session, body: bytes, kind: str = "application/octet-stream"
) -> dict[str, Any]:
    """Upload `body`; it must be refused with nothing written. The error body."""
    before_folder, before_facts = folder_state(session), facts(session)
    response = api.client.generic(
        "POST", f"/api/sessions/{session.id}/files", body, content_type=kind
    )
    assert 400 <= response.status_code < 500, response.content
    error = body_of(response)
    assert error["error"] and error["detail"]
    assert folder_state(session) == before_folder
    assert facts(session) == before_facts
    return dict(error, status=response.status_code)


def tar_with(*members: tuple[tarfile.TarInfo, bytes], fmt: int = tarfile.PAX_FORMAT) -> bytes:
    out = io.BytesIO()
    with tarfile.open(
        fileobj=out, mode="w", format=fmt, encoding="utf-8", errors="surrogateescape"
    ) as archive:
        for member, content in members:
            member.size = len(content) if member.isreg() else 0
            archive.addfile(member, io.BytesIO(content) if member.isreg() else None)
    return out.getvalue()


def file(name: str, content: bytes = b"x") -> tuple[tarfile.TarInfo, bytes]:
    return tarfile.TarInfo(name), content


def special(name: str, kind: bytes, **fields: Any) -> tuple[tarfile.TarInfo, bytes]:
    member = tarfile.TarInfo(name)
    member.type = kind
    for key, value in fields.items():
        setattr(member, key, value)
    return member, b""


def zip_with(files: dict[str, bytes], method: int = zipfile.ZIP_DEFLATED) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", method) as archive:
        for name, content in files.items():
            archive.writestr(name, content)
    return out.getvalue()


@pytest.mark.parametrize(
    "name",
    [
        "../escaped.txt",
        "/etc/escaped.txt",
        "C:/escaped.txt",
        "C:\\escaped.txt",
        "a/../../escaped.txt",
        "ok/..\\..\\escaped.txt",
        "a/" + "b" * 300,
        "/".join(["d"] * 200) + "/deep.txt",
        "a\x01b",
    ],
)
def test_a_name_that_leaves_the_folder_or_is_no_name_is_refused(
    api: Api, session: Session, name: str
) -> None:
    error = refused(api, session, tar_with(file("fine.txt"), file(name)))
    assert error["member"] == name


def test_zip_slip_in_a_zip_is_refused(api: Api, session: Session) -> None:
    error = refused(api, session, zip_with({"ok.txt": b"1", "../../escaped.txt": b"2"}))
    assert error["member"] == "../../escaped.txt"


def test_a_name_of_invalid_utf8_or_with_nul_is_refused(api: Api, session: Session) -> None:
    body = tar_with(file("\udcff\udcfe.txt"), fmt=tarfile.GNU_FORMAT)
    assert "not valid UTF-8" in refused(api, session, body)["detail"]
    # zipfile writes the name cut at a NUL; the bytes of a real archive may hold one.
    packed = zip_with({"aXb.txt": b"x"}).replace(b"aXb.txt", b"a\x00b.txt")
    assert "NUL" in refused(api, session, packed)["detail"]
    # A name not marked UTF-8 is its own bytes: here not UTF-8 at all.
    packed = zip_with({"X.txt": b"x"}).replace(b"X.txt", b"\xff.txt")
    assert "not valid UTF-8" in refused(api, session, packed)["detail"]


@pytest.mark.parametrize(
    "member",
    [
        special("link", tarfile.SYMTYPE, linkname="/etc/passwd"),
        special("inside-link", tarfile.SYMTYPE, linkname="src/main.py"),
        special("hard", tarfile.LNKTYPE, linkname="src/main.py"),
        special("tty", tarfile.CHRTYPE, devmajor=5, devminor=0),
        special("disk", tarfile.BLKTYPE, devmajor=8, devminor=0),
        special("pipe", tarfile.FIFOTYPE),
    ],
    ids=["symlink-out", "symlink-in", "hardlink", "char-device", "block-device", "fifo"],
)
def test_links_devices_and_fifos_are_refused(
    api: Api, session: Session, member: tuple[tarfile.TarInfo, bytes]
) -> None:
    error = refused(api, session, tar_with(file("fine.txt"), member))
    assert error["member"] == member[0].name


def test_a_symlink_in_a_zip_is_refused(api: Api, session: Session) -> None:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        info = zipfile.ZipInfo("link")
        info.create_system = 3
        info.external_attr = 0o120777 << 16
        archive.writestr(info, "/etc/passwd")
    assert refused(api, session, out.getvalue())["member"] == "link"


@pytest.mark.parametrize(
    ("members", "member"),
    [
        ([file("a.txt"), file("a.txt")], "a.txt"),
        ([file("./a.txt"), file("a.txt")], "a.txt"),
        ([special("a", tarfile.DIRTYPE), file("a")], "a"),
        ([file("a"), file("a/b.txt")], "a/b.txt"),
        ([file("a/b.txt"), file("a")], "a"),
        ([file("src")], "src"),  # the workspace has src/main.py
        ([file("src/main.py/x")], "src/main.py/x"),  # src/main.py is a file
    ],
)
def test_a_name_twice_or_a_file_where_a_folder_is_is_refused(
    api: Api, session: Session, members: list[tuple[tarfile.TarInfo, bytes]], member: str
) -> None:
    assert refused(api, session, tar_with(*members))["member"] == member


def test_sizes_past_the_workspace_quota_are_refused(
    api: Api, session: Session, settings: Any
) -> None:
    settings.STRAND_WORKSPACE_MAX_WRITE_BYTES = 1000
    error = refused(api, session, tar_with(file("big.bin", b"x" * 1001)))
    assert error["status"] == 413 and error["member"] == "big.bin"
    settings.STRAND_WORKSPACE_MAX_BYTES = 2500
    body = tar_with(*(file(f"f{i}.bin", b"x" * 900) for i in range(3)))
    assert refused(api, session, body)["member"] == "f2.bin"
    settings.STRAND_WORKSPACE_MAX_BYTES = 10**6
    settings.STRAND_WORKSPACE_MAX_FILES = 3  # the workspace holds one already
    body = tar_with(*(file(f"n{i}.txt") for i in range(3)))
    assert refused(api, session, body)["member"] == "n2.txt"
    settings.STRAND_WORKSPACE_MAX_FILES = 100
    settings.STRAND_WORKSPACE_MAX_DEPTH = 3
    assert refused(api, session, tar_with(file("a/b/c/d.txt")))["member"] == "a/b/c/d.txt"


def test_zip_members_that_inflate_past_what_they_declare_or_too_far_are_refused(
    api: Api, session: Session, settings: Any
) -> None:
    settings.STRAND_WORKSPACE_MAX_WRITE_BYTES = 8 * 1024 * 1024
    bomb = zip_with({"zeros.bin": b"\x00" * (4 * 1024 * 1024)})
    error = refused(api, session, bomb)
    assert error["status"] == 413 and "zip bomb" in error["detail"]
    # A member whose headers declare 10 bytes but whose data inflate to 100 KB.
    honest = zip_with({"lie.txt": b"y" * 100_000})
    size = struct.pack("<I", 100_000)
    lying = honest.replace(size, struct.pack("<I", 10))
    error = refused(api, session, lying)
    assert error["member"] == "lie.txt"
    # And one declaring more than it holds.
    small = zip_with({"short.txt": b"z" * 50}, zipfile.ZIP_STORED)
    crc = struct.pack("<I", zlib.crc32(b"z" * 50))
    assert crc in small
    longer = small.replace(struct.pack("<II", 50, 50), struct.pack("<II", 50, 5000))
    assert refused(api, session, longer)["status"] in (400, 413, 422)


def test_a_compressed_tar_that_inflates_past_the_quota_is_cut_off(
    api: Api, session: Session, settings: Any
) -> None:
    settings.STRAND_WORKSPACE_MAX_BYTES = 1024 * 1024
    # A pax header of 40 MB of zeros: a few KB compressed, never a file's declared size.
    member = tarfile.TarInfo("x.txt")
    member.pax_headers = {"comment": "0" * (40 * 1024 * 1024)}
    error = refused(api, session, gzip.compress(tar_with((member, b"x"))))
    assert error["status"] == 413


def test_what_is_no_archive_is_refused(api: Api, session: Session) -> None:
    assert "not a tar" in refused(api, session, b"just some text, not an archive")["detail"]
    assert refused(api, session, b"PK\x03\x04broken")["status"] in (400, 422)
    assert refused(api, session, b"\x1f\x8b\x08\x00garbage")["status"] in (400, 422)


def test_an_upload_while_the_session_is_busy_is_refused_with_409(
    api: Api, session: Session, settings: Any
) -> None:
    params = connection.get_connection_params()
    with psycopg.connect(**params, autocommit=True) as other:
        other.execute("SELECT pg_advisory_lock(%s)", [turn_lock_key(session.id)])
        error = refused(api, session, tar_with(file("late.txt")))
    assert error["status"] == 409


def test_uploads_are_rate_limited(api: Api, session: Session, settings: Any) -> None:
    settings.STRAND_RATE_LIMITS = {"upload": (1, 3600)}
    first = api.client.generic(
        "POST",
        f"/api/sessions/{session.id}/files",
        tar_with(file("one.txt")),
        content_type="application/x-tar",
    )
    assert first.status_code == 200, first.content
    error = refused(api, session, tar_with(file("two.txt")))
    assert error["status"] == 429


def test_the_upload_doors_take_an_upload_sized_body_and_no_other_route_does(
    session: Session, settings: Any
) -> None:
    from config.body_limits import MULTIPART_ROOM, limit_for

    token = [(b"authorization", b"Bearer anything")]
    cookie = [(b"cookie", f"{settings.SESSION_COOKIE_NAME}=anything".encode())]
    upload = int(settings.STRAND_MAX_UPLOAD_BYTES) + MULTIPART_ROOM
    for path, credential in [
        (f"/api/sessions/{session.id}/files", token),
        (f"/sessions/{session.id}/workspace/upload", cookie),
    ]:
        assert limit_for("POST", path, credential).size == upload
        assert limit_for("POST", path, []).size == settings.STRAND_MAX_ANONYMOUS_BODY_BYTES
    for method, path in [
        ("PUT", f"/api/sessions/{session.id}/files"),
        ("POST", f"/api/sessions/{session.id}/files/x"),
        ("POST", f"/api/sessions/{session.id}/events"),
    ]:
        assert limit_for(method, path, token).size == settings.STRAND_MAX_BODY_BYTES
