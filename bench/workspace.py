"""The workspace as facts (DESIGN §11) on a folder of FILES files and about 200 MB.

- **through the server** (one daphne process, the offline model, no delays): Alice's
  session gets its folder filled by hand (FILES files of FILE_BYTES random bytes in FOLDERS
  folders); her first turn records them all (`outside`). SWITCHED files then change by hand
  and the next turn records them (`outside`) at the entry the folder showed, E. A branch
  switch is a turn that starts from E's parent (whose workspace has the old versions) and
  then one from the leaf again (the new ones): each restores SWITCHED files before the
  model is asked. Timed from the POST of the message to its `turn/end`, against the same
  turn from where the folder already is (no restore): the median of 2 × ROUNDS switches
  and of ROUNDS such turns. The file list API (`GET …/files?entry=`: the fold at the leaf
  and a page of 200), the median of 5, and the tar download of the whole workspace (read
  to its end), the median of 3.
- **in this process**, on that folder: a scan that finds nothing changed; a snapshot after
  a one-file write (what the recorder does after `write` or `edit`: the file they name
  looked at, its new content into the blob store and the snapshot's append; a `bash`
  command's snapshot scans the whole folder, as the row before measures); the bytes a one-line edit stores per snapshot (the growth of the event and blob
  tables over EDITS edits of one file, checkpoints included); and the fold at a leaf after
  10,000 snapshots (`selectors.workspace.workspace_at`: its checkpoint and tail read from
  Postgres, then folded), on a path of 10,000 entries with a checkpoint every 32.

Run alone: `python -m bench workspace` (the benchmark database, `strand_bench`).
"""

from __future__ import annotations

import hashlib
import random
import secrets
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import Report, Row, median_of
from deploy import daphne

FILES, FOLDERS, FILE_BYTES = 5_000, 50, 40_000
SWITCHED = 500
ROUNDS = 3
EDITS = 64
SNAPSHOTS = 10_000
GROUP = "workspace"


def run(report: Report) -> None:
    with tempfile.TemporaryDirectory(prefix="strand-bench-ws-") as scratch:
        roots = Path(scratch) / "workspaces"
        roots.mkdir()
        folder = _served(report, roots)
        _in_process(report, folder)
    _fold(report)


def _fill(folder: Path) -> None:
    rng = random.Random(21)
    for index in range(FILES):
        sub = folder / f"d{index % FOLDERS:02}"
        sub.mkdir(exist_ok=True)
        (sub / f"f{index:04}.txt").write_bytes(rng.randbytes(FILE_BYTES))


def _edit(folder: Path, count: int, tag: str) -> None:
    for index in range(count):
        path = folder / f"d{index % FOLDERS:02}" / f"f{index:04}.txt"
        with path.open("ab") as handle:
            handle.write(f"\nedited {tag}\n".encode())


def _served(report: Report, roots: Path) -> Path:
    import requests

    from sessions_app import services
    from sessions_app.models import Session
    from sessions_app.services import tokens

    owner = services.user_get_or_create_local(username="bench-workspace")
    http = requests.Session()
    http.headers["Authorization"] = f"Bearer {tokens.token_create(owner, 'bench')[1]}"
    port = daphne.free_port()
    server = daphne.start(
        port,
        {
            "STRAND_WORKSPACE_ROOTS": str(roots),
            "STRAND_OFFLINE_CHUNK_DELAY_MS": "0",
            "STRAND_TOOL_DELAY_MS": "0",
            "STRAND_RECOVER_AT_START": "0",
        },
    )
    base = f"http://127.0.0.1:{port}/api/sessions"
    try:
        created = http.post(base, json={"title": "workspace bench"}, timeout=60)
        created.raise_for_status()
        session = Session.objects.get(id=created.json()["id"])
        folder = Path(session.cwd)
        _fill(folder)
        first = _turn(http, base, session)
        _add(
            report,
            Row(
                GROUP,
                f"first turn over {FILES:,} files made by hand ({FILES * FILE_BYTES // 10**6} MB)",
                f"{first:.0f} ms",
                note="hashes and stores every file (`outside`)",
            ),
        )
        _edit(folder, SWITCHED, "on the branch")
        before = _last(session)
        _turn(http, base, session)
        [edited] = [e for e in _events_after(session, before) if e.type == "workspace/snapshot"]
        back = _parent(session, edited.data["at"])  # before the hand changes were recorded
        ahead = Session.objects.get(id=session.id).leaf_entry_id
        stay, switch = [], []
        for _ in range(ROUNDS):
            stay.append(_turn(http, base, session))
            for target in (back, ahead):
                _move(http, base, session, target)
                switch.append(_turn(http, base, session, expect_restore=SWITCHED))
        still, moved = statistics.median(stay), statistics.median(switch)
        _add(
            report,
            Row(
                GROUP,
                f"branch switch: a turn from another entry, {SWITCHED} files restored",
                f"{moved:.0f} ms",
                "< 2000 ms",
                "ok" if moved < 2000 else "over",
                f"the same turn with no restore: {still:.0f} ms (POST to turn/end, through daphne)",
            ),
        )
        leaf = Session.objects.get(id=session.id).leaf_entry_id
        listed = _fetch(http, f"{base}/{session.id}/files?entry={leaf}&limit=200")
        _add(
            report,
            Row(
                GROUP,
                f"file list API at the leaf ({FILES:,} files, a page of 200)",
                f"{listed:.0f} ms",
            ),
        )
        tar = _fetch(http, f"{base}/{session.id}/workspace.tar?entry={leaf}", runs=3)
        _add(
            report,
            Row(
                GROUP,
                f"tar download of the workspace ({FILES * FILE_BYTES // 10**6} MB)",
                f"{tar:.0f} ms",
            ),
        )
    finally:
        daphne.stop(server)
    return folder


def _turn(http: Any, base: str, session: Any, expect_restore: int = 0) -> float:
    after = _last(session)
    started = time.perf_counter()
    sent = http.post(f"{base}/{session.id}/messages", json={"text": "list files"}, timeout=60)
    sent.raise_for_status()
    events = _wait_turn_end(session, after)
    took = (time.perf_counter() - started) * 1000
    if expect_restore:
        reasons = [e.data["reason"] for e in events if e.type == "workspace/snapshot"]
        if "restore" not in reasons:
            raise RuntimeError(f"the turn restored nothing: {reasons}")
    return took


def _move(http: Any, base: str, session: Any, entry_id: str | None) -> None:
    http.put(
        f"{base}/{session.id}/leaf", json={"entry_id": entry_id}, timeout=60
    ).raise_for_status()


def _fetch(http: Any, url: str, runs: int = 5) -> float:
    def once() -> float:
        started = time.perf_counter()
        with http.get(url, timeout=300, stream=True) as response:
            response.raise_for_status()
            for _ in response.iter_content(1 << 20):
                pass
        return (time.perf_counter() - started) * 1000

    return median_of(runs, once)[0]


def _last(session: Any) -> int:
    from sessions_app.models import Session

    return int(Session.objects.get(id=session.id).last_seq)


def _events_after(session: Any, after: int) -> list[Any]:
    from sessions_app import store

    return store.events_after(session.id, after, 10_000)


def _parent(session: Any, entry_id: str | None) -> str | None:
    from sessions_app import store

    found = store.entries_by_id(session.id, [entry_id]) if entry_id else []
    return found[0].parent_id if found else None


def _wait_turn_end(session: Any, after: int, timeout: float = 600) -> list[Any]:
    deadline = time.monotonic() + timeout
    while True:
        events = _events_after(session, after)
        if any(e.type == "turn/end" for e in events):
            return events
        if time.monotonic() > deadline:
            raise RuntimeError("the turn did not end")
        time.sleep(0.02)


def _in_process(report: Report, folder: Path) -> None:
    from django.db import connection

    from projections.workspace import SNAPSHOT, Manifest, Snapshot
    from runtime.tools import WorkspaceQuota
    from runtime.workspace import scan, scan_paths, snapshot_fact
    from sessions_app import services, store
    from sessions_app.store import NewEvent
    from sessions_app.store.blobs import blobs_put

    owner = services.user_get_or_create_local(username="bench-workspace")
    quota = WorkspaceQuota(max_bytes=0, max_entries=0)
    known = scan(folder, {}, quota).manifest
    quiet, _ = median_of(5, lambda: _timed(lambda: scan(folder, known, quota)))
    _add(
        report,
        Row(
            GROUP,
            f"scan that finds nothing changed ({FILES:,} files)",
            f"{quiet:.1f} ms",
            "< 100 ms",
            "ok" if quiet < 100 else "over",
        ),
    )
    session = services.session_create(owner=owner, title="workspace bench edits", cwd="")
    edits = {"entry": {"type": "message", "message": {"role": "user", "content": "edits"}}}
    store.append_events(session.id, 0, [NewEvent("user/message", edits)])
    session.refresh_from_db()
    path = [str(session.leaf_entry_id)]
    recorded: list[Snapshot] = []
    state: dict[str, Manifest] = {"manifest": known}
    target = folder / "d00" / "f0000.txt"
    run = secrets.token_hex(4)  # contents new to the store on every run (no dedup)

    def one_edit(line: int) -> float:
        with target.open("ab") as handle:
            handle.write(f"line {line} of run {run}\n".encode())
        started = time.perf_counter()
        # What the recorder does after `write` or `edit`: the file they name is looked at.
        found = scan_paths(folder, state["manifest"], ["d00/f0000.txt"], quota)
        assert found is not None
        blobs_put(owner_id=owner.pk, blobs=found.blobs)
        fact, snap = snapshot_fact(
            "tool",
            session.leaf_entry_id,
            found.files,
            found.deleted,
            path=path,
            snapshots=recorded,
            manifest=found.manifest,
        )
        session.refresh_from_db(fields=["last_seq"])
        store.append_events(session.id, session.last_seq, [NewEvent(SNAPSHOT, dict(fact.data))])
        state["manifest"] = found.manifest
        recorded.append(snap)
        return (time.perf_counter() - started) * 1000

    sizes = _table_bytes(connection)
    times = [one_edit(line) for line in range(EDITS)]
    grown = _table_bytes(connection) - sizes
    write = statistics.median(times)
    _add(
        report,
        Row(
            GROUP,
            "snapshot after a one-file write (its file looked at, blob, append)",
            f"{write:.1f} ms",
            "< 20 ms",
            "ok" if write < 20 else "over",
            f"median of {EDITS}; a checkpoint (the whole manifest) every 32 is in it",
        ),
    )
    events = [e for e in store.events_after(session.id, 0, 10_000) if e.type == SNAPSHOT]
    plain = statistics.median(len(_json(e.data)) for e in events if not e.data.get("full"))
    full = statistics.median(len(_json(e.data)) for e in events if e.data.get("full"))
    _add(
        report,
        Row(
            GROUP,
            f"bytes stored per snapshot of a one-line edit (a {FILE_BYTES // 1000} KB file)",
            f"{grown / EDITS / 1000:.1f} KB",
            note=(
                f"table growth over {EDITS} edits / {EDITS}: the new content whole, the event "
                f"({plain:.0f} B of JSON; a checkpoint's {full / 1000:.0f} KB every 32)"
            ),
        ),
    )


def _fold(report: Report) -> None:
    from sessions_app import services, store
    from sessions_app.selectors.workspace import workspace_at
    from sessions_app.store import NewEvent

    owner = services.user_get_or_create_local(username="bench-workspace")
    session = services.session_create(owner=owner, title="workspace bench fold", cwd="")
    events: list[NewEvent] = []
    manifest: dict[str, Any] = {}
    parent = None
    for index in range(SNAPSHOTS):
        entry_id = f"w{index:05d}"
        events.append(
            NewEvent(
                "entry/message",
                {
                    "entry": {
                        "type": "message",
                        "id": entry_id,
                        "parentId": parent,
                        **_message(entry_id)["entry"],
                    }
                },
            )
        )
        content = f"version {index}".encode()
        change = {
            f"d{index % FOLDERS:02}/f{index % 300:04}.txt": {
                "sha256": hashlib.sha256(content).hexdigest(),
                "size": len(content),
                "mode": 0o644,
            }
        }
        manifest.update(change)
        data: dict[str, Any] = {"at": entry_id, "reason": "tool", "files": change, "deleted": []}
        if index % 32 == 31:
            data.update(full=True, manifest=dict(manifest))
        events.append(NewEvent("workspace/snapshot", data))
        parent = entry_id
    for start in range(0, len(events), 1000):
        session.refresh_from_db(fields=["last_seq"])
        store.append_events(session.id, session.last_seq, events[start : start + 1000])
    folded, _ = median_of(10, lambda: _timed(lambda: workspace_at(session.id, parent)))
    _add(
        report,
        Row(
            GROUP,
            f"fold at a leaf after {SNAPSHOTS:,} snapshots (path of {SNAPSHOTS:,} entries)",
            f"{folded:.1f} ms",
            "< 50 ms",
            "ok" if folded < 50 else "over",
            "workspace_at: the path, the checkpoint and its tail from Postgres, then the fold",
        ),
    )


def _message(text: str) -> dict[str, Any]:
    return {"entry": {"type": "message", "message": {"role": "custom", "content": text}}}


def _add(report: Report, row: Row) -> None:
    report.add(row)
    if row.note:
        print(f"    {row.note}", flush=True)


def _timed(work: Any) -> float:
    started = time.perf_counter()
    work()
    return (time.perf_counter() - started) * 1000


def _json(data: Any) -> bytes:
    import json

    return json.dumps(data, separators=(",", ":")).encode()


def _table_bytes(connection: Any) -> int:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT pg_total_relation_size('sessions_app_event') "
            "+ pg_total_relation_size('sessions_app_workspaceblob')"
        )
        return int(cur.fetchone()[0])
