"""The asynchronous projector beside the append path.

1. **append with the projector running**: the append benchmark (`bench/append.py`) while
   `manage.py project` runs in a process of its own on the same database, indexing and
   rolling up every event the benchmark writes; compare its ratios with the append rows
   measured without it.
2. **lag behind 1,000 events/s**: one writer appends batches of 10 `user/message` events
   (300 B–4 KB of text) round-robin over 20 sessions, paced to 1,000 events a second, for
   DURATION_S; `projector_lag("search")` is read every half second. The figures are the
   writer's achieved rate and the median and maximum of the events not yet projected and of
   the age of the oldest of them.
3. **on a backlog**: with no projector running, BACKLOG `user/message` events are appended
   (100 per call, over 20 sessions); then each projector alone reads them all in this
   process, timed: its events/s when it never waits for a writer.

Run alone: `python -m bench projector` (the benchmark database, `strand_bench`).
"""

from __future__ import annotations

import os
import random
import statistics
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from typing import Any

from bench.common import ROOT, Report, Row, text_payload

RATE = 1000
BATCH = 10
SESSIONS = 20
DURATION_S = 30
BACKLOG = 20_000


def _projector() -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "manage.py", "project"],
        cwd=ROOT,
        env=dict(os.environ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


def _catch_up() -> None:
    from sessions_app.projectors import project_pending

    project_pending()


def run(report: Report) -> None:
    from bench import append

    _catch_up()  # what earlier suites wrote, so the projector starts level
    projector = _projector()
    try:
        inner = Report()
        append.run(inner)
        for row in inner.rows:
            row.group = "append + projector"
        report.rows.extend(inner.rows)
        _lag(report)
    finally:
        _stop(projector)
    _catch_up()
    _backlog(report)


def _lag(report: Report) -> None:
    from sessions_app import services, store
    from sessions_app.projectors import projector_lag

    owner = services.user_get_or_create_local(username="bench-projector")
    sessions = [
        services.session_create(owner=owner, title=f"bench lag {n}") for n in range(SESSIONS)
    ]
    seqs = {s.id: s.last_seq for s in sessions}
    rng = random.Random(12)
    texts = [text_payload(rng, 300, 4000) for _ in range(200)]
    done = threading.Event()
    written = [0]

    def write() -> None:
        from django.db import connection

        started = time.perf_counter()
        n = 0
        while not done.is_set():
            session = sessions[n % SESSIONS]
            events = [_user_message(texts[(n * BATCH + k) % 200]) for k in range(BATCH)]
            seqs[session.id] = store.append_events(session.id, seqs[session.id], events).last_seq
            n += 1
            written[0] += BATCH
            pause = started + written[0] / RATE - time.perf_counter()
            if pause > 0:
                time.sleep(pause)
        connection.close()

    writer = threading.Thread(target=write)
    behind: list[int] = []
    ages: list[float] = []
    started = time.perf_counter()
    writer.start()
    try:
        while time.perf_counter() - started < DURATION_S:
            time.sleep(0.5)
            lag = projector_lag("search")
            behind.append(lag.events)
            ages.append(
                (datetime.now(UTC) - lag.oldest).total_seconds() * 1000 if lag.oldest else 0.0
            )
    finally:
        done.set()
        writer.join()
    took = time.perf_counter() - started
    rate = written[0] / took
    report.add(
        Row(
            "projector",
            f"lag behind a writer paced to {RATE:,} events/s for {DURATION_S} s: events behind",
            f"median {statistics.median(behind):.0f}, max {max(behind)}",
            note=f"writer achieved {rate:,.0f} events/s; load {os.getloadavg()[0]:.1f}",
        ),
        Row(
            "projector",
            "the same: age of the oldest event not projected",
            f"median {statistics.median(ages):.0f} ms, max {max(ages):.0f} ms",
            note=f"{len(behind)} samples",
        ),
    )
    for row in report.rows[-2:]:
        print(f"  {row.name}: {row.value} ({row.note})", flush=True)


def _backlog(report: Report) -> None:
    from sessions_app import services, store
    from sessions_app.projectors import registered
    from sessions_app.projectors.runner import project_pending

    owner = services.user_get_or_create_local(username="bench-projector")
    sessions = [
        services.session_create(owner=owner, title=f"bench backlog {n}") for n in range(SESSIONS)
    ]
    rng = random.Random(13)
    texts = [text_payload(rng, 300, 4000) for _ in range(200)]
    per_call = 100
    for n in range(BACKLOG // per_call):
        session = sessions[n % SESSIONS]
        events = [_user_message(texts[(n * per_call + k) % 200]) for k in range(per_call)]
        session.last_seq = store.append_events(session.id, session.last_seq, events).last_seq
    for projector in registered():
        started = time.perf_counter()
        read = project_pending([projector])
        took = time.perf_counter() - started
        report.add(
            Row(
                "projector",
                f"{projector.name} projector on a backlog of {BACKLOG:,} events (20 sessions)",
                f"{read / took:,.0f} events/s",
                note=f"{read:,} events in {took:.1f} s; load {os.getloadavg()[0]:.1f}",
            )
        )
        row = report.rows[-1]
        print(f"  {row.name}: {row.value} ({row.note})", flush=True)


def _user_message(text: str) -> Any:
    from sessions_app.store import NewEvent

    entry = {"type": "message", "message": {"role": "user", "content": text}}
    return NewEvent("user/message", {"entry": entry})
