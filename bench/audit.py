"""The audit desk at 100,000 rows: the list, its exports, usage and the integrity check.

1. Write SESSIONS sessions of model requests straight to the store (five owners, one session
   a day): each a `request/header` and REQUESTS `request/sent` manifests, each answered by
   an assistant message with its usage and cost. The manifests name no leaf (an empty
   context), so each request's hash is that of its header's payload with no messages: the
   rows are many, each rebuild is small. 100 sessions x 1,000 rows = 100,000 audit rows.
   The usage projector then rolls up every event not rolled up yet, as a server's own
   projector keeps doing: the usage page's table of every source reads those rollups.
2. One daphne process (its own projector off); a staff member's session cookie; each page
   or export fetched over HTTP on loopback, timed to its last byte. An export is read as a
   stream and counted, and the server's peak resident memory during it (VmHWM, reset
   before each export) is set against its resident memory before: an export of 10,000
   rows and one of 100,000 should need about the same.
3. `manage.py verify --requests` over every request.
"""

from __future__ import annotations

import io
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.common import Report, Row
from deploy import daphne
from deploy.daphne import free_port

SESSIONS = 100
REQUESTS = 999  # with the header, 1,000 audit rows a session
OWNERS = 5
LIST = "/admin/sessions_app/requestaudit/"
TIMEOUT_S = 300.0
LIST_TARGET_MS = 1000
MEMORY_TARGET_MB = 50  # more than an export's peak may grow the server for 100,000 rows


@dataclass(frozen=True)
class Fetched:
    ms: float
    first_byte_ms: float
    size: int
    lines: int


def build() -> tuple[Any, list[Any]]:
    """The owners (the first is staff) and their sessions; made once per benchmark database."""
    from django.contrib.auth.models import User

    from sessions_app.models import RequestAudit

    owners = [
        User.objects.get_or_create(username=f"audit-bench-{i}", defaults={"is_staff": i == 0})[0]
        for i in range(OWNERS)
    ]
    staff = owners[0]
    if not staff.is_staff:
        staff.is_staff = True
        staff.save(update_fields=["is_staff"])
    have = RequestAudit.objects.filter(owner__in=owners).count()
    if have < SESSIONS * (REQUESTS + 1):
        _write(owners, have // (REQUESTS + 1))
    return staff, owners


def _write(owners: list[Any], done: int) -> None:
    from projections.payload import build_payload, payload_sha256
    from sessions_app import services, store
    from sessions_app.store import NewEvent
    from tests.sessions_app.audit_data import HEADER, written_on

    start = datetime(2026, 1, 1, 9, 0, tzinfo=UTC)
    for index in range(done, SESSIONS):
        owner = owners[index % OWNERS]
        header = {**HEADER, "model": f"gpt-bench-{index % 3}"}
        sha = payload_sha256(
            build_payload(
                provider=header["provider"],
                model=header["model"],
                params=header["params"],
                system_prompt=header["system_prompt"],
                tools=header["tools"],
                messages=[],
            )
        )
        with written_on(start + timedelta(days=index)):
            session = services.session_create(owner=owner, title=f"audit bench {index}", cwd="")
            session.refresh_from_db()
            header_seq = session.last_seq + 1
            events = [NewEvent("request/header", {"reason": "initial", **header}, turn=0, step=0)]
            for n in range(REQUESTS):
                events += _exchange(n, sha, header, header_seq)
                if len(events) >= 998:
                    session.refresh_from_db()
                    store.append_events(session.id, session.last_seq, events)
                    events = []
            if events:
                session.refresh_from_db()
                store.append_events(session.id, session.last_seq, events)
        print(f"  audit: session {index + 1}/{SESSIONS} written", flush=True)


def _exchange(n: int, sha: str, header: dict[str, Any], header_seq: int) -> list[Any]:
    from sessions_app.store import NewEvent

    sent = {
        "header_seq": header_seq,
        "leaf_entry_id": None,
        "payload_sha256": sha,
        "token_estimate": 0,
        "attempt": 1,
        "previous_fault": None,
    }
    cost = 0.001 * (n % 7 + 1)
    usage = {
        "input": 100 + n % 50,
        "output": 20 + n % 9,
        "cacheRead": 0,
        "cacheWrite": 0,
        "totalTokens": 120 + n % 50 + n % 9,
        "cost": {"input": cost, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": cost},
    }
    message = {
        "role": "assistant",
        "content": [{"type": "text", "text": "ok"}],
        "provider": header["provider"],
        "model": header["model"],
        "usage": usage,
        "stopReason": "stop",
    }
    return [
        NewEvent("request/sent", sent, turn=n, step=0),
        NewEvent("assistant/message", {"entry": {"type": "message", "message": message}}, turn=n),
    ]


def _roll_up() -> None:
    """Every event into the usage rollups. A server keeps them level as events come (its
    projector); without them, each usage page would read up to `TAIL_EVENTS` (20,000)
    events from the log again and show the rollups of only the sessions those cover."""
    from sessions_app.projectors.runner import project_pending
    from sessions_app.projectors.usage import UsageProjector

    project_pending([UsageProjector()])


class _Browser:
    def __init__(self, base: str, user: Any) -> None:
        import requests
        from django.conf import settings
        from django.test import Client

        signed_in = Client()
        signed_in.force_login(user)
        self.base = base
        self.http = requests.Session()
        self.http.cookies.set(
            settings.SESSION_COOKIE_NAME, signed_in.cookies[settings.SESSION_COOKIE_NAME].value
        )

    def fetch(self, path: str) -> Fetched:
        started = time.perf_counter()
        first: float | None = None
        size = lines = 0
        with self.http.get(self.base + path, stream=True, timeout=(10, TIMEOUT_S)) as response:
            if response.status_code != 200:
                raise RuntimeError(f"{path}: HTTP {response.status_code}")
            for chunk in response.iter_content(64 * 1024):
                if first is None:
                    first = time.perf_counter()
                size += len(chunk)
                lines += chunk.count(b"\n")
        done = time.perf_counter()
        return Fetched((done - started) * 1000, ((first or done) - started) * 1000, size, lines)


def _status(pid: int, name: str) -> int:
    """A VmRSS or VmHWM figure of a process, in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(name + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {name} for process {pid}")


def _export(report: Report, browser: _Browser, pid: int, path: str, rows: int, name: str) -> None:
    # Writing 5 to clear_refs resets the peak resident set (VmHWM) to the current one.
    Path(f"/proc/{pid}/clear_refs").write_text("5")
    before = _status(pid, "VmRSS")
    fetched = browser.fetch(path)
    grown_mb = (_status(pid, "VmHWM") - before) / 1024
    report.add(
        Row(
            "audit",
            f"{name}, {rows:,} rows",
            f"{fetched.ms / 1000:,.1f} s, first byte {fetched.first_byte_ms:,.0f} ms, "
            f"{fetched.size / 2**20:,.1f} MiB, {fetched.lines:,} lines",
            "",
            "",
            f"server peak memory +{grown_mb:,.1f} MiB over {before / 1024:,.0f} MiB",
        )
    )
    if rows >= 100_000:
        report.add(
            Row(
                "audit",
                f"{name}, {rows:,} rows: server memory grown",
                f"{grown_mb:,.1f} MiB",
                f"< {MEMORY_TARGET_MB} MiB",
                "met" if grown_mb < MEMORY_TARGET_MB else "NOT met",
            )
        )


def _page(report: Report, browser: _Browser, path: str, name: str) -> None:
    browser.fetch(path)  # once to warm the process's caches and the database's
    fetched = [browser.fetch(path) for _ in range(3)]
    ms = sorted(f.ms for f in fetched)[1]
    report.add(
        Row(
            "audit",
            name,
            f"{ms:,.0f} ms (median of 3), {fetched[0].size / 1024:,.0f} KB",
            f"< {LIST_TARGET_MS} ms",
            "met" if ms < LIST_TARGET_MS else "NOT met",
        )
    )


def run(report: Report) -> None:
    from django.core.management import call_command
    from django.core.management.base import CommandError

    from sessions_app import store
    from sessions_app.models import RequestAudit

    started = time.perf_counter()
    staff, owners = build()
    _roll_up()
    store.refresh_statistics()
    rows = RequestAudit.objects.count()
    mine = RequestAudit.objects.filter(owner__in=owners).count()
    one_owner = RequestAudit.objects.filter(owner=owners[1]).count()
    report.add(
        Row(
            "audit",
            "rows written (or found)",
            f"{mine:,} of {rows:,} audit rows",
            note=f"{time.perf_counter() - started:.0f} s",
        )
    )
    port = free_port()
    server = daphne.start(port, {"STRAND_RECOVER_AT_START": "0"})
    try:
        browser = _Browser(f"http://127.0.0.1:{port}", staff)
        pid = server.pid
        _page(report, browser, LIST, f"list, first page of {rows:,} rows")
        _page(report, browser, f"{LIST}?p=1000", "list, page 1,000")
        _page(report, browser, f"{LIST}?owner__id__exact={owners[1].pk}", "list, one user")
        _page(report, browser, f"{LIST}?changes=header", "list, header changes only")
        _page(report, browser, f"{LIST}usage/", f"usage page, {rows:,} rows")
        user = f"?owner__id__exact={owners[1].pk}"
        _export(report, browser, pid, f"{LIST}export.csv{user}", one_owner, "CSV export")
        _export(report, browser, pid, f"{LIST}export.csv", rows, "CSV export")
        _export(report, browser, pid, f"{LIST}export.jsonl", rows, "JSON-lines export")
    finally:
        daphne.stop(server)
    out = io.StringIO()
    started = time.perf_counter()
    try:
        call_command("verify", "--requests", stdout=out)
        verdict = "met"
    except CommandError:
        verdict = "NOT met"
    took = time.perf_counter() - started
    report.add(
        Row(
            "audit",
            "verify --requests, every request",
            f"{took:,.0f} s",
            "passes",
            verdict,
            out.getvalue().splitlines()[0] if out.getvalue() else "",
        )
    )
