"""Events appended per second: `append_events` against a raw psycopg INSERT of the same rows.

Both write `user/message` events of 300 B–4 KB of text into the same table of the same
database. The raw path is the floor of what any Postgres writer pays: one INSERT per event in
autocommit (one round trip, one commit), or 100 rows per transaction with executemany.
Strand's path adds the row lock, the expected-seq check, validation, the entry projection,
the leaf and counters, and the notification.
"""

from __future__ import annotations

import json
import random
import time
import uuid
from datetime import UTC, datetime

from bench.common import Report, Row, median_of, psycopg_url, text_payload

SINGLE_N = 1500
BATCH_N = 50  # batches of 100
RUNS = 5


def _messages(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    return [
        {"entry": {"type": "message", "message": {"role": "user", "content": text_payload(rng)}}}
        for _ in range(n)
    ]


def run(report: Report) -> None:
    import psycopg

    from sessions_app import services, store
    from sessions_app.store import NewEvent

    owner = services.user_get_or_create_local(username="bench")
    raw = psycopg.connect(psycopg_url(), autocommit=True)

    def strand_single() -> float:
        session = services.session_create(owner=owner, title="bench single")
        events = [NewEvent("user/message", d) for d in _messages(SINGLE_N, 1)]
        seq = session.last_seq
        start = time.perf_counter()
        for event in events:
            seq = store.append_events(session.id, seq, [event]).last_seq
        return SINGLE_N / (time.perf_counter() - start)

    def strand_batch() -> float:
        session = services.session_create(owner=owner, title="bench batch")
        events = [NewEvent("user/message", d) for d in _messages(BATCH_N * 100, 2)]
        seq = session.last_seq
        start = time.perf_counter()
        for i in range(0, len(events), 100):
            seq = store.append_events(session.id, seq, events[i : i + 100]).last_seq
        return len(events) / (time.perf_counter() - start)

    insert = (
        "INSERT INTO sessions_app_event (session_id, seq, type, schema_version, time, data, "
        "entry_id, turn, step, ignorable) VALUES (%s, %s, %s, 1, %s, %s::jsonb, %s, NULL, NULL, false)"
    )

    def raw_rows(n: int, seed: int) -> tuple[str, list[tuple]]:
        session = services.session_create(owner=owner, title="bench raw")
        sid = str(session.id)
        rows = []
        for i, d in enumerate(_messages(n, seed)):
            entry = {
                "type": "message",
                "id": uuid.uuid4().hex[:8],
                "parentId": None,
                "timestamp": "2026-01-01T00:00:00.000Z",
                **d["entry"],
            }
            rows.append(
                (
                    sid,
                    i + 1,
                    "user/message",
                    datetime.now(UTC),
                    json.dumps({"entry": entry}, ensure_ascii=False),
                    entry["id"],
                )
            )
        return sid, rows

    def raw_single() -> float:
        _, rows = raw_rows(SINGLE_N, 1)
        start = time.perf_counter()
        with raw.cursor() as cur:
            for row in rows:
                cur.execute(insert, row)
        return SINGLE_N / (time.perf_counter() - start)

    def raw_batch() -> float:
        _, rows = raw_rows(BATCH_N * 100, 2)
        start = time.perf_counter()
        with raw.cursor() as cur:
            for i in range(0, len(rows), 100):
                with raw.transaction():
                    cur.executemany(insert, rows[i : i + 100])
        return len(rows) / (time.perf_counter() - start)

    # Interleave the runs so that machine noise hits both sides alike.
    results: dict[str, list[float]] = {"ss": [], "rs": [], "sb": [], "rb": []}
    for fn in (strand_single, raw_single, strand_batch, raw_batch):
        fn()  # warm-up
    for _ in range(RUNS):
        results["rs"].append(raw_single())
        results["ss"].append(strand_single())
        results["rb"].append(raw_batch())
        results["sb"].append(strand_batch())
    raw.close()
    import statistics

    med = {k: statistics.median(v) for k, v in results.items()}
    single_ratio = med["ss"] / med["rs"]
    batch_ratio = med["sb"] / med["rb"]
    report.add(
        Row("append", "raw psycopg INSERT, 1 event per transaction", f"{med['rs']:,.0f} events/s"),
        Row("append", "append_events, 1 event per call", f"{med['ss']:,.0f} events/s"),
        Row(
            "append",
            "ratio, 1 per call",
            f"{single_ratio:.0%}",
            "≥ 50%",
            "met" if single_ratio >= 0.5 else "NOT met",
        ),
        Row(
            "append",
            "raw psycopg executemany, 100 events per transaction",
            f"{med['rb']:,.0f} events/s",
        ),
        Row("append", "append_events, 100 events per call", f"{med['sb']:,.0f} events/s"),
        Row(
            "append",
            "ratio, 100 per call",
            f"{batch_ratio:.0%}",
            "≥ 70%",
            "met" if batch_ratio >= 0.7 else "NOT met",
        ),
    )
    _ = median_of  # kept for other benchmarks
