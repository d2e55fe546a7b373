"""Workspaces belong to their owner: every door refuses a working directory outside it.

Bob keeps a secret in his own folder. Alice tries to give a session of hers a working
directory that reaches it (Bob's folder itself, the workspace root, `..`, a link she found
in her folder, a folder nobody granted her) through the API (token and cookie), the page's
new-session form (with its CSRF token), a Pi import that names Bob's folder and the import
command; Carol (staff) forks Alice's session from the page; and a session whose folder
breaks the rule (made before it, or whose folder became a link since) is sent a message.
Each attempt is refused with a clean 4xx (or a message on the page), nothing is written
anywhere under the workspace root, and no event of any session holds Bob's secret.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.urls import reverse

from sessions_app import services, store, workspaces
from sessions_app.models import Session
from sessions_app.services.pi_io import pi_export_lines
from tests.api.conftest import (
    CSRF_SECRET,
    Api,
    body_of,
    cookie_api,
    token_api,
    user_msg,
    wait_idle,
)

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "bob-secret-4471"
PI_FILE = Path(__file__).resolve().parents[1] / "fixtures" / "pi" / "cases" / "basic_linear.jsonl"


@dataclass
class Folders:
    root: Path
    alice: Path
    bob: Path


@pytest.fixture
def folders(workspace_root: Path, alice: User, bob: User) -> Folders:
    """The workspace root with Alice's and Bob's folders. Bob's holds the secret; Alice's
    holds a link into Bob's (say a tool of some other program left it there)."""
    mine = Path(workspaces.default_cwd(alice))
    (mine / "mine.txt").write_text("alice's own notes\n")
    his = Path(workspaces.default_cwd(bob))
    (his / "secret.txt").write_text(SECRET + "\n")
    (mine / "link").symlink_to(his)
    return Folders(workspace_root.resolve(), mine, his)


def snapshot(root: Path) -> dict[str, Any]:
    """Every path under `root` (links not followed) with what it is and holds."""
    found: dict[str, Any] = {}
    for here, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(here) / name
            key = str(path.relative_to(root))
            if path.is_symlink():
                found[key] = ("link", os.readlink(path))
            elif path.is_dir():
                found[key] = ("dir",)
            else:
                found[key] = ("file", path.read_bytes())
    return found


def attacks(f: Folders) -> dict[str, str]:
    """Working directories that lead out of Alice's folder, each as she might send it."""
    return {
        "Bob's folder": str(f.bob),
        "a folder in Bob's": str(f.bob / "sub"),
        "the workspace root": str(f.root),
        "dot-dot from her folder": f"{f.alice}/../{f.bob.name}",
        "relative dot-dot": f"../{f.bob.name}",
        "tilde dot-dot": f"~/../{f.bob.name}",
        "a link out of her folder": "~/link",
        "a folder through that link": "~/link/sub",
        "the link by its absolute path": str(f.alice / "link"),
        "a system folder": "/etc",
        "a folder nobody granted": "@shared",
    }


def all_events_text() -> str:
    return json.dumps(
        [e.data for s in Session.objects.all() for e in store.events_after(s.id, -1, 100_000)]
    )


def page_client(user: User) -> Client:
    """A signed-in browser: Django's client with CSRF checks on, sending the token."""
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    client.cookies["csrftoken"] = CSRF_SECRET
    return client


def post_page(client: Client, url: str, data: dict[str, Any]) -> Any:
    return client.post(url, {**data, "csrfmiddlewaretoken": CSRF_SECRET}, follow=True)


def session_with_a_message(owner: User, cwd: str) -> Session:
    session = services.session_create(owner=owner, title="work", cwd=cwd)
    store.append_events(session.id, session.last_seq, [user_msg("hello")])
    session.refresh_from_db()
    return session


def run(api: Api, session_id: Any, text: str) -> list[Any]:
    """Send `text` as a message and wait for the turn: the tool results it wrote."""
    before = Session.objects.get(id=session_id).last_seq
    response = api.post(f"/sessions/{session_id}/messages", {"text": text})
    assert response.status_code == 202, response.content
    session = Session.objects.get(id=session_id)
    wait_idle(session)
    return [e for e in store.events_after(session.id, before, 10_000) if e.type == "tool/result"]


CLIENTS: dict[str, Callable[[Any], Api]] = {"token": token_api, "cookie": cookie_api}


# --- new sessions ---------------------------------------------------------------------------


@pytest.mark.parametrize("auth", CLIENTS)
def test_the_api_refuses_every_folder_outside_the_owners(
    auth: str, folders: Folders, alice: User
) -> None:
    api = CLIENTS[auth](alice)
    before = snapshot(folders.root)
    for name, cwd in attacks(folders).items():
        response = api.post("/sessions", {"title": name, "cwd": cwd})
        assert response.status_code == 403, (name, response.content)
        body = body_of(response)
        assert body["error"] == "workspace_not_allowed", name
        assert str(folders.root) not in body["detail"], name
    # A NUL byte, which would cut the path short in C, does not get past the body parser.
    nul = api.post("/sessions", {"title": "nul", "cwd": f"{folders.alice}\x00/../{folders.bob}"})
    assert nul.status_code == 400
    assert Session.objects.count() == 0
    assert snapshot(folders.root) == before


@pytest.mark.parametrize("auth", CLIENTS)
def test_the_api_takes_the_owners_folder_and_shows_it_relative(
    auth: str, folders: Folders, alice: User
) -> None:
    api = CLIENTS[auth](alice)
    default = api.post("/sessions", {"title": "default"})
    project = api.post("/sessions", {"title": "project", "cwd": "~/project"})
    relative = api.post("/sessions", {"title": "relative", "cwd": "docs/notes"})
    absolute = api.post("/sessions", {"title": "absolute", "cwd": str(folders.alice / "abs")})
    shown = [body_of(r)["cwd"] for r in (default, project, relative, absolute)]
    assert [r.status_code for r in (default, project, relative, absolute)] == [201] * 4
    # A session that asks for no folder gets one of its own (DESIGN §11).
    assert shown[0].startswith("~/sessions/") and len(shown[0]) > len("~/sessions/")
    assert shown[1:] == ["~/project", "~/docs/notes", "~/abs"]
    assert (folders.alice / "project").is_dir() and (folders.alice / "docs" / "notes").is_dir()
    stored = Session.objects.get(id=body_of(project)["id"])
    assert stored.cwd == str(folders.alice / "project")
    # Nowhere does the API tell the server's layout: not the session, the list, the log,
    # nor the Pi export.
    sid = stored.id
    reads = [
        api.get(f"/sessions/{sid}"),
        api.get("/sessions"),
        api.get(f"/sessions/{sid}/events"),
        api.get(f"/sessions/{sid}/export"),
    ]
    for response in reads:
        assert response.status_code == 200
        text = b"".join(response) if hasattr(response, "streaming_content") else response.content
        assert str(folders.root).encode() not in text
    header = json.loads(next(iter(pi_export_lines(stored))))
    assert header["cwd"] == "~/project"


def test_the_new_session_form_refuses_every_folder_outside_the_owners(
    folders: Folders, alice: User
) -> None:
    client = page_client(alice)
    home = client.get(reverse("home"))
    html = home.content.decode()
    # The form offers a folder of the session's own: the page never shows the server's path.
    assert 'name="cwd" value=""' in html and "~/sessions/" in html
    assert str(folders.root) not in html
    before = snapshot(folders.root)
    for name, cwd in {**attacks(folders), "a NUL byte": "~/a\x00b"}.items():
        response = post_page(
            client, reverse("session-new"), {"title": name, "preset": "offline", "cwd": cwd}
        )
        # A NUL is refused before the form is read, as in any field (`sessions_app.bad_input`).
        assert response.status_code == (400 if "\x00" in cwd else 200), name
        page = response.content.decode()
        reasons = ("must be your own folder", "granted to you", "NUL character")
        assert any(reason in page for reason in reasons), name
        assert str(folders.root) not in page, name
    assert Session.objects.count() == 0
    assert snapshot(folders.root) == before
    made = post_page(
        client, reverse("session-new"), {"title": "ok", "preset": "offline", "cwd": "~/web"}
    )
    assert made.status_code == 200
    assert Session.objects.get().cwd == str(folders.alice / "web")


def test_a_session_in_her_own_folder_cannot_reach_bobs_files(folders: Folders, alice: User) -> None:
    api = token_api(alice)
    sid = body_of(api.post("/sessions", {"title": "mine", "cwd": "~"}))["id"]
    results = run(
        api,
        sid,
        f"read ../{folders.bob.name}/secret.txt and list files in ../{folders.bob.name} "
        "and read link/secret.txt and list files in link and read mine.txt",
    )
    assert len(results) == 5
    outputs = [e.data["entry"]["message"] for e in results]
    assert [o["isError"] for o in outputs] == [True, True, True, True, False]
    assert SECRET not in all_events_text()


# --- Pi import ------------------------------------------------------------------------------


def pi_file_naming(folder: Path) -> bytes:
    """The test Pi file, its header claiming `folder` as the session's working directory."""
    lines = PI_FILE.read_text().splitlines()
    header = json.loads(lines[0])
    header["cwd"] = str(folder)
    return "\n".join([json.dumps(header), *lines[1:]]).encode() + b"\n"


@pytest.mark.parametrize("auth", CLIENTS)
def test_an_imported_file_naming_bobs_folder_gets_the_importers_own(
    auth: str, folders: Folders, alice: User
) -> None:
    api = CLIENTS[auth](alice)
    upload = SimpleUploadedFile("s.jsonl", pi_file_naming(folders.bob))
    extra: dict[str, Any] = {"HTTP_X_CSRFTOKEN": CSRF_SECRET} if api.csrf else {}
    response = api.client.post("/api/sessions/import", {"file": upload}, **extra)
    assert response.status_code == 201, response.content
    created = body_of(response)["session"]
    # A folder of its own in hers, never the folder the file names.
    assert created["cwd"].startswith("~/sessions/")
    assert Path(Session.objects.get(id=created["id"]).cwd).parent == folders.alice / "sessions"
    results = run(api, created["id"], "list files and read secret.txt")
    listing, secret = (e.data["entry"]["message"] for e in results)
    assert "secret.txt" not in json.dumps(listing)
    assert secret["isError"]
    assert SECRET not in all_events_text()


def test_the_import_form_gives_the_importers_own_folder(folders: Folders, alice: User) -> None:
    upload = SimpleUploadedFile("s.jsonl", pi_file_naming(folders.bob))
    response = post_page(page_client(alice), reverse("session-import"), {"file": upload})
    assert response.status_code == 200
    assert Path(Session.objects.get().cwd).parent == folders.alice / "sessions"


def test_the_import_command_keeps_to_the_owners_folders(
    folders: Folders, alice: User, tmp_path: Path, capsys: Any
) -> None:
    """The command is the operator's, and still follows the rule: a folder outside the
    owner's is refused (an operator grants it first, STRAND_WORKSPACE_GRANTS); without
    --cwd the session gets the owner's folder, never the folder the file names."""
    source = tmp_path / "s.jsonl"
    source.write_bytes(pi_file_naming(folders.bob))
    before = snapshot(folders.root)
    with pytest.raises(CommandError, match="must be your own folder"):
        call_command("import_pi", str(source), "--owner", "alice", "--cwd", str(folders.bob))
    assert Session.objects.count() == 0 and snapshot(folders.root) == before
    call_command("import_pi", str(source), "--owner", "alice")
    assert Path(Session.objects.get().cwd).parent == folders.alice / "sessions"


# --- forks ----------------------------------------------------------------------------------


def test_staff_fork_from_the_page_works_in_their_own_folder(
    folders: Folders, alice: User, carol: User
) -> None:
    talk = session_with_a_message(alice, str(folders.alice))
    entry = store.entries_of(talk.id)[0].id
    client = page_client(carol)
    response = post_page(client, reverse("session-fork", args=[talk.id]), {"entry_id": entry})
    assert response.status_code == 200
    fork = Session.objects.get(owner=carol)
    carols = Path(workspaces.default_cwd(carol))
    assert Path(fork.cwd).parent == carols / "sessions" and fork.parent_id == talk.id
    assert str(folders.root) not in response.content.decode()
    results = run(token_api(carol), fork.id, "list files and read mine.txt")
    listing, mine = (e.data["entry"]["message"] for e in results)
    assert "mine.txt" not in json.dumps(listing) and mine["isError"]
    assert "alice's own notes" not in all_events_text()


def test_staff_cannot_fork_through_the_api_and_an_owners_fork_gets_a_folder_of_its_own(
    folders: Folders, alice: User, carol: User
) -> None:
    api = token_api(alice)
    sid = body_of(api.post("/sessions", {"title": "t", "cwd": "~/project"}))["id"]
    store.append_events(sid, 0, [user_msg("hello")])
    entry = store.entries_of(sid)[0].id
    refused = token_api(carol).post(f"/sessions/{sid}/fork", {"entry_id": entry})
    assert refused.status_code == 403 and Session.objects.count() == 1
    own = api.post(f"/sessions/{sid}/fork", {"entry_id": entry})
    assert own.status_code == 201 and body_of(own)["cwd"].startswith("~/sessions/")


# --- sessions that break the rule -----------------------------------------------------------


@pytest.fixture
def stray(folders: Folders, alice: User) -> Session:
    """A session of Alice's working in Bob's folder: made before the rule, or edited in the
    database since. It is refused at its next turn, not moved."""
    session = session_with_a_message(alice, str(folders.alice))
    Session.objects.filter(id=session.id).update(cwd=str(folders.bob))
    session.refresh_from_db()
    return session


@pytest.mark.parametrize("auth", CLIENTS)
def test_a_session_outside_its_owners_folder_is_refused_at_its_next_turn(
    auth: str, stray: Session, folders: Folders, alice: User
) -> None:
    api = CLIENTS[auth](alice)
    before = snapshot(folders.root)
    for path, body in (
        ("messages", {"text": "read secret.txt"}),
        ("steer", {"text": "read secret.txt"}),
        ("follow-up", {"text": "read secret.txt"}),
        ("compact", {}),
    ):
        response = api.post(f"/sessions/{stray.id}/{path}", body)
        assert response.status_code == 403, (path, response.content)
        refused = body_of(response)
        assert refused["error"] == "workspace_not_allowed"
        assert "outside its owner's folder" in refused["detail"]
        assert str(folders.root) not in refused["detail"]
    assert Session.objects.get(id=stray.id).last_seq == stray.last_seq
    assert Session.objects.get(id=stray.id).cwd == str(folders.bob)  # not silently moved
    assert body_of(api.get(f"/sessions/{stray.id}"))["cwd"] == workspaces.OUTSIDE
    assert snapshot(folders.root) == before
    assert SECRET not in all_events_text()


def test_the_page_says_why_such_a_session_does_not_run(stray: Session, alice: User) -> None:
    response = post_page(
        page_client(alice), reverse("session-send", args=[stray.id]), {"text": "read secret.txt"}
    )
    assert response.status_code == 200
    assert "outside its owner&#x27;s folder" in response.content.decode()
    assert Session.objects.get(id=stray.id).last_seq == stray.last_seq


def test_a_folder_that_became_a_link_since_is_refused(folders: Folders, alice: User) -> None:
    api = token_api(alice)
    sid = body_of(api.post("/sessions", {"title": "t", "cwd": "~/project"}))["id"]
    (folders.alice / "project").rmdir()
    (folders.alice / "project").symlink_to(folders.bob)
    response = api.post(f"/sessions/{sid}/messages", {"text": "read secret.txt"})
    assert response.status_code == 403
    assert body_of(response)["error"] == "workspace_not_allowed"
    assert Session.objects.get(id=sid).last_seq == 0
    assert SECRET not in all_events_text()


# --- grants -----------------------------------------------------------------------------------


def test_operators_grant_folders_and_users_cannot(
    folders: Folders, alice: User, bob: User, tmp_path: Path, settings: Any
) -> None:
    shared = tmp_path / "datasets" / "shared"
    shared.mkdir(parents=True)
    (shared / "data.txt").write_text("shared data\n")
    settings.STRAND_WORKSPACE_GRANTS = {"alice": [str(shared)]}
    alices, bobs = token_api(alice), token_api(bob)
    granted = alices.post("/sessions", {"title": "data", "cwd": "@shared"})
    assert granted.status_code == 201 and body_of(granted)["cwd"] == "@shared"
    [read] = run(alices, body_of(granted)["id"], "read data.txt")
    assert "shared data" in json.dumps(read.data)
    for cwd in ("@shared", str(shared)):
        refused = bobs.post("/sessions", {"title": "data", "cwd": cwd})
        assert refused.status_code == 403, cwd
    # Nothing a user sends can add a grant: the session API has no such field, and an
    # unknown field changes nothing.
    extra = bobs.post("/sessions", {"title": "x", "cwd": str(shared), "grants": [str(shared)]})
    assert extra.status_code in (403, 422)
    assert not Session.objects.filter(owner=bob).exists()
