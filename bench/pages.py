"""Pages and API views as users get them, at 1,000 and 100,000 events.

The sessions are made of turns the offline runtime really ran (`bench.recorded`: tools, an
approval, two calls at once, a search, a compaction every 150 entries), repeated with
fresh ids and a request manifest whose payload hash `verify` rebuilds; `verify` runs on
both at the end.

1. Record the turns; grow the 1,000-event session; ANALYZE, so that the planner's
   statistics know only small sessions; grow the 100,000-event session with autovacuum
   off for the event and entry tables, so that nothing ANALYZEs them meanwhile.
2. One daphne process (`deploy.daphne`); pages are fetched with a signed-in session
   cookie, the API with a personal token (`Authorization: Bearer`), over HTTP on loopback,
   each timed from the request to the last byte of the answer. The small session's views
   are fetched once first, so that the process is warm.
3. The first fetch of each view of the 100,000-event session, before any ANALYZE.
4. ANALYZE (what autovacuum would run), then each view of both sessions: the median of
   RUNS fetches after one (SLOW_RUNS for a view slower than a second).
5. `verify` on both sessions.

A fetch that has not answered after TIMEOUT_S seconds is reported as timed out and the view
is not fetched again.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench import recorded
from bench.common import Report, Row
from deploy import daphne
from deploy.daphne import free_port

SIZES = (1_000, 100_000)
RUNS = 5
SLOW_RUNS = 3
TIMEOUT_S = 60.0
TARGET_MS = 300
TARGET_KB = 500
TABLES = ("sessions_app_entry", "sessions_app_event")

_recording: recorded.Recording | None = None


def build(owner: Any, size: int) -> Any:
    """A session of about `size` events made of the recorded turns (recorded once a run)."""
    global _recording
    from sessions_app import services

    if _recording is None:
        _recording = recorded.record(owner)
    session = services.session_create(owner=owner, title=f"pages {size:,}")
    recorded.grow(session, size, _recording, seed=size)
    return session


@dataclass(frozen=True)
class View:
    name: str
    path: str  # after the session's page or API prefix
    api: bool
    htmx: bool = False


@dataclass(frozen=True)
class Fetched:
    ms: float | None  # None: timed out
    kb: float
    status: int


def _views(session: Any) -> list[View]:
    from sessions_app.models import Event

    requests = list(
        Event.objects.filter(session=session, type="request/sent")
        .order_by("seq")
        .values_list("seq", flat=True)
    )
    latest, middle = requests[-1], requests[len(requests) // 2]
    return [
        View("session page (chat)", "", api=False),
        View("chat view, htmx partial", "?view=chat", api=False, htmx=True),
        View("trace view", "?view=trace", api=False),
        View("context view, latest request", "?view=context", api=False),
        View("context view, a request in the middle", f"?view=context&request={middle}", api=False),
        View("API chat", "/views/chat", api=True),
        View("API trace", "/views/trace", api=True),
        View("API tree, first page", "/tree", api=True),
        View("API entries, first page", "/entries", api=True),
        View("API entries, a page in the middle", f"/entries?after_seq={middle}", api=True),
        View("API context of the leaf", "/context", api=True),
        View("API request, latest", f"/views/requests/{latest}", api=True),
        View("API request in the middle", f"/views/requests/{middle}", api=True),
    ]


class _Client:
    """HTTP as a browser (session cookie) and as a program (token) use it."""

    def __init__(self, base: str, owner: Any) -> None:
        import requests
        from django.conf import settings
        from django.test import Client

        from sessions_app.services import tokens

        signed_in = Client()
        signed_in.force_login(owner)
        cookie = signed_in.cookies[settings.SESSION_COOKIE_NAME].value
        self.base = base
        self.browser = requests.Session()
        self.browser.cookies.set(settings.SESSION_COOKIE_NAME, cookie)
        self.program = requests.Session()
        self.program.headers["Authorization"] = f"Bearer {tokens.token_create(owner, 'bench')[1]}"

    def fetch(self, session: Any, view: View) -> Fetched:
        import requests

        if view.api:
            http, url = self.program, f"{self.base}/api/sessions/{session.id}{view.path}"
        else:
            http, url = self.browser, f"{self.base}/sessions/{session.id}/{view.path}"
        headers = {"HX-Request": "true", "HX-Target": "view"} if view.htmx else {}
        started = time.perf_counter()
        try:
            response = http.get(url, headers=headers, timeout=(10, TIMEOUT_S))
        except requests.Timeout:
            return Fetched(None, 0.0, 0)
        ms = (time.perf_counter() - started) * 1000
        if response.status_code != 200:
            raise RuntimeError(f"{url}: HTTP {response.status_code} {response.text[:200]}")
        return Fetched(ms, len(response.content) / 1024, response.status_code)


def run(report: Report) -> None:
    from sessions_app import services
    from sessions_app.selectors.verify import verify_session

    owner = services.user_get_or_create_local(username="bench")
    sessions: dict[int, Any] = {}
    made: dict[int, float] = {}
    small, large = SIZES
    started = time.perf_counter()
    sessions[small] = build(owner, small)
    made[small] = time.perf_counter() - started
    _analyze()  # the statistics now describe small sessions only
    _autovacuum(False)
    try:
        started = time.perf_counter()
        sessions[large] = build(owner, large)
        made[large] = time.perf_counter() - started
        analyzed = _last_analyzed()
        port = free_port()
        server = daphne.start(port, {"STRAND_RECOVER_AT_START": "0"})
        try:
            client = _Client(f"http://127.0.0.1:{port}", owner)
            for view in _views(sessions[small]):
                client.fetch(sessions[small], view)  # a warm process
            _first_views(report, client, sessions[large], analyzed)
            _analyze()
            for size in SIZES:
                _measure(report, client, sessions[size], made[size], target=size == large)
        finally:
            daphne.stop(server)
    finally:
        _autovacuum(True)
    for size in SIZES:
        _verify(report, verify_session, sessions[size])


def _first_views(report: Report, client: _Client, session: Any, analyzed: Any) -> None:
    events = session.last_seq + 1
    for view in _views(session):
        fetched = client.fetch(session, view)
        report.add(_row(f"{view.name}, {events:,} events, first view before ANALYZE", fetched))
    if _last_analyzed() != analyzed:
        raise RuntimeError("the tables were analyzed while the first views were measured")


def _measure(report: Report, client: _Client, session: Any, made_s: float, target: bool) -> None:
    events = session.last_seq + 1
    for index, view in enumerate(_views(session)):
        first = client.fetch(session, view)
        if first.ms is None:
            report.add(_row(f"{view.name}, {events:,} events", first, target))
            continue
        runs = RUNS if first.ms < 1000 else SLOW_RUNS
        fetched = [client.fetch(session, view) for _ in range(runs)]
        done = [f for f in fetched if f.ms is not None]
        if len(done) < runs:
            report.add(_row(f"{view.name}, {events:,} events", Fetched(None, 0, 0), target))
            continue
        median = Fetched(
            statistics.median(f.ms for f in done if f.ms is not None), done[-1].kb, 200
        )
        note = f"session written in {made_s:.0f} s" if index == 0 else ""
        report.add(_row(f"{view.name}, {events:,} events", median, target, note))


def _row(name: str, fetched: Fetched, target: bool = False, note: str = "") -> Row:
    goal = f"< {TARGET_MS} ms, < {TARGET_KB} KB" if target else ""
    if fetched.ms is None:
        return Row(
            "pages", name, f"timed out (> {TIMEOUT_S:.0f} s)", goal, "NOT met" if goal else "", note
        )
    met = fetched.ms < TARGET_MS and fetched.kb < TARGET_KB
    verdict = ("met" if met else "NOT met") if goal else ""
    return Row("pages", name, f"{fetched.ms:,.0f} ms, {fetched.kb:,.0f} KB", goal, verdict, note)


def _verify(report: Report, verify: Callable[[Any], str | None], session: Any) -> None:
    started = time.perf_counter()
    difference = verify(session)
    took = time.perf_counter() - started
    value = f"passes ({took:.0f} s)" if difference is None else f"fails: {difference}"[:200]
    report.add(
        Row(
            "pages",
            f"verify, {session.last_seq + 1:,}-event session",
            value,
            "passes",
            "met" if difference is None else "NOT met",
        )
    )


def _analyze() -> None:
    """What autovacuum runs on a table that changed: ANALYZE of every column."""
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute(f"ANALYZE {', '.join(TABLES)}")


def _autovacuum(enabled: bool) -> None:
    """Autovacuum off while a session grows, so that only this benchmark runs ANALYZE."""
    from django.db import connection

    with connection.cursor() as cur:
        for table in TABLES:
            if enabled:
                cur.execute(f"ALTER TABLE {table} RESET (autovacuum_enabled)")
            else:
                cur.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = off)")


def _last_analyzed() -> list[tuple[Any, ...]]:
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute(
            "SELECT relname, last_analyze, last_autoanalyze FROM pg_stat_user_tables "
            "WHERE relname = ANY(%s) ORDER BY relname",
            [list(TABLES)],
        )
        return cur.fetchall()
