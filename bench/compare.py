"""Two branches of a 100,000-event session compared, through the API and the page.

The session is made as the pages benchmark makes its own (`bench.recorded`: turns the
offline runtime really ran, repeated with fresh ids, a compaction every 150 entries), but
grows two branches of BRANCH_ENTRIES entries each from one ancestor at its end: A goes on
from the trunk, then the leaf moves back to the ancestor through the store and B grows
from there. Both branches are long, compacted and full of tool calls.

1. Grow the session with autovacuum off for the event and entry tables; one daphne process.
2. The first fetch of each view before any ANALYZE (no target: the planner's statistics
   are those of whatever the database held before).
3. ANALYZE, then each view: the median of RUNS fetches after one, over HTTP on loopback,
   from the request to the last byte; pages with a signed-in session cookie, the API with a
   personal token (`bench.pages`' client).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from bench import pages, recorded
from bench.common import Report, Row
from bench.pages import Fetched, View
from deploy import daphne
from deploy.daphne import free_port

EVENTS = 100_000
BRANCH_ENTRIES = 5_000
RUNS = 5
TARGET_MS = 300
TARGET_KB = 500


def build(owner: Any) -> tuple[Any, recorded.Branches]:
    from sessions_app import services

    recording = recorded.record(owner)
    session = services.session_create(owner=owner, title=f"compare {EVENTS:,}")
    branches = recorded.grow_branches(
        session, EVENTS, recording, entries=BRANCH_ENTRIES, seed=EVENTS
    )
    return session, branches


def _views(branches: recorded.Branches) -> list[View]:
    from sessions_app.api.cursors import cursor_encode

    a, b = branches.leaf_a, branches.leaf_b
    middle = min(branches.entries_a, branches.entries_b) // 2
    cursor = cursor_encode("compare", a=a, b=b, offset=middle)
    return [
        View("API compare, first rows", f"/compare?a={a}&b={b}", api=True),
        View("API compare, rows in the middle", f"/compare?a={a}&b={b}&cursor={cursor}", api=True),
        View("compare page", f"compare?a={a}&b={b}", api=False),
        View(
            "compare page, show more in the middle",
            f"compare?a={a}&b={b}&offset={middle}",
            api=False,
        ),
        View(
            "compare page, the summary a live update redraws (htmx)",
            f"compare?a={a}&b={b}",
            api=False,
            htmx=True,
        ),
    ]


def run(report: Report) -> None:
    from sessions_app import services

    owner = services.user_get_or_create_local(username="bench")
    pages._autovacuum(False)
    try:
        started = time.perf_counter()
        session, branches = build(owner)
        made = time.perf_counter() - started
        port = free_port()
        server = daphne.start(port, {"STRAND_RECOVER_AT_START": "0"})
        try:
            client = pages._Client(f"http://127.0.0.1:{port}", owner)
            _check(client, session, branches)
            shape = (
                f"{branches.entries_a:,} and {branches.entries_b:,} entries, "
                f"{session.last_seq + 1:,} events"
            )
            for view in _views(branches):
                first = client.fetch(session, view)
                report.add(_row(f"{view.name}, {shape}, first view before ANALYZE", first))
            pages._analyze()
            for index, view in enumerate(_views(branches)):
                client.fetch(session, view)
                fetched = [client.fetch(session, view) for _ in range(RUNS)]
                median = Fetched(
                    statistics.median(f.ms or 0.0 for f in fetched), fetched[-1].kb, 200
                )
                if any(f.ms is None for f in fetched):
                    median = Fetched(None, 0.0, 0)
                note = f"session written in {made:.0f} s" if index == 0 else ""
                report.add(_row(f"{view.name}, {shape}", median, target=True, note=note))
        finally:
            daphne.stop(server)
    finally:
        pages._autovacuum(True)


def _check(client: Any, session: Any, branches: recorded.Branches) -> None:
    """The API names the ancestor the session was grown from and counts both branches."""
    url = f"{client.base}/api/sessions/{session.id}/compare"
    answer = client.program.get(url, params={"a": branches.leaf_a, "b": branches.leaf_b})
    body = answer.json()
    longer = max(branches.entries_a, branches.entries_b)
    if answer.status_code != 200 or body["ancestor"]["entry_id"] != branches.ancestor:
        raise RuntimeError(f"compare answered {answer.status_code}: {answer.text[:200]}")
    if body["total_rows"] != longer or body["totals_a"]["entries"] != branches.entries_a:
        raise RuntimeError(f"compare counted {body['total_rows']} rows, not {longer}")


def _row(name: str, fetched: Fetched, target: bool = False, note: str = "") -> Row:
    goal = f"< {TARGET_MS} ms, < {TARGET_KB} KB" if target else ""
    if fetched.ms is None:
        return Row("compare", name, "timed out", goal, "NOT met" if goal else "", note)
    met = fetched.ms < TARGET_MS and fetched.kb < TARGET_KB
    verdict = ("met" if met else "NOT met") if goal else ""
    return Row("compare", name, f"{fetched.ms:,.0f} ms, {fetched.kb:,.0f} KB", goal, verdict, note)
