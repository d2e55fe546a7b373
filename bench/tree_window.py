"""The whole tree, windowed: the first answer of the session page's `?tree=1` and the windows
it reads on, through daphne, for branchy Pi files of 1,000 (the largest laid out whole),
24,000 and 100,000 entries.

A branchy file (`bench.trees.branchy_file`) is a spine of tool turns (user, assistant with a
tool call, tool result, assistant) with a side branch of one tool turn leaving every fifth
turn's question. Each file is imported, then one daphne process serves the pages; they are
fetched with a signed-in session cookie over HTTP on loopback, each timed from the request
to the last byte of the answer: the whole page with `?tree=1`, then the lines of the window
its first "read on" link names (as htmx asks for them), then of the first collapsed branch
and of the first run of a long line. The median of RUNS fetches after one.

Before this, `?tree=1` drew every entry: 14.7 MB in 2.1 s at 24,000 entries of a branchy
file, and 14.5 MB in 6.6 s at 30,124 entries (the pages benchmark's 100,000-event session).

Run alone: `python -m bench tree_window`; `STRAND_BENCH_PORT` names daphne's port (default:
a free one below 32768).
"""

from __future__ import annotations

import html
import io
import os
import re
import statistics
import time
from typing import Any

from bench.common import Report, Row
from bench.trees import branchy_file
from deploy import daphne
from deploy.daphne import free_port

SIZES = (1_000, 24_000, 100_000)
RUNS = 5
TARGET_MS = 300
TARGET_KB = 500
ROW = '<li class="node '
_LINK = re.compile(
    r'<li class="tree-load [^"]*"><a href="[^"]*" hx-get="([^"]*)"[^>]*data-tree-load="(\w+)"'
)


def run(report: Report) -> None:
    import requests
    from django.conf import settings
    from django.test import Client

    from sessions_app import services
    from sessions_app.services import pi_io

    owner = services.user_get_or_create_local(username="bench")
    sessions: dict[int, Any] = {}
    for size in SIZES:
        started = time.perf_counter()
        sessions[size] = pi_io.pi_import(
            source=io.BytesIO(branchy_file(size)), owner=owner, name=f"branchy {size:,}"
        ).session
        print(f"    imported {size:,} entries in {time.perf_counter() - started:.1f} s", flush=True)
    signed_in = Client()
    signed_in.force_login(owner)
    http = requests.Session()
    http.cookies.set(
        settings.SESSION_COOKIE_NAME, signed_in.cookies[settings.SESSION_COOKIE_NAME].value
    )
    port = int(os.environ.get("STRAND_BENCH_PORT") or free_port())
    server = daphne.start(port, {"STRAND_RECOVER_AT_START": "0"})
    try:
        base = f"http://127.0.0.1:{port}"
        _fetch(http, f"{base}/sessions/{sessions[SIZES[0]].id}/?tree=1")  # a warm process
        for size in SIZES:
            _measure(report, http, base, sessions[size], size)
    finally:
        daphne.stop(server)


def _measure(report: Report, http: Any, base: str, session: Any, size: int) -> None:
    page_url = f"{base}/sessions/{session.id}/"
    ms, body = _timed(http, page_url + "?tree=1")
    rows = body.count(ROW)
    report.add(
        Row(
            "tree window",
            f"whole-tree page (?tree=1), first answer, branchy file of {size:,} entries",
            f"{ms:.0f} ms, {len(body.encode()) / 1024:.0f} KB",
            f"< {TARGET_MS} ms, < {TARGET_KB} KB",
            "met" if ms < TARGET_MS and len(body.encode()) < TARGET_KB * 1024 else "NOT met",
            f"{rows} rows drawn; through daphne, median of {RUNS}",
        )
    )
    links = {kind: url for url, kind in reversed(_LINK.findall(body))}  # the first of each
    for kind, what in (
        ("previous", "the window above"),
        ("below", "a collapsed branch"),
        ("run", "a run of a long line"),
        ("next", "the rows further on"),
    ):
        if kind not in links:
            continue
        url = page_url + html.unescape(links[kind])
        ms, part = _timed(http, url, htmx=True)
        report.add(
            Row(
                "tree window",
                f"reading on: {what}, branchy file of {size:,} entries",
                f"{ms:.0f} ms, {len(part.encode()) / 1024:.0f} KB",
                f"< {TARGET_MS} ms, < {TARGET_KB} KB",
                "met" if ms < TARGET_MS and len(part.encode()) < TARGET_KB * 1024 else "NOT met",
                f"{part.count(ROW)} rows; the htmx request of its link",
            )
        )


def _timed(http: Any, url: str, *, htmx: bool = False) -> tuple[float, str]:
    _fetch(http, url, htmx=htmx)
    times: list[float] = []
    body = ""
    for _ in range(RUNS):
        started = time.perf_counter()
        body = _fetch(http, url, htmx=htmx)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times), body


def _fetch(http: Any, url: str, *, htmx: bool = False) -> str:
    headers = {"HX-Request": "true"} if htmx else {}
    response = http.get(url, headers=headers, timeout=120)
    if response.status_code != 200:
        raise RuntimeError(f"{url}: HTTP {response.status_code} {response.text[:200]}")
    return response.content.decode()
