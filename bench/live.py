"""Live updates over websockets against one daphne process.

- **latency**: 200 viewers watch one session; one writer appends events at a steady rate
  (5 a second, about what a busy agent commits, and 20 a second, a stress rate; 200 viewers
  make that 1,000 and 4,000 deliveries a second); each viewer notes when each event arrives. Delivery latency is arrival time minus the moment
  the writer's `append_events` returned (after commit), on the same clock (one machine).
- **load**: 200 viewers spread over 4 sessions and 20 writers (5 per session) appending
  through the HTTP API with `expected_seq` (retrying on 409) for 60 s. Every viewer must
  receive every event of its session exactly once and in seq order; the server's resident
  memory is read at the start and at the end.

The viewers and writers run in this process (asyncio), daphne in another, both on the same
two cores; figures include that contention.
"""

from __future__ import annotations

import asyncio
import functools
import json
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench.common import Report, Row
from deploy import daphne

PORT = 18_700
VIEWERS = 200


class Daphne:
    def __init__(self, port: int = PORT, database_url: str | None = None) -> None:
        # The load test's writers append far faster than one user may: no limits here.
        env = {"STRAND_RECOVER_AT_START": "0", "STRAND_RATE_LIMITS": '{"append": [0, 60]}'}
        if database_url:
            env["DATABASE_URL"] = database_url
        self.process = daphne.start(port, env)

    def rss_mb(self) -> float:
        import psutil

        return psutil.Process(self.process.pid).memory_info().rss / 1e6

    def stop(self) -> None:
        daphne.stop(self.process, 15)


def _cookie_for(user: Any) -> str:
    from django.test import Client

    client = Client(SERVER_NAME="127.0.0.1")
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}"


async def _viewer(
    port: int,
    session_id: str,
    after: int,
    cookie: str,
    seen: list[int],
    arrivals: dict[int, float],
    ready: asyncio.Event,
    stop: asyncio.Event,
    errors: list[str],
) -> None:
    import websockets

    url = f"ws://127.0.0.1:{port}/ws/sessions/{session_id}/?after_seq={after}"
    try:
        async with websockets.connect(
            url,
            additional_headers={"Cookie": cookie, "Origin": f"http://127.0.0.1:{port}"},
            max_size=None,
            open_timeout=60,
        ) as ws:
            while not stop.is_set():
                try:
                    raw = await asyncio.wait_for(ws.recv(), 0.5)
                except TimeoutError:
                    continue
                message = json.loads(raw)
                if message["type"] == "ready":
                    ready.set()
                elif message["type"] == "event":
                    seen.append(message["seq"])
                    arrivals.setdefault(message["seq"], time.time())
    except Exception as exc:  # reported, and fails the run
        errors.append(f"{type(exc).__name__}: {exc}")


def _in_thread(target: Callable[[], None]) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


def run_latency(report: Report, rate: float = 5.0, events: int = 100) -> None:
    from sessions_app import services, store
    from sessions_app.store import NewEvent

    owner = services.user_get_or_create_local(username="bench")
    session = services.session_create(owner=owner, title="live latency")
    cookie = _cookie_for(owner)
    server = Daphne()
    commits: dict[int, float] = {}
    per_viewer: list[dict[int, float]] = [{} for _ in range(VIEWERS)]
    seen: list[list[int]] = [[] for _ in range(VIEWERS)]
    errors: list[str] = []

    async def main() -> None:
        stop = asyncio.Event()
        ready = [asyncio.Event() for _ in range(VIEWERS)]
        tasks = [
            asyncio.create_task(
                _viewer(
                    PORT, str(session.id), 0, cookie, seen[i], per_viewer[i], ready[i], stop, errors
                )
            )
            for i in range(VIEWERS)
        ]
        await asyncio.wait_for(asyncio.gather(*(r.wait() for r in ready)), 120)

        def write() -> None:
            seq = session.last_seq
            for n in range(events):
                label = {"type": "label", "targetId": "x", "label": str(n)}
                seq = store.append_events(
                    session.id, seq, [NewEvent("entry/label", {"entry": label})]
                ).last_seq
                commits[seq] = time.time()
                time.sleep(1 / rate)
            from django.db import connection

            connection.close()

        writer = _in_thread(write)
        while writer.is_alive():
            await asyncio.sleep(0.1)
        await asyncio.sleep(2)
        stop.set()
        await asyncio.gather(*tasks)

    try:
        asyncio.run(main())
    finally:
        server.stop()
    latencies = sorted(
        (arrivals[seq] - at) * 1000
        for arrivals in per_viewer
        for seq, at in commits.items()
        if seq in arrivals
    )
    missing = sum(1 for arrivals in per_viewer for seq in commits if seq not in arrivals)
    p50 = statistics.median(latencies)
    p99 = latencies[int(len(latencies) * 0.99) - 1]
    report.add(
        Row(
            "live",
            f"delivery latency commit → client, {VIEWERS} viewers, {rate:g} events/s, p50",
            f"{p50:.1f} ms",
        ),
        Row(
            "live",
            f"delivery latency commit → client, {VIEWERS} viewers, {rate:g} events/s, p99",
            f"{p99:.1f} ms",
            "< 100 ms" if rate <= 5 else "",
            ("met" if p99 < 100 else "NOT met") if rate <= 5 else "",
            note=f"{len(latencies):,} deliveries, {missing} missing, {len(errors)} errors",
        ),
    )


@dataclass
class LoadResult:
    seconds: float
    written: int
    conflicts: int
    bad_viewers: int
    errors: list[str]
    rss_start_mb: float
    rss_end_mb: float


def load(
    owner: Any,
    *,
    seconds: float = 60.0,
    viewers: int = VIEWERS,
    writers: int = 20,
    sessions: int = 4,
    port: int = PORT,
    database_url: str | None = None,
) -> LoadResult:
    """Viewers over several sessions and API writers appending with expected_seq; each
    viewer must see every event of its session once, in order."""
    import requests

    from sessions_app import services, tokens

    _, token = tokens.token_create(owner, "load")
    cookie = _cookie_for(owner)
    watched = [services.session_create(owner=owner, title=f"load {i}") for i in range(sessions)]
    server = Daphne(port, database_url)
    rss_start = server.rss_mb()
    seen: list[list[int]] = [[] for _ in range(viewers)]
    errors: list[str] = []
    conflicts = [0]

    def writer(session_id: str, stop: threading.Event) -> None:
        http = requests.Session()
        http.headers["Authorization"] = f"Bearer {token}"
        url = f"http://127.0.0.1:{port}/api/sessions/{session_id}/events"
        expected, n = 0, 0
        while not stop.is_set():
            label = {"type": "label", "targetId": "x", "label": f"{threading.get_ident()}:{n}"}
            body: dict[str, Any] = {
                "expected_seq": expected,
                "events": [{"type": "entry/label", "data": {"entry": label}}],
            }
            response = http.post(url, json=body, timeout=30)
            if response.status_code == 201:
                expected = response.json()["last_seq"]
                n += 1
            elif response.status_code == 409:
                conflicts[0] += 1
                expected = response.json()["current_seq"]
            else:
                errors.append(f"writer {response.status_code}: {response.text[:200]}")
                return
            time.sleep(0.05)

    async def main() -> None:
        stop = asyncio.Event()
        ready = [asyncio.Event() for _ in range(viewers)]
        tasks = [
            asyncio.create_task(
                _viewer(
                    port,
                    str(watched[i % sessions].id),
                    0,
                    cookie,
                    seen[i],
                    {},
                    ready[i],
                    stop,
                    errors,
                )
            )
            for i in range(viewers)
        ]
        await asyncio.wait_for(asyncio.gather(*(r.wait() for r in ready)), 120)
        stopping = threading.Event()
        threads = [
            _in_thread(functools.partial(writer, str(watched[w % sessions].id), stopping))
            for w in range(writers)
        ]
        await asyncio.sleep(seconds)
        stopping.set()
        while any(t.is_alive() for t in threads):
            await asyncio.sleep(0.1)
        await asyncio.sleep(3)
        stop.set()
        await asyncio.gather(*tasks)

    try:
        asyncio.run(main())
        rss_end = server.rss_mb()
    finally:
        server.stop()
    last = {}
    for s in watched:
        s.refresh_from_db()
        last[str(s.id)] = s.last_seq
    bad = sum(
        1
        for i, got in enumerate(seen)
        if got != list(range(1, last[str(watched[i % sessions].id)] + 1))
    )
    return LoadResult(seconds, sum(last.values()), conflicts[0], bad, errors, rss_start, rss_end)


def run_load(report: Report, seconds: float = 60.0) -> None:
    from sessions_app import services

    result = load(services.user_get_or_create_local(username="bench"), seconds=seconds)
    report.add(
        Row(
            "load",
            f"{VIEWERS} viewers + 20 API writers, {seconds:.0f} s, one daphne",
            f"{result.written:,} events written ({result.written / seconds:,.0f}/s), "
            f"{result.conflicts:,} retries after 409",
            note=f"{len(result.errors)} errors",
        ),
        Row(
            "load",
            "viewers that missed, doubled or reordered an event",
            f"{result.bad_viewers} of {VIEWERS}",
            "0",
            "met" if result.bad_viewers == 0 and not result.errors else "NOT met",
        ),
        Row(
            "load",
            "daphne resident memory, start → end",
            f"{result.rss_start_mb:.0f} MB → {result.rss_end_mb:.0f} MB",
        ),
    )


def run(report: Report) -> None:
    run_latency(report, rate=5, events=100)
    run_latency(report, rate=20, events=200)
    run_load(report)
