"""Events appended per second: `append_events` against raw psycopg writing the same rows.

Both write `user/message` events of 300 B–4 KB of text into the same table of the same
database. The raw paths are floors of what any Postgres writer pays:

- the same event and entry rows, one autocommit statement per event (one round trip, one
  commit), or 100 of each per transaction with executemany;
- the raw transaction: what a client that keeps a session's log by hand sends, statement by
  statement: lock the session row (`SELECT … FOR UPDATE`), insert the event and the entry,
  update the session's `last_seq` and leaf, commit.

Strand's path adds validation, the expected-seq check, the tree's checks (parent, cycle,
depth and path facts), the counters and the owner's storage, and the notification.
"""

from __future__ import annotations

import json
import os
import random
import time
import uuid
from datetime import UTC, datetime

from bench.common import Report, Row, median_of, psycopg_url, text_payload

SINGLE_N = 1500
BATCH_N = 50  # batches of 100
RUNS = 5


def _entry_ids(n: int) -> list[str]:
    """`n` distinct random 8-hex ids, as Strand draws them (`secrets.token_hex(4)`). Drawn
    independently, two of a set of 5,000 share an id once in about 340 sets; the suite draws
    six such sets, and the raw insert (which has no retry, unlike `append_events`) then
    stops on the unique (session, entry_id) key: about one suite in 55."""
    ids: dict[str, None] = {}
    while len(ids) < n:
        ids[uuid.uuid4().hex[:8]] = None
    return list(ids)


def _load() -> str:
    """The 1-minute load average. The single-event ratio races two paths of unequal CPU
    (2.5 to 3.5 times as much for `append_events`), so other work on the 2 cores moves it
    more than any change of code does: a figure is read with the state it was taken in."""
    try:
        return f"load average {os.getloadavg()[0]:.1f} at the end"
    except OSError:
        return "load average unknown"


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

    insert_both = (
        "WITH ev AS (INSERT INTO sessions_app_event (session_id, seq, type, schema_version, time, "
        "data, entry_id, turn, step, ignorable) VALUES (%(s)s, %(seq)s, 'user/message', 1, %(t)s, "
        "%(d)s::jsonb, %(id)s, NULL, NULL, false)) "
        "INSERT INTO sessions_app_entry (session_id, entry_id, parent_id, type, data, timestamp, "
        "seq, depth) VALUES (%(s)s, %(id)s, %(parent)s, 'message', %(e)s::jsonb, "
        "'2026-01-01T00:00:00.000Z', %(seq)s, %(seq)s)"
    )
    insert_entry = (
        "INSERT INTO sessions_app_entry (session_id, entry_id, parent_id, type, data, timestamp, "
        "seq, depth) VALUES (%(s)s, %(id)s, %(parent)s, 'message', %(e)s::jsonb, "
        "'2026-01-01T00:00:00.000Z', %(seq)s, %(seq)s)"
    )
    insert_event = (
        "INSERT INTO sessions_app_event (session_id, seq, type, schema_version, time, data, "
        "entry_id, turn, step, ignorable) VALUES (%(s)s, %(seq)s, 'user/message', 1, %(t)s, "
        "%(d)s::jsonb, %(id)s, NULL, NULL, false)"
    )

    def raw_pairs(n: int, seed: int) -> list[dict]:
        """The same event and entry rows that append_events writes for these messages."""
        session = services.session_create(owner=owner, title="bench raw pairs")
        pairs = []
        parent = None
        for i, (d, entry_id) in enumerate(zip(_messages(n, seed), _entry_ids(n), strict=True)):
            entry = {
                "type": "message",
                "id": entry_id,
                "parentId": parent,
                "timestamp": "2026-01-01T00:00:00.000Z",
                **d["entry"],
            }
            text = json.dumps(entry, ensure_ascii=False)
            pairs.append(
                {
                    "s": str(session.id),
                    "seq": i + 1,
                    "t": datetime.now(UTC),
                    "d": '{"entry":' + text + "}",
                    "e": text,
                    "id": entry_id,
                    "parent": parent,
                }
            )
            parent = entry_id
        return pairs

    def raw_pairs_single() -> float:
        pairs = raw_pairs(SINGLE_N, 1)
        start = time.perf_counter()
        with raw.cursor() as cur:
            for pair in pairs:
                cur.execute(insert_both, pair)
        return SINGLE_N / (time.perf_counter() - start)

    lock = "SELECT last_seq, leaf_entry_id FROM sessions_app_session WHERE id = %s FOR UPDATE"
    advance = (
        "UPDATE sessions_app_session SET last_seq = %(seq)s, leaf_entry_id = %(id)s, "
        "updated_at = %(t)s WHERE id = %(s)s"
    )

    def raw_transaction_single() -> float:
        pairs = raw_pairs(SINGLE_N, 1)
        start = time.perf_counter()
        with raw.cursor() as cur:
            for pair in pairs:
                with raw.transaction():
                    cur.execute(lock, [pair["s"]])
                    cur.execute(insert_event, pair)
                    cur.execute(insert_entry, pair)
                    cur.execute(advance, pair)
        return SINGLE_N / (time.perf_counter() - start)

    def raw_transaction_batch() -> float:
        pairs = raw_pairs(BATCH_N * 100, 2)
        start = time.perf_counter()
        with raw.cursor() as cur:
            for i in range(0, len(pairs), 100):
                chunk = pairs[i : i + 100]
                with raw.transaction():
                    cur.execute(lock, [chunk[0]["s"]])
                    cur.executemany(insert_event, chunk)
                    cur.executemany(insert_entry, chunk)
                    cur.execute(advance, chunk[-1])
        return len(pairs) / (time.perf_counter() - start)

    def raw_pairs_batch() -> float:
        pairs = raw_pairs(BATCH_N * 100, 2)
        start = time.perf_counter()
        with raw.cursor() as cur:
            for i in range(0, len(pairs), 100):
                with raw.transaction():
                    cur.executemany(insert_event, pairs[i : i + 100])
                    cur.executemany(insert_entry, pairs[i : i + 100])
        return len(pairs) / (time.perf_counter() - start)

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
    runs = {
        "rs": raw_single,
        "ps": raw_pairs_single,
        "ts": raw_transaction_single,
        "ss": strand_single,
        "rb": raw_batch,
        "pb": raw_pairs_batch,
        "tb": raw_transaction_batch,
        "sb": strand_batch,
    }
    results: dict[str, list[float]] = {key: [] for key in runs}
    for fn in runs.values():
        fn()  # warm-up
    for _ in range(RUNS):
        for key, fn in runs.items():
            results[key].append(fn())
    raw.close()
    import statistics

    med = {k: statistics.median(v) for k, v in results.items()}
    single_ratio = med["ss"] / med["ts"]
    batch_ratio = med["sb"] / med["pb"]
    load = _load()
    report.add(
        Row(
            "append", "raw psycopg, event row only, 1 per transaction", f"{med['rs']:,.0f} events/s"
        ),
        Row(
            "append",
            "raw psycopg, event + entry rows, 1 per transaction",
            f"{med['ps']:,.0f} events/s",
        ),
        Row(
            "append",
            "raw transaction (lock, event, entry, session row), 1 per transaction",
            f"{med['ts']:,.0f} events/s",
        ),
        Row("append", "append_events, 1 event per call", f"{med['ss']:,.0f} events/s"),
        Row(
            "append",
            "ratio to the raw transaction, 1 per call",
            f"{single_ratio:.0%}",
            "≥ 80%",
            "met" if single_ratio >= 0.8 else "NOT met",
            note=(
                f"{med['ss'] / med['ps']:.0%} of the two rows in one statement, "
                f"{med['ss'] / med['rs']:.0%} of the event-row-only insert; {load}"
            ),
        ),
        Row(
            "append",
            "raw psycopg, event row only, 100 per transaction",
            f"{med['rb']:,.0f} events/s",
        ),
        Row(
            "append",
            "raw psycopg, event + entry rows, 100 per transaction",
            f"{med['pb']:,.0f} events/s",
        ),
        Row(
            "append",
            "raw transaction (lock, events, entries, session row), 100 per transaction",
            f"{med['tb']:,.0f} events/s",
        ),
        Row("append", "append_events, 100 events per call", f"{med['sb']:,.0f} events/s"),
        Row(
            "append",
            "ratio to raw (same rows), 100 per call",
            f"{batch_ratio:.0%}",
            "≥ 90%",
            "met" if batch_ratio >= 0.9 else "NOT met",
            note=(
                f"{med['sb'] / med['tb']:.0%} of the raw transaction, "
                f"{med['sb'] / med['rb']:.0%} of the event-row-only insert; {load}"
            ),
        ),
    )
    _ = median_of  # kept for other benchmarks
