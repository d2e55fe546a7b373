"""Every move in history moves the files (DESIGN §11), through the API with the offline
model: a branch that never wrote a file does not see it, moving back restores it, a fork
sees its fork point's files, two sessions never share files, and a file made by hand
survives moving away and back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sessions_app import store
from sessions_app.models import Session, WorkspaceBlob
from sessions_app.selectors.verify import verify_session
from sessions_app.store.blobs import blobs_get
from tests.api.conftest import Api, body_of, wait_for, wait_idle

pytestmark = pytest.mark.django_db(transaction=True)


def new_session(api: Api, **body: Any) -> Session:
    response = api.post("/sessions", {"title": "files", **body})
    assert response.status_code == 201, response.content
    return Session.objects.get(id=body_of(response)["id"])


def say(api: Api, session: Session, text: str) -> list[dict[str, Any]]:
    """Send `text` (each write approved) and wait for the turn: its tool results' messages."""
    before = Session.objects.get(id=session.id).last_seq
    response = api.post(f"/sessions/{session.id}/messages", {"text": text})
    assert response.status_code == 202, response.content
    for _ in range(text.count("write ")):
        pending = wait_for(lambda: body_of(api.get(f"/sessions/{session.id}/approvals")))
        decided = api.post(
            f"/sessions/{session.id}/approvals/{pending[0]['approval_id']}", {"outcome": "allowed"}
        )
        assert decided.status_code == 204, decided.content
    wait_idle(session)
    events = store.events_after(session.id, before, 10_000)
    return [e.data["entry"]["message"] for e in events if e.type == "tool/result"]


def output(message: dict[str, Any]) -> str:
    return "".join(block.get("text", "") for block in message["content"])


def leaf(session: Session) -> str | None:
    return Session.objects.get(id=session.id).leaf_entry_id


def move(api: Api, session: Session, entry_id: str | None) -> None:
    response = api.put(f"/sessions/{session.id}/leaf", {"entry_id": entry_id})
    assert response.status_code == 200, response.content


@pytest.fixture
def api(workspace_root: Path, as_alice: Api) -> Api:
    return as_alice


def test_a_branch_never_sees_what_another_wrote_and_moving_back_restores_it(
    api: Api, alice: Any
) -> None:
    session = new_session(api)
    folder = Path(session.cwd)
    say(api, session, "list files")
    before_write = leaf(session)
    [wrote] = say(api, session, "write notes.txt: branch A wrote this")
    assert not wrote["isError"], wrote
    branch_a = leaf(session)
    (folder / "by-hand.txt").write_text("typed in an editor")

    move(api, session, before_write)
    [read] = say(api, session, "read notes.txt")
    assert read["isError"] and "branch A" not in output(read)
    assert not (folder / "by-hand.txt").exists()

    move(api, session, branch_a)
    [again] = say(api, session, "read notes.txt")
    assert "branch A wrote this" in output(again)
    assert (folder / "by-hand.txt").read_text() == "typed in an editor"
    # Every content named by a snapshot is in the owner's store.
    snaps = [
        e for e in store.events_after(session.id, -1, 10_000) if e.type == "workspace/snapshot"
    ]
    shas = {f["sha256"] for e in snaps for f in e.data["files"].values()}
    assert set(blobs_get(owner_id=alice.pk, shas=shas)) == shas
    assert [e.data["reason"] for e in snaps] == ["tool", "outside", "restore", "restore"]


def test_two_sessions_never_share_files(api: Api) -> None:
    first, second = new_session(api), new_session(api)
    assert first.cwd != second.cwd
    say(api, first, "write secret.txt: the first session's")
    [read] = say(api, second, "read secret.txt")
    assert read["isError"]
    # Asking for the folder another session works in gives a copy, not the folder.
    third = new_session(api, cwd=first.cwd)
    assert third.cwd != first.cwd
    assert (Path(third.cwd) / "secret.txt").read_text() == "the first session's"
    say(api, third, "write secret.txt: changed in the copy")
    assert (Path(first.cwd) / "secret.txt").read_text() == "the first session's"


def test_a_fork_starts_from_its_fork_points_files(api: Api, bob: Any) -> None:
    session = new_session(api)
    say(api, session, "write a.txt: at the fork point")
    fork_point = leaf(session)
    say(api, session, "write a.txt: after the fork point")
    response = api.post(f"/sessions/{session.id}/fork", {"entry_id": fork_point})
    assert response.status_code == 201, response.content
    fork = Session.objects.get(id=body_of(response)["id"])
    assert fork.cwd != session.cwd
    assert (Path(fork.cwd) / "a.txt").read_text() == "at the fork point"
    [read] = say(api, fork, "read a.txt")
    assert "at the fork point" in output(read)
    assert (Path(session.cwd) / "a.txt").read_text() == "after the fork point"


# --- reading the workspace at an entry ---------------------------------------------------


def test_the_files_at_each_entry_a_page_at_a_time(api: Api, as_bob: Api) -> None:
    session = new_session(api)
    say(api, session, "list files")
    before = leaf(session)
    say(api, session, "write a.txt: one\nwrite b.txt: two\nwrite c/d.txt: three")
    base = f"/sessions/{session.id}/files"

    first = body_of(api.get(f"{base}?limit=2"))
    assert first["total"] == 3 and [f["path"] for f in first["files"]] == ["a.txt", "b.txt"]
    rest = body_of(api.get(f"{base}?limit=2&cursor={first['next_cursor']}"))
    assert [f["path"] for f in rest["files"]] == ["c/d.txt"] and rest["next_cursor"] is None
    assert body_of(api.get(f"{base}?entry={before}"))["files"] == []

    one = body_of(api.get(f"{base}/c/d.txt"))
    assert one["text"] == "three" and not one["binary"] and one["size"] == 5
    missing = api.get(f"{base}/c/d.txt?entry={before}")
    assert missing.status_code == 404 and body_of(missing)["error"] == "not_found"
    assert api.get(f"{base}?entry=nosuch").status_code in (404, 422)
    assert api.get(f"{base}?cursor=garbage").status_code == 422
    # Another user learns nothing, not even that the session exists.
    for url in (base, f"{base}/a.txt"):
        refused = as_bob.get(url)
        assert refused.status_code == 404, refused.content


def test_verify_finds_a_snapshot_whose_content_is_gone(api: Api) -> None:
    session = new_session(api)
    say(api, session, "write kept.txt: kept")
    assert verify_session(Session.objects.get(id=session.id)) is None
    WorkspaceBlob.objects.filter(owner=session.owner).delete()
    problem = verify_session(Session.objects.get(id=session.id))
    assert problem is not None and "is not stored" in problem
