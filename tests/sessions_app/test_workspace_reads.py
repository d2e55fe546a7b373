"""The workspace at an entry is read from its newest checkpoint and the tail after it: the
same workspace as the fold of every snapshot on its path, from a bounded read however many
snapshots the session holds."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from projections.workspace import fold_workspace, snapshot_of
from sessions_app import services, store
from sessions_app.selectors.workspace import workspace_at, workspace_reads, workspace_snapshots
from sessions_app.store import NewEvent

pytestmark = pytest.mark.django_db


def state(text: str) -> dict[str, Any]:
    content = text.encode()
    return {"sha256": hashlib.sha256(content).hexdigest(), "size": len(content), "mode": 0o644}


def entry(entry_id: str, parent: str | None) -> NewEvent:
    return NewEvent(
        "entry/message",
        {
            "entry": {
                "type": "message",
                "id": entry_id,
                "parentId": parent,
                "message": {"role": "custom", "content": entry_id},
            }
        },
    )


def snapshot(
    at: str | None, files: dict[str, Any], manifest: dict[str, Any] | None = None
) -> NewEvent:
    data: dict[str, Any] = {"at": at, "reason": "tool", "files": files, "deleted": []}
    if manifest is not None:
        data.update(full=True, manifest=manifest)
    return NewEvent("workspace/snapshot", data)


def append(session: Any, events: list[NewEvent]) -> None:
    for start in range(0, len(events), 1000):
        session.refresh_from_db(fields=["last_seq"])
        store.append_events(session.id, session.last_seq, events[start : start + 1000])


def naive(session: Any, entry_id: str | None) -> Any:
    path = [e.id for e in store.path_to_root(session.id, entry_id)] if entry_id else []
    return fold_workspace(path, workspace_snapshots(session.id))


def test_a_read_after_10000_snapshots_reads_one_checkpoint_and_its_tail(alice: Any) -> None:
    session = services.session_create(owner=alice, title="long", cwd="")
    events: list[NewEvent] = []
    manifest: dict[str, Any] = {}
    parent = None
    for index in range(10_000):
        entry_id = f"e{index:05d}"
        events.append(entry(entry_id, parent))
        change = {f"file{index % 50}.txt": state(f"version {index}")}
        manifest.update(change)
        full = dict(manifest) if index % 32 == 31 else None
        events.append(snapshot(entry_id, change, full))
        parent = entry_id
    append(session, events)
    leaf = parent
    assert leaf is not None

    with CaptureQueriesContext(connection) as queries:
        read = workspace_reads(session.id, leaf)
    assert read is not None
    path, tail = read
    assert len(queries) <= 6
    # The tail from the newest checkpoint, and the path only up to it.
    assert 1 <= len(tail) <= 32 and tail[0].data.get("full")
    assert len(path) <= 32 and path[-1] == leaf
    assert fold_workspace(path, [snapshot_of(e) for e in tail]) == naive(session, leaf)
    assert workspace_at(session.id, leaf) == naive(session, leaf)
    # A snapshot not stored yet at an entry far up the path: the path reaches up to it.
    reached = workspace_reads(session.id, leaf, also=["e00010", "nosuch"])
    assert reached is not None and reached[0][0] == "e00010" and reached[0][-1] == leaf
    assert "nosuch" not in reached[0]
    # An entry far back reads its own checkpoint, not the snapshots after it (the newer
    # checkpoints on its line are passed over 64 at a time).
    with CaptureQueriesContext(connection) as queries:
        back = workspace_reads(session.id, "e05000")
    assert back is not None and len(back[1]) <= 32 and len(queries) <= 20
    assert workspace_at(session.id, "e05000") == naive(session, "e05000")


def test_a_checkpoint_written_after_moving_back_is_passed_over_below_it(alice: Any) -> None:
    """a → b: b's files are recorded, then the folder moves back to a, where a checkpoint is
    written. It does not hold b's files, so b's workspace is read from before it."""
    session = services.session_create(owner=alice, title="back", cwd="")
    append(
        session,
        [
            entry("a", None),
            snapshot("a", {"x": state("a's x")}, {"x": state("a's x")}),
            entry("b", "a"),
            snapshot("b", {"y": state("b's y")}),
            entry("c", "a"),
            snapshot(
                "a", {"z": state("by hand at a")}, {"x": state("a's x"), "z": state("by hand at a")}
            ),
            snapshot(None, {"root": state("at the root")}),
        ],
    )
    for at in ("a", "b", "c", None):
        assert workspace_at(session.id, at) == naive(session, at), at
    assert set(workspace_at(session.id, "b") or {}) == {"x", "y", "z", "root"}
    assert workspace_at(session.id, "nosuch") is None


def test_other_branches_checkpoints_are_not_read(alice: Any) -> None:
    session = services.session_create(owner=alice, title="branches", cwd="")
    events = [entry("root", None), snapshot("root", {"r": state("r")}, {"r": state("r")})]
    for branch in ("p", "q"):
        parent = "root"
        for index in range(40):
            entry_id = f"{branch}{index}"
            events.append(entry(entry_id, parent))
            files = {f"{branch}.txt": state(f"{branch} {index}")}
            events.append(
                snapshot(entry_id, files, {"r": state("r"), **files} if index % 10 == 9 else None)
            )
            parent = entry_id
    append(session, events)
    for leaf in ("p39", "q39", "p5", "q12"):
        assert workspace_at(session.id, leaf) == naive(session, leaf), leaf
    assert set(workspace_at(session.id, "p39") or {}) == {"r", "p.txt"}
