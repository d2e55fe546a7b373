"""CPU per append: what `append_events` and the raw transaction cost the client and the
Postgres backend, per event, beside their wall time.

The append benchmark's rates are bound by the commit's flush to disk when the disk is busy
(other work on the machine), which hides what the code costs. Here each side's CPU is
measured directly: the client's thread time, and the backend's time on a CPU from
`/proc/<pid>/schedstat` (Postgres on this machine). Commits are asynchronous
(`synchronous_commit = off`, on both connections), so the wall time is round trips and CPU.

The raw transaction is the one of `bench/append.py`: lock the session row, insert the event
and the entry, update the session's `last_seq` and leaf, commit, statement by statement.
"""

from __future__ import annotations

import json
import random
import statistics
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from bench.common import Report, Row, psycopg_url, text_payload

PER = 100  # calls per measured block
BLOCKS = 20  # blocks per side, interleaved; the first two are warm-up


def _backend_ns(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def run(report: Report) -> None:
    import psycopg
    from django.db import connection

    from sessions_app import services, store
    from sessions_app.store import NewEvent

    owner = services.user_get_or_create_local(username="bench")
    rng = random.Random(3)

    def message() -> dict:
        return {"type": "message", "message": {"role": "user", "content": text_payload(rng)}}

    connection.ensure_connection()
    with connection.cursor() as cur:
        cur.execute("SET synchronous_commit = off")
        cur.execute("SELECT pg_backend_pid()")
        strand_pid = cur.fetchone()[0]
    raw = psycopg.connect(psycopg_url(), autocommit=True)
    raw.execute("SET synchronous_commit = off")
    row = raw.execute("SELECT pg_backend_pid()").fetchone()
    assert row is not None
    raw_pid = row[0]

    strand_session = services.session_create(owner=owner, title="bench cpu")
    strand_seq = strand_session.last_seq

    def strand_block() -> Callable[[], None]:
        events = [NewEvent("user/message", {"entry": message()}) for _ in range(PER)]

        def go() -> None:
            nonlocal strand_seq
            for event in events:
                strand_seq = store.append_events(strand_session.id, strand_seq, [event]).last_seq

        return go

    raw_session = services.session_create(owner=owner, title="bench cpu raw")
    raw_seq = 0
    raw_parent: str | None = None
    lock = "SELECT last_seq, leaf_entry_id FROM sessions_app_session WHERE id = %s FOR UPDATE"
    insert_event = (
        "INSERT INTO sessions_app_event (session_id, seq, type, schema_version, time, data, "
        "entry_id, turn, step, ignorable) VALUES (%(s)s, %(seq)s, 'user/message', 1, %(t)s, "
        "%(d)s::jsonb, %(id)s, NULL, NULL, false)"
    )
    insert_entry = (
        "INSERT INTO sessions_app_entry (session_id, entry_id, parent_id, type, data, timestamp, "
        "seq, depth) VALUES (%(s)s, %(id)s, %(parent)s, 'message', %(e)s::jsonb, "
        "'2026-01-01T00:00:00.000Z', %(seq)s, %(seq)s)"
    )
    advance = (
        "UPDATE sessions_app_session SET last_seq = %(seq)s, leaf_entry_id = %(id)s, "
        "updated_at = %(t)s WHERE id = %(s)s"
    )

    def raw_block() -> Callable[[], None]:
        nonlocal raw_seq, raw_parent
        rows = []
        for _ in range(PER):
            raw_seq += 1
            entry_id = uuid.uuid4().hex[:8]
            entry = {
                "type": "message",
                "id": entry_id,
                "parentId": raw_parent,
                "timestamp": "2026-01-01T00:00:00.000Z",
                **message(),
            }
            text = json.dumps(entry, ensure_ascii=False)
            rows.append(
                {
                    "s": str(raw_session.id),
                    "seq": raw_seq,
                    "t": datetime.now(UTC),
                    "d": '{"entry":' + text + "}",
                    "e": text,
                    "id": entry_id,
                    "parent": raw_parent,
                }
            )
            raw_parent = entry_id

        def go() -> None:
            with raw.cursor() as cur:
                for pair in rows:
                    with raw.transaction():
                        cur.execute(lock, [pair["s"]])
                        cur.execute(insert_event, pair)
                        cur.execute(insert_entry, pair)
                        cur.execute(advance, pair)

        return go

    sides = {"raw": (raw_block, raw_pid), "strand": (strand_block, strand_pid)}
    taken: dict[str, dict[str, list[float]]] = {
        side: {"wall": [], "client": [], "server": []} for side in sides
    }
    for block in range(BLOCKS):
        for side, (make, pid) in sides.items():
            go = make()
            wall, client, server = time.perf_counter(), time.thread_time(), _backend_ns(pid)
            go()
            wall, client = time.perf_counter() - wall, time.thread_time() - client
            after = _backend_ns(pid)
            if block < 2:
                continue
            taken[side]["wall"].append(wall / PER * 1e6)
            taken[side]["client"].append(client / PER * 1e6)
            if server is not None and after is not None:
                taken[side]["server"].append((after - server) / PER / 1e3)
    raw.close()
    with connection.cursor() as cur:
        cur.execute("SET synchronous_commit = on")

    def median(side: str, what: str) -> float | None:
        values = taken[side][what]
        return statistics.median(values) if values else None

    for side, label in (("raw", "raw transaction"), ("strand", "append_events, 1 event")):
        per_call, cpu_client, backend = (median(side, w) for w in ("wall", "client", "server"))
        assert per_call is not None and cpu_client is not None
        cpu = f"client {cpu_client:,.0f} µs" + (f", backend {backend:,.0f} µs" if backend else "")
        report.add(Row("append cpu", f"{label}: wall per call", f"{per_call:,.0f} µs", note=cpu))
    raw_wall, strand_wall = median("raw", "wall"), median("strand", "wall")
    assert raw_wall and strand_wall
    ratio = raw_wall / strand_wall
    report.add(
        Row(
            "append cpu",
            "rate of append_events to the raw transaction, commits not waited for",
            f"{ratio:.0%}",
            "≥ 80%",
            "met" if ratio >= 0.8 else "NOT met",
            note=f"medians of {BLOCKS - 2} interleaved blocks of {PER} calls",
        )
    )
