"""Live scenarios with real daphne processes, real HAProxy and real websockets: a connect
storm on one process, the same on a cluster with a process killed under load, and viewers
against racing API writers. The tests run them small and assert counts; `make bench` runs
them at full size and reports the times (`bench/live.py`).

Every viewer here behaves like the browser client (`static/js/strand.js`): it connects with
`after_seq` set to the last seq it holds, counts what arrives twice or after a gap, and
after a close waits a random time below a cap that doubles with each close since its last
`ready` (0.5 s, 1 s, 2 s… 30 s) before it connects again; a close with 4503 (the server's
"try again later") counts as a refusal. A viewer that has no `ready` by the deadline is
counted as dropped; nothing waits without a bound.

In the storm, delivery and restart scenarios the viewers are spread over `CLIENT_PROCESSES`
client processes (`CrowdProcesses`), as viewers are over browsers, and the writer runs here
(a thread); in the load scenario viewers and writers run here. Each viewer notes when its
event loop read an event's frame from its socket (`_stamped_connection`); the writer notes
when `append_events` returned; both on `time.monotonic()`, which every process of the
machine shares. The servers run in other processes, all on the same cores.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import random
import statistics
import tempfile
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deploy import daphne

PORT = 18_700
CLUSTER_PORT = 18_710  # HAProxy; its processes on the ports after it
VIEWERS = 1000
CLUSTER_VIEWERS = 2000
LOAD_VIEWERS = 200
RATE = 5.0
# Client processes the viewers of the storm and delivery scenarios are spread over.
CLIENT_PROCESSES = 4
EVENTS = 100
SEED_EVENTS = 20  # already in the session: each viewer's catch-up reads them
DEADLINE_S = 180.0

CLOSE_TRY_LATER = 4503
CLOSED_FOR_GOOD = (4401, 4403)
RECONNECT_BASE_S = 0.5
RECONNECT_MAX_S = 30.0


class Daphne:
    def __init__(
        self,
        port: int = PORT,
        database_url: str | None = None,
        extra: Mapping[str, str] | None = None,
    ) -> None:
        # The load test's writers append far faster than one user may: no limits here.
        env = {"STRAND_RECOVER_AT_START": "0", "STRAND_RATE_LIMITS": '{"append": [0, 60]}'}
        if database_url:
            env["DATABASE_URL"] = database_url
        self.process = daphne.start(port, {**env, **(extra or {})})

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


def reconnect_delay(failures: int) -> float:
    """The browser client's wait after its `failures`-th close since its last `ready`."""
    cap = min(RECONNECT_MAX_S, RECONNECT_BASE_S * 2 ** max(0, failures - 1))
    return random.uniform(0, cap)


@functools.cache
def _stamped_connection() -> type[Any]:
    """websockets' client connection, noting for each message the moment the event loop read
    the bytes that completed it from the socket (before websockets parses them, before the
    viewer's task wakes up and decodes the JSON)."""
    from websockets.asyncio.client import ClientConnection
    from websockets.frames import DATA_OPCODES, Frame

    class StampedConnection(ClientConnection):
        read_at = 0.0

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.stamps: deque[float] = deque()

        def data_received(self, data: bytes) -> None:
            self.read_at = time.monotonic()
            super().data_received(data)

        def process_event(self, event: Any) -> None:
            if isinstance(event, Frame) and event.fin and event.opcode in DATA_OPCODES:
                self.stamps.append(self.read_at)
            super().process_event(event)

    return StampedConnection


@dataclass
class Viewer:
    """One live viewer of a session, reconnecting as the browser client does."""

    url: str  # ws://host:port/ws/sessions/<id>/
    headers: Mapping[str, str]
    last_seq: int = -1
    received: list[int] = field(default_factory=list)  # every event's seq, as it came
    arrivals: dict[int, float] = field(default_factory=dict)  # seq → when read (monotonic)
    doubled: int = 0  # events at or below the last seq held
    skipped: int = 0  # events that came after a gap
    connects: int = 0
    refused: int = 0  # closes with 4503
    failures: int = 0  # closes since the last `ready`
    closes: list[float] = field(default_factory=list)
    readies: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    socket: Any = None

    async def run(self, stop: asyncio.Event) -> None:
        import websockets

        while not stop.is_set():
            code = 1006
            try:
                async with websockets.connect(
                    f"{self.url}?after_seq={self.last_seq}",
                    additional_headers=dict(self.headers),
                    max_size=None,
                    open_timeout=45,
                    ping_interval=None,
                    close_timeout=5,
                    create_connection=_stamped_connection(),
                ) as ws:
                    self.socket = ws
                    self.connects += 1
                    stamps: deque[float] = ws.stamps  # type: ignore[attr-defined]
                    async for raw in ws:
                        self._receive(json.loads(raw), stamps.popleft())
                    code = ws.close_code or 1006
            except websockets.ConnectionClosed as exc:
                code = exc.rcvd.code if exc.rcvd is not None else 1006
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a refused or broken handshake: counted, then retried
                self.errors[type(exc).__name__] += 1
            finally:
                self.socket = None
            if stop.is_set():
                return
            self.closes.append(time.monotonic())
            if code in CLOSED_FOR_GOOD:
                self.errors[f"closed with {code}"] += 1
                return
            if code == CLOSE_TRY_LATER:
                self.refused += 1
            self.failures += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), reconnect_delay(self.failures))

    def _receive(self, message: Mapping[str, Any], read_at: float) -> None:
        if message["type"] == "event":
            seq = message["seq"]
            self.received.append(seq)
            if seq <= self.last_seq:
                self.doubled += 1
                return
            if seq != self.last_seq + 1:
                self.skipped += 1
            self.last_seq = seq
            self.arrivals[seq] = read_at
        elif message["type"] == "ready":
            self.readies.append(time.monotonic())
            self.failures = 0

    def exact(self, last_seq: int) -> bool:
        """Whether this viewer (which started with nothing) holds seqs 0…`last_seq`, each
        once and in order."""
        return self.received == list(range(last_seq + 1))


@dataclass
class Crowd:
    """Viewers of one session, each a task on the running loop."""

    viewers: list[Viewer]
    stop: asyncio.Event
    tasks: list[asyncio.Task[None]]
    started: float

    @classmethod
    def start(cls, url: str, headers: Mapping[str, str], count: int) -> Crowd:
        stop = asyncio.Event()
        viewers = [Viewer(url, headers) for _ in range(count)]
        started = time.monotonic()
        tasks = [asyncio.create_task(v.run(stop)) for v in viewers]
        return cls(viewers, stop, tasks, started)

    def connected(self) -> int:
        return sum(1 for v in self.viewers if v.readies)

    async def until_all_ready(self, deadline_s: float) -> float | None:
        """Seconds from the start until every viewer had its first `ready`; None if some
        had none by the deadline."""
        deadline = self.started + deadline_s
        while self.connected() < len(self.viewers) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        if self.connected() < len(self.viewers):
            return None
        return max(v.readies[0] for v in self.viewers) - self.started

    async def until_caught_up(self, last_seq: int, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if all(v.last_seq >= last_seq for v in self.viewers):
                return True
            await asyncio.sleep(0.1)
        return False

    async def close(self) -> None:
        self.stop.set()
        sockets = [v.socket for v in self.viewers if v.socket is not None]
        if sockets:
            await asyncio.wait([asyncio.ensure_future(s.close()) for s in sockets], timeout=30)
        _, pending = await asyncio.wait(self.tasks, timeout=30)
        for task in pending:
            task.cancel()

    def storm(self, seconds: float | None) -> Storm:
        errors: Counter[str] = Counter()
        for v in self.viewers:
            errors.update(v.errors)
        return Storm(
            len(self.viewers),
            self.connected(),
            seconds,
            sum(v.refused for v in self.viewers),
            dict(errors),
        )


def _crowd_process(link: Any, url: str, headers: dict[str, str], count: int) -> None:
    """One client process of `CrowdProcesses`: `count` viewers on its own event loop, started
    on "go"; answers "status", "viewers" and "close" (after which it ends) over `link`."""

    def copies(crowd: Crowd) -> list[Viewer]:
        return [dataclasses.replace(v, socket=None) for v in crowd.viewers]

    async def main() -> None:
        link.send("up")
        await asyncio.to_thread(link.recv)  # "go"
        crowd = Crowd.start(url, headers, count)
        link.send(crowd.started)
        while True:
            command = await asyncio.to_thread(link.recv)
            if command == "status":
                errors: Counter[str] = Counter()
                for v in crowd.viewers:
                    errors.update(v.errors)
                link.send(
                    {
                        "connected": crowd.connected(),
                        "last_first_ready": max(
                            (v.readies[0] for v in crowd.viewers if v.readies), default=None
                        ),
                        "lowest_seq": min((v.last_seq for v in crowd.viewers), default=-1),
                        "refused": sum(v.refused for v in crowd.viewers),
                        "errors": errors,
                    }
                )
            elif command == "viewers":
                link.send(copies(crowd))
            else:
                await crowd.close()
                link.send(copies(crowd))
                return

    asyncio.run(main())


@dataclass
class CrowdProcesses:
    """Viewers of one session spread over several client processes (`Crowd` in each), as
    viewers are spread over browsers: in one process the 1,000th viewer's frame is read only
    after the 999 before it have been read and parsed. Every process takes its times on
    `time.monotonic()`, the one clock of the machine, as the writer here does."""

    links: list[Any]
    processes: list[Any]
    count: int
    started: float = 0.0
    status: list[dict[str, Any]] = field(default_factory=list)
    viewers: list[Viewer] = field(default_factory=list)  # after `close`

    @classmethod
    async def start(
        cls, url: str, headers: Mapping[str, str], count: int, processes: int
    ) -> CrowdProcesses:
        import multiprocessing

        context = multiprocessing.get_context("spawn")
        processes = max(1, min(processes, count))
        crowd = cls([], [], count)
        try:
            for i in range(processes):
                share = count // processes + (i < count % processes)
                parent, child = context.Pipe()
                process = context.Process(
                    target=_crowd_process, args=(child, url, dict(headers), share), daemon=True
                )
                process.start()
                child.close()
                crowd.links.append(parent)
                crowd.processes.append(process)
            await crowd._each(None)  # every process is up: all start at once
            crowd.started = min(await crowd._each("go"))
        except BaseException:
            crowd._end()
            raise
        return crowd

    async def _each(self, command: str | None) -> list[Any]:
        def ask(link: Any) -> Any:
            if command is not None:
                link.send(command)
            return link.recv()

        return list(await asyncio.gather(*(asyncio.to_thread(ask, link) for link in self.links)))

    async def _refresh(self) -> None:
        self.status = await self._each("status")

    def connected(self) -> int:
        return sum(s["connected"] for s in self.status)

    async def until_all_ready(self, deadline_s: float) -> float | None:
        deadline = self.started + deadline_s
        await self._refresh()
        while self.connected() < self.count and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
            await self._refresh()
        if self.connected() < self.count:
            return None
        return max(s["last_first_ready"] for s in self.status) - self.started

    async def until_caught_up(self, last_seq: int, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            await self._refresh()
            if all(s["lowest_seq"] >= last_seq for s in self.status):
                return True
            await asyncio.sleep(0.2)
        return False

    async def snapshot(self) -> list[Viewer]:
        return [v for part in await self._each("viewers") for v in part]

    async def close(self) -> None:
        try:
            self.viewers = [v for part in await self._each("close") for v in part]
        finally:
            self._end()

    def _end(self) -> None:
        for process in self.processes:
            process.join(30)
            if process.is_alive():
                process.kill()
                process.join(5)

    def storm(self, seconds: float | None) -> Storm:
        errors: Counter[str] = Counter()
        for s in self.status:
            errors.update(s["errors"])
        return Storm(
            self.count,
            self.connected(),
            seconds,
            sum(s["refused"] for s in self.status),
            dict(errors),
        )


@dataclass
class Storm:
    viewers: int
    connected: int
    seconds: float | None  # until the last first `ready`; None: some never had one
    refused: int  # closes with 4503, each followed by a retry
    errors: dict[str, int]

    @property
    def dropped(self) -> int:
        return self.viewers - self.connected


@dataclass
class Delivery:
    viewers: int
    events: int
    latencies_ms: list[float]
    missed: int
    doubled: int

    @property
    def p50(self) -> float:
        return statistics.median(self.latencies_ms) if self.latencies_ms else float("nan")

    @property
    def p99(self) -> float:
        if not self.latencies_ms:
            return float("nan")
        return self.latencies_ms[max(0, int(len(self.latencies_ms) * 0.99) - 1)]


def delivery(viewers: list[Viewer], commits: Mapping[int, float]) -> Delivery:
    latencies = sorted(
        (v.arrivals[seq] - at) * 1000
        for v in viewers
        for seq, at in commits.items()
        if seq in v.arrivals
    )
    missed = sum(1 for v in viewers for seq in commits if seq not in v.arrivals)
    doubled = sum(v.doubled for v in viewers)
    return Delivery(len(viewers), len(commits), latencies, missed, doubled)


@dataclass
class Restart:
    affected: int  # viewers whose socket the kill closed
    reconnected: int  # of those, how many had a `ready` again
    seconds: float | None  # from the kill until the last of them was `ready` again
    viewers: int
    exact: int  # viewers holding every event once and in order at the end
    missed: int
    doubled: int
    skipped: int


def _label(n: int) -> Any:
    from sessions_app.store import NewEvent

    return NewEvent("entry/label", {"entry": {"type": "label", "targetId": "x", "label": str(n)}})


def _write(
    session_id: str, after_seq: int, events: int, rate: float, commits: dict[int, float]
) -> int:
    """Append `events` events, `rate` a second, noting when each commit returned."""
    from django.db import connection

    from sessions_app import store

    seq = after_seq
    try:
        for n in range(events):
            seq = store.append_events(session_id, seq, [_label(n)]).last_seq
            commits[seq] = time.monotonic()
            if rate:
                time.sleep(1 / rate)
    finally:
        connection.close()
    return seq


async def _write_meanwhile(
    session_id: str, after_seq: int, events: int, rate: float, commits: dict[int, float]
) -> int:
    return await asyncio.to_thread(_write, session_id, after_seq, events, rate, commits)


def _watched_session(owner: Any, title: str, seed: int) -> tuple[str, int]:
    """A new session with `seed` events already in it: (id, last seq)."""
    from sessions_app import services

    session = services.session_create(owner=owner, title=title)
    last = _write(str(session.id), session.last_seq, seed, 0, {})
    return str(session.id), last


def _refreshed(session: Any) -> None:
    """`session.refresh_from_db()` from a worker thread, closing that thread's connection."""
    from django.db import connection

    try:
        session.refresh_from_db()
    finally:
        connection.close()


def _headers(cookie: str, port: int) -> dict[str, str]:
    return {"Cookie": cookie, "Origin": f"http://127.0.0.1:{port}"}


@dataclass
class OneProcess:
    storm: Storm
    delivery: Delivery
    rss_idle_mb: float
    rss_viewers_mb: float
    exact: int  # viewers holding every event once and in order at the end


def one_process(
    owner: Any,
    *,
    viewers: int = VIEWERS,
    port: int = PORT,
    database_url: str | None = None,
    env: Mapping[str, str] | None = None,
    seed: int = SEED_EVENTS,
    events: int = EVENTS,
    rate: float = RATE,
    deadline_s: float = DEADLINE_S,
    clients: int = CLIENT_PROCESSES,
) -> OneProcess:
    """`viewers` connect at once to one process; then `events` are written at `rate`."""
    session_id, last = _watched_session(owner, "live storm", seed)
    cookie = _cookie_for(owner)
    server = Daphne(port, database_url, env)
    url = f"ws://127.0.0.1:{port}/ws/sessions/{session_id}/"

    async def main() -> OneProcess:
        rss_idle = server.rss_mb()
        crowd = await CrowdProcesses.start(url, _headers(cookie, port), viewers, clients)
        try:
            storm = crowd.storm(await crowd.until_all_ready(deadline_s))
            await asyncio.sleep(2)
            rss_viewers = server.rss_mb()
            commits: dict[int, float] = {}
            final = await _write_meanwhile(session_id, last, events, rate, commits)
            await crowd.until_caught_up(final, 30)
        finally:
            await crowd.close()
        exact = sum(1 for v in crowd.viewers if v.exact(final))
        return OneProcess(storm, delivery(crowd.viewers, commits), rss_idle, rss_viewers, exact)

    try:
        return asyncio.run(main())
    finally:
        server.stop()


@dataclass
class OnCluster:
    storm: Storm
    spread: list[int]  # websockets per process after the storm
    delivery: Delivery
    restart: Restart


def on_cluster(
    owner: Any,
    *,
    viewers: int = CLUSTER_VIEWERS,
    front: int = CLUSTER_PORT,
    workers: int = 2,
    database_url: str | None = None,
    env: Mapping[str, str] | None = None,
    seed: int = SEED_EVENTS,
    events: int = EVENTS,
    rate: float = RATE,
    restart_events: int = EVENTS,
    deadline_s: float = DEADLINE_S,
    clients: int = CLIENT_PROCESSES,
) -> OnCluster:
    """`viewers` connect at once through HAProxy; `events` are written at `rate`; then, while
    `restart_events` more are written, process 1 is killed and started again."""
    from deploy.cluster import Cluster
    from deploy.haproxy import server_connections

    session_id, last = _watched_session(owner, "live cluster", seed)
    cookie = _cookie_for(owner)
    children = {"STRAND_RECOVER_AT_START": "0", **(env or {})}
    if database_url:
        children["DATABASE_URL"] = database_url
    state = Path(tempfile.mkdtemp(prefix="strand-cluster-"))
    cluster = Cluster(front, workers, state, children)
    cluster.start()
    url = f"ws://127.0.0.1:{front}/ws/sessions/{session_id}/"

    async def main() -> OnCluster:
        crowd = await CrowdProcesses.start(url, _headers(cookie, front), viewers, clients)
        try:
            storm = crowd.storm(await crowd.until_all_ready(deadline_s))
            await asyncio.sleep(2)
            spread = [server_connections(cluster.admin_socket, i) for i in range(workers)]
            commits: dict[int, float] = {}
            seq = await _write_meanwhile(session_id, last, events, rate, commits)
            await crowd.until_caught_up(seq, 30)
            latency = delivery(await crowd.snapshot(), commits)

            writing = asyncio.ensure_future(
                _write_meanwhile(session_id, seq, restart_events, rate, {})
            )
            await asyncio.sleep(min(5.0, restart_events / rate / 4))
            killed_at = time.monotonic()
            await asyncio.to_thread(cluster.kill, 0)
            await asyncio.to_thread(cluster.respawn, 0)
            final = await writing
            await crowd.until_caught_up(final, deadline_s)
        finally:
            await crowd.close()
        affected = [v for v in crowd.viewers if any(t >= killed_at for t in v.closes)]
        back = [[r for r in v.readies if r >= killed_at] for v in affected]
        reconnected = sum(1 for r in back if r)
        seconds = (
            max(r[0] for r in back) - killed_at if back and reconnected == len(affected) else None
        )
        restart = Restart(
            len(affected),
            reconnected,
            seconds,
            len(crowd.viewers),
            sum(1 for v in crowd.viewers if v.exact(final)),
            sum(len(set(range(final + 1)) - set(v.received)) for v in crowd.viewers),
            sum(v.doubled for v in crowd.viewers),
            sum(v.skipped for v in crowd.viewers),
        )
        return OnCluster(storm, spread, latency, restart)

    try:
        return asyncio.run(main())
    finally:
        cluster.stop()


def _in_thread(target: Callable[[], None]) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


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
    viewers: int = LOAD_VIEWERS,
    writers: int = 20,
    sessions: int = 4,
    port: int = PORT,
    database_url: str | None = None,
) -> LoadResult:
    """Viewers over several sessions and API writers appending with expected_seq; each
    viewer must see every event of its session once, in order."""
    import requests

    from sessions_app import services
    from sessions_app.services import tokens

    _, token = tokens.token_create(owner, "load")
    cookie = _cookie_for(owner)
    watched = [services.session_create(owner=owner, title=f"load {i}") for i in range(sessions)]
    server = Daphne(port, database_url)
    rss_start = server.rss_mb()
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

    async def main() -> list[Crowd]:
        counts = [viewers // sessions + (i < viewers % sessions) for i in range(sessions)]
        crowds = [
            Crowd.start(f"ws://127.0.0.1:{port}/ws/sessions/{s.id}/", _headers(cookie, port), n)
            for s, n in zip(watched, counts, strict=True)
        ]
        try:
            for crowd in crowds:
                if await crowd.until_all_ready(DEADLINE_S) is None:
                    errors.append(f"{crowd.storm(None).dropped} viewers never connected")
            stopping = threading.Event()
            threads = [
                _in_thread(functools.partial(writer, str(watched[w % sessions].id), stopping))
                for w in range(writers)
            ]
            await asyncio.sleep(seconds)
            stopping.set()
            for thread in threads:
                await asyncio.to_thread(thread.join, 60)
            for s, crowd in zip(watched, crowds, strict=True):
                await asyncio.to_thread(_refreshed, s)
                if not await crowd.until_caught_up(s.last_seq, 30):
                    errors.append(f"viewers of {s.id} never caught up")
        finally:
            for crowd in crowds:
                await crowd.close()
        return crowds

    try:
        crowds = asyncio.run(main())
        rss_end = server.rss_mb()
    finally:
        server.stop()
    last = {}
    for s in watched:
        s.refresh_from_db()
        last[str(s.id)] = s.last_seq
    bad = 0
    for s, crowd in zip(watched, crowds, strict=True):
        bad += sum(1 for v in crowd.viewers if not v.exact(last[str(s.id)]))
        for v in crowd.viewers:
            errors.extend(f"viewer: {name} ×{n}" for name, n in v.errors.items())
    return LoadResult(seconds, sum(last.values()), conflicts[0], bad, errors, rss_start, rss_end)
