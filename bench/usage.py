"""The Usage page (`/usage`) and `GET /api/usage` over the rollups of 1,000,000 events in
1,000 sessions, through daphne.

The rollup rows (`UsageCount`) are loaded with COPY as the usage projector would have
written them for 1,000 events a session: each session on two days under one of four
models, with replies, the four kinds of tokens and their total, cost, requests, turns by
how they ended, tool calls of six tools and errors of three, faults of two kinds and
latency buckets (34 rows a session a day, 68,000 in all); the sessions hold no events
of their own, so the report reads the rollups and an empty tail. One owner holds every session.
Each of the page, the JSON and the CSV is fetched ROUNDS times, interleaved, signed in (the
page and the CSV) or with a personal token (the JSON).

Run alone: `python -m bench usage` (the benchmark database, `strand_bench`).
"""

from __future__ import annotations

import random
import statistics
import time
from datetime import date, timedelta
from typing import Any

from bench.common import Report, Row, psycopg_url

SESSIONS = 1_000
EVENTS_PER_SESSION = 1_000
ROUNDS = 20
TITLE = "bench usage"
MODELS = ("model-a", "model-b", "model-c", "model-d")
TOOLS = ("bash", "read", "edit", "write", "grep", "find")
BUCKETS = ("200", "500", "1000", "2000", "5000", "10000")


def _owner() -> Any:
    from sessions_app import services

    return services.user_get_or_create_local(username="bench-usage")


def _rows(rng: random.Random, session: Any, owner_id: int, day: date, model: str) -> list[Any]:
    half = EVENTS_PER_SESSION // 2  # the events of one day
    replies = half // 4
    figures: list[tuple[str, str, int]] = [
        ("replies", "", replies),
        ("input_tokens", "", replies * rng.randint(500, 5000)),
        ("output_tokens", "", replies * rng.randint(50, 800)),
        ("cache_read_tokens", "", replies * rng.randint(0, 20000)),
        ("cache_write_tokens", "", replies * rng.randint(0, 2000)),
        ("total_tokens", "", replies * rng.randint(600, 28000)),
        ("requests", "", replies),
        ("turns", "stop", replies // 5),
        ("turns", "aborted", rng.randint(0, 3)),
        ("aborted_replies", "", rng.randint(0, 3)),
        ("faults", "overloaded", rng.randint(0, 4)),
        ("faults", "timeout", rng.randint(0, 2)),
    ]
    figures += [("tool_calls", tool, half // 12) for tool in TOOLS]
    figures += [("tool_errors", tool, rng.randint(0, 9)) for tool in TOOLS[:3]]
    figures += [("ttft_ms", b, replies // len(BUCKETS)) for b in BUCKETS]
    figures += [("duration_ms", b, replies // len(BUCKETS)) for b in BUCKETS]
    rows: list[Any] = [
        (owner_id, day, session.id, "bench", model, metric, label, value)
        for metric, label, value in figures
    ]
    rows.append((owner_id, day, session.id, "bench", model, "cost", "", rng.randint(1, 900) / 100))
    return rows


def build(owner: Any) -> None:
    import psycopg

    from sessions_app.models import Session, UsageCount

    if UsageCount.objects.filter(owner_id=owner.pk).count() >= SESSIONS * 2 * 30:
        return
    UsageCount.objects.filter(owner_id=owner.pk).delete()
    Session.objects.filter(owner=owner, title__startswith=TITLE).delete()
    sessions = Session.objects.bulk_create(
        [Session(owner=owner, title=f"{TITLE} {n}") for n in range(SESSIONS)]
    )
    rng = random.Random(25)
    today = date.today()
    with (
        psycopg.connect(psycopg_url()) as conn,
        conn.cursor() as cur,
        cur.copy(
            "COPY sessions_app_usagecount (owner_id, day, session_id, provider, model, metric, "
            "label, value) FROM STDIN"
        ) as copy,
    ):
        for n, session in enumerate(sessions):
            first = today - timedelta(days=n % 60)
            for day in (first, first + timedelta(days=1)):
                for row in _rows(rng, session, owner.pk, day, MODELS[n % len(MODELS)]):
                    copy.write_row(row)
    with psycopg.connect(psycopg_url(), autocommit=True) as conn:
        conn.execute("ANALYZE sessions_app_usagecount")


def run(report: Report) -> None:
    import requests
    from django.conf import settings
    from django.test import Client

    from deploy import daphne
    from deploy.daphne import free_port
    from sessions_app.models import UsageCount
    from sessions_app.services import tokens

    owner = _owner()
    started = time.perf_counter()
    build(owner)
    rows = UsageCount.objects.filter(owner_id=owner.pk).count()
    print(f"  data ready in {time.perf_counter() - started:.0f} s ({rows:,} rows)", flush=True)
    signed_in = Client()
    signed_in.force_login(owner)
    browser = requests.Session()
    browser.cookies.set(
        settings.SESSION_COOKIE_NAME, signed_in.cookies[settings.SESSION_COOKIE_NAME].value
    )
    program = requests.Session()
    program.headers["Authorization"] = f"Bearer {tokens.token_create(owner, 'bench')[1]}"
    port = free_port()
    server = daphne.start(port, {"STRAND_RECOVER_AT_START": "0"})
    base = f"http://127.0.0.1:{port}"
    asks = {
        "page": (browser, f"{base}/usage"),
        "api": (program, f"{base}/api/usage"),
        "csv": (browser, f"{base}/usage.csv"),
    }
    timings: dict[str, list[float]] = {kind: [] for kind in asks}
    try:
        for http, url in asks.values():  # warm the process and the cache
            http.get(url, timeout=60)
        for _ in range(ROUNDS):
            for kind, (http, url) in asks.items():
                t0 = time.perf_counter()
                response = http.get(url, timeout=60)
                timings[kind].append((time.perf_counter() - t0) * 1000)
                if response.status_code != 200:
                    raise RuntimeError(f"{url}: HTTP {response.status_code} {response.text[:200]}")
    finally:
        daphne.stop(server)
    events = SESSIONS * EVENTS_PER_SESSION
    for kind, label in (("page", "the Usage page"), ("api", "GET /api/usage"), ("csv", "CSV")):
        values = sorted(timings[kind])
        median = statistics.median(values)
        report.add(
            Row(
                "usage",
                f"{label}, rollups of {events:,} events in {SESSIONS:,} sessions: median",
                f"{median:.0f} ms",
                "< 300 ms" if kind == "page" else "",
                ("met" if median < 300 else "NOT met") if kind == "page" else "",
                f"max {values[-1]:.0f} ms; {rows:,} rollup rows; {ROUNDS} fetches",
            )
        )
    for row in report.rows[-3:]:
        print(f"  {row.name}: {row.value} ({row.note})", flush=True)
