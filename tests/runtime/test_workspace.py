"""The folder as facts, against the in-memory log and the offline model: a write is
recorded with its result, a change made by hand before the next turn, and moving back in
the tree brings the folder back to that entry's files."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from projections.workspace import fold_workspace, snapshot_of
from runtime import Runtime
from runtime.ports import NewFact
from runtime.tools import WorkspaceQuota
from runtime.workspace import WorkspaceTooLarge, materialize, scan, scan_paths
from tests.runtime.conftest import OFFLINE
from tests.runtime.fakes import FakeLog


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def snapshots(log: FakeLog, sid: str) -> list[dict[str, Any]]:
    return [dict(e.data) for e in log.events(sid) if e.type == "workspace/snapshot"]


def files_at(log: FakeLog, sid: str, entry_id: str) -> dict[str, int]:
    path = [e.id for e in run(log.path(sid, entry_id))]
    events = [e for e in log.events(sid) if e.type == "workspace/snapshot"]
    return {p: f.size for p, f in fold_workspace(path, [snapshot_of(e) for e in events]).items()}


async def turn(rt: Runtime, sid: str, text: str) -> None:
    await rt.send(sid, text, auto_approve=True)
    ended = await rt.wait(sid, 30) or []
    assert [e.reason for e in ended] == ["completed"]


async def move_leaf(log: FakeLog, sid: str, to: str | None) -> None:
    head = await log.head(sid)
    await log.append(sid, head.last_seq, [NewFact("leaf/moved", {"to": to, "reason": "navigate"})])


def test_a_write_is_recorded_in_the_append_of_its_result(tmp_path: Path) -> None:
    log = FakeLog()
    sid = log.create(OFFLINE, cwd=str(tmp_path))

    async def go() -> None:
        await turn(Runtime(log), sid, "write notes.txt: hello")

    run(go())
    events = log.events(sid)
    index = next(i for i, e in enumerate(events) if e.type == "workspace/snapshot")
    result, snap = events[index - 1], events[index]
    assert result.type == "tool/result"
    assert snap.data["reason"] == "tool" and snap.data["at"] == result.entry_id
    assert list(snap.data["files"]) == ["notes.txt"]
    blob = log.sessions[sid].blobs[snap.data["files"]["notes.txt"]["sha256"]]
    assert blob == b"hello"


def test_moving_back_restores_the_files_and_keeps_a_hand_edit(tmp_path: Path) -> None:
    log = FakeLog()
    sid = log.create(OFFLINE, cwd=str(tmp_path))
    rt = Runtime(log)

    async def go() -> tuple[str | None, str | None]:
        await turn(rt, sid, "hi")
        root_leaf = (await log.head(sid)).leaf_entry_id
        await turn(rt, sid, "write notes.txt: branch A wrote this")
        a_leaf = (await log.head(sid)).leaf_entry_id
        (tmp_path / "mine.txt").write_text("made by hand")
        await move_leaf(log, sid, root_leaf)
        await turn(rt, sid, "list .")  # branch B: starts where notes.txt was never written
        assert not (tmp_path / "notes.txt").exists()
        assert not (tmp_path / "mine.txt").exists()
        await move_leaf(log, sid, a_leaf)
        await turn(rt, sid, "read notes.txt")
        return root_leaf, a_leaf

    root_leaf, a_leaf = run(go())
    assert (tmp_path / "notes.txt").read_text() == "branch A wrote this"
    assert (tmp_path / "mine.txt").read_text() == "made by hand"
    reasons = [s["reason"] for s in snapshots(log, sid)]
    assert reasons == ["tool", "outside", "restore", "restore"]
    assert a_leaf is not None and root_leaf is not None
    assert files_at(log, sid, a_leaf) == {"notes.txt": 19, "mine.txt": 12}
    assert files_at(log, sid, root_leaf) == {}


def test_an_unchanged_folder_records_nothing(tmp_path: Path) -> None:
    log = FakeLog()
    (tmp_path / "kept.txt").write_text("x")
    sid = log.create(OFFLINE, cwd=str(tmp_path))
    rt = Runtime(log)

    async def go() -> None:
        await turn(rt, sid, "hi")
        await turn(rt, sid, "read kept.txt")

    run(go())
    assert [s["reason"] for s in snapshots(log, sid)] == ["outside"]
    assert snapshots(log, sid)[0]["at"] is None  # before any entry: on every path


def test_links_are_neither_followed_nor_recorded_nor_written_through(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret")
    root = tmp_path / "ws"
    root.mkdir()
    (root / "link").symlink_to(outside)
    (root / "file-link").symlink_to(outside / "secret.txt")
    found = scan(root, {}, WorkspaceQuota())
    assert found.manifest == {}
    # A restore that writes "link/secret.txt" replaces the link with a real folder.
    state = scan(outside, {}, WorkspaceQuota()).manifest["secret.txt"]
    blobs = {state.sha256: b"secret"}
    materialize(root, {}, {"link/secret.txt": state, "file-link": state}, blobs)
    assert not (root / "link").is_symlink() and not (root / "file-link").is_symlink()
    assert (outside / "secret.txt").read_text() == "secret"


def test_a_scan_hashes_only_what_changed_and_respects_the_quota(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("1")
    (tmp_path / "b").write_text("2")
    first = scan(tmp_path, {}, WorkspaceQuota())
    assert sorted(first.blobs.values()) == [b"1", b"2"]
    (tmp_path / "b").write_text("3")
    os.utime(tmp_path / "b", ns=(1, 1))
    second = scan(tmp_path, first.manifest, WorkspaceQuota())
    assert list(second.files) == ["b"] and list(second.blobs.values()) == [b"3"]
    with pytest.raises(WorkspaceTooLarge, match="more than 1 files"):
        scan(tmp_path, {}, WorkspaceQuota(max_entries=1))


def test_what_a_turn_cut_short_left_is_recorded_as_recovery(tmp_path: Path) -> None:
    log = FakeLog()
    sid = log.create(OFFLINE, cwd=str(tmp_path))
    rt = Runtime(log)

    async def go() -> None:
        await turn(rt, sid, "hi")
        # A turn whose process died after its tool wrote a file, closed by recovery.
        head = await log.head(sid)
        cut = [
            NewFact("turn/start", {"turn": 2, "trigger": "message"}, turn=2),
            NewFact("turn/end", {"turn": 2, "reason": "interrupted"}, turn=2),
        ]
        await log.append(sid, head.last_seq, cut)
        (tmp_path / "half.txt").write_text("written before the crash")
        await turn(rt, sid, "read half.txt")

    run(go())
    [snap] = snapshots(log, sid)
    assert snap["reason"] == "recovery" and list(snap["files"]) == ["half.txt"]


def test_a_scan_of_the_named_paths_finds_what_the_whole_scan_finds(tmp_path: Path) -> None:
    quota = WorkspaceQuota(max_bytes=0, max_entries=0)
    for i in range(50):
        (tmp_path / f"f{i}.txt").write_text(f"file {i}\n")
    known = scan(tmp_path, {}, quota).manifest
    (tmp_path / "f3.txt").write_text("changed\n")
    (tmp_path / "new" / "deep").mkdir(parents=True)
    (tmp_path / "new" / "deep" / "n.txt").write_text("new\n")
    (tmp_path / "f7.txt").unlink()
    named = scan_paths(
        tmp_path, known, ["f3.txt", "./new/deep/n.txt", str(tmp_path / "f7.txt")], quota
    )
    whole = scan(tmp_path, known, quota)
    assert named is not None
    assert named.files == whole.files and named.deleted == whole.deleted == ("f7.txt",)
    assert named.manifest == whole.manifest and named.blobs == whole.blobs
    # Unchanged: nothing found, nothing read.
    again = scan_paths(tmp_path, whole.manifest, ["f3.txt"], quota)
    assert again is not None and again.empty


def test_a_named_path_that_is_not_plainly_inside_falls_back_to_the_whole_scan(
    tmp_path: Path,
) -> None:
    quota = WorkspaceQuota(max_bytes=0, max_entries=0, folder=str(tmp_path))
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir()
    (outside / "x.txt").write_text("x")
    (tmp_path / "link").symlink_to(outside)
    (tmp_path / "sessions" / "other").mkdir(parents=True)
    (tmp_path / "sessions" / "other" / "o.txt").write_text("another session's")
    for path in ("../x.txt", "link/x.txt", "sessions/other/o.txt", "", ".", "a\x00b"):
        assert scan_paths(tmp_path, {}, [path], quota) is None, path


def test_a_write_records_its_file_alone_and_a_hand_edit_is_recorded_at_the_next_turn(
    tmp_path: Path,
) -> None:
    log = FakeLog()
    sid = log.create(OFFLINE, cwd=str(tmp_path))
    (tmp_path / "a.txt").write_text("a")

    async def go() -> None:
        rt = Runtime(log)
        await turn(rt, sid, "list files")
        (tmp_path / "by-hand.txt").write_text("made by hand while the agent worked")
        await turn(rt, sid, "write notes.txt: hello")
        (tmp_path / "later.txt").write_text("by hand, after")
        await turn(rt, sid, "list files")

    run(go())
    recorded = [(d["reason"], sorted(d["files"])) for d in snapshots(log, sid)]
    assert ("tool", ["notes.txt"]) in recorded
    outside = [files for reason, files in recorded if reason == "outside"]
    assert ["by-hand.txt"] in outside and ["later.txt"] in outside
    leaf = log.sessions[sid].leaf
    assert leaf is not None
    assert set(files_at(log, sid, leaf)) == {"a.txt", "by-hand.txt", "notes.txt", "later.txt"}
