"""Trees of any shape: bytes and server time of the tree API, the whole-tree page and the
HTML export, for comb-shaped Pi files of 2,000, 4,000 and 8,000 entries and for a session
of 100,000 events.

The comb is a spine of messages, each with one side leaf, so that every spine entry forks
and the drawn indent grows by one per entry: the shape that makes any per-row text prefix
quadratic. Its bytes per entry must stay flat as it grows. The 100,000-event session is
the pages benchmark's (`bench.pages.build`). Everything is fetched in-process with Django's
test client as the session's owner; the tree API is read page by page (2,000 rows, the
largest page) to the end; the export's stream is read to its end. The export's memory is
the growth of the process's resident size while it streams, sampled every 20 ms (for the
100,000-event session, before any other read of it), and Python's allocation peak.
"""

from __future__ import annotations

import io
import json
import statistics
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

from bench.common import Report, Row, resident_rise

COMBS = (2_000, 4_000, 8_000)
LARGE_EVENTS = 100_000
RUNS = 3
PAGE_ROWS = 2_000
TARGET_BYTES = 16 * 1024 * 1024


def comb_file(entries: int) -> bytes:
    """A Pi file of `entries` messages: a spine in which each message has two children, a
    side leaf and the next spine message (written in that order, so the current leaf after
    import, the file's last entry, sits at the far end of the spine)."""
    header = {
        "type": "session",
        "version": 3,
        "id": f"comb-{entries}",
        "timestamp": "2026-01-01T00:00:00.000Z",
        "cwd": "/comb",
    }
    lines = [json.dumps(header)]
    spine: str | None = None
    for n in range(entries):
        entry_id = f"{n:08x}"
        side = n % 2 == 1  # odd entries are leaves of the spine entry before them
        stamp = f"2026-01-01T{n // 3600:02d}:{n // 60 % 60:02d}:{n % 60:02d}.000Z"
        text = f"side {n}" if side else f"spine {n}: " + "and then " * 3
        lines.append(
            json.dumps(
                {
                    "type": "message",
                    "id": entry_id,
                    "parentId": spine,
                    "timestamp": stamp,
                    "message": {"role": "user", "content": text, "timestamp": 0},
                }
            )
        )
        if not side:
            spine = entry_id
    return ("\n".join(lines) + "\n").encode()


def branchy_file(entries: int, side_every: int = 5) -> bytes:
    """A Pi file of about `entries` entries: a spine of tool turns (user, assistant with a
    tool call, tool result, assistant), and after every `side_every`-th turn a side branch
    of one tool turn leaving that turn's user message (a retry asked differently). The
    file's last entry, the current leaf after import, ends the spine."""
    header = {
        "type": "session",
        "version": 3,
        "id": f"branchy-{entries}",
        "timestamp": "2026-01-01T00:00:00.000Z",
        "cwd": "/branchy",
    }
    lines = [json.dumps(header)]
    count = 0

    def add(parent: str | None, message: dict[str, Any]) -> str:
        nonlocal count
        entry_id = f"{count:08x}"
        stamp = f"2026-01-{1 + count // 86_400:02d}T{count // 3600 % 24:02d}:"
        stamp += f"{count // 60 % 60:02d}:{count % 60:02d}.000Z"
        entry = {"type": "message", "id": entry_id, "parentId": parent, "timestamp": stamp}
        lines.append(json.dumps({**entry, "message": {**message, "timestamp": 0}}))
        count += 1
        return entry_id

    def tool_turn(parent: str | None, n: int, ask: str) -> tuple[str, str]:
        call = {"type": "toolCall", "id": f"c{n}", "name": "read", "arguments": {"path": f"{n}"}}
        asked = add(parent, {"role": "user", "content": f"{ask} {n}: read the file"})
        reply = add(asked, {"role": "assistant", "content": [call], "stopReason": "toolUse"})
        result = add(
            reply,
            {
                "role": "toolResult",
                "toolCallId": f"c{n}",
                "toolName": "read",
                "content": [{"type": "text", "text": f"contents of {n}"}],
                "isError": False,
            },
        )
        answer = [{"type": "text", "text": f"file {n} says what it says"}]
        return asked, add(result, {"role": "assistant", "content": answer, "stopReason": "stop"})

    spine: str | None = None
    turn = 0
    while count < entries:
        turn += 1
        asked, spine = tool_turn(spine, turn, "turn")
        if turn % side_every == 0 and count < entries:
            tool_turn(asked, turn, "instead, turn")  # a side branch leaving the question
    # The leaf at the end of the spine: its last entry written last.
    last = json.loads(lines[-1])
    if last["id"] != spine:
        add(spine, {"role": "user", "content": "and then"})
    return ("\n".join(lines) + "\n").encode()


def _tree_api(client: Any, session: Any) -> tuple[int, int]:
    """(bytes, pages) of the whole tree read through the API."""
    size = pages = 0
    cursor = ""
    while True:
        query = f"?limit={PAGE_ROWS}" + (f"&cursor={cursor}" if cursor else "")
        response = client.get(f"/api/sessions/{session.id}/tree{query}")
        assert response.status_code == 200, response.content[:200]
        size += len(response.content)
        pages += 1
        cursor = json.loads(response.content)["next_cursor"]
        if not cursor:
            return size, pages


def _first_tree_page(client: Any, session: Any) -> tuple[int, int]:
    response = client.get(f"/api/sessions/{session.id}/tree?limit={PAGE_ROWS}")
    assert response.status_code == 200
    return len(response.content), 1


def _tree_page(client: Any, session: Any) -> tuple[int, int]:
    response = client.get(f"/sessions/{session.id}/?tree=1")
    assert response.status_code == 200
    return len(response.content), 1


def _export(client: Any, session: Any) -> tuple[int, int]:
    response = client.get(f"/sessions/{session.id}/export.html")
    assert response.status_code == 200
    return sum(len(chunk) for chunk in response.streaming_content), 1


def _timed(
    runs: int, fetch: Callable[[Any, Any], tuple[int, int]], client: Any, session: Any
) -> tuple[float, float, int, int]:
    """(median seconds, median CPU seconds of this process, bytes, pages) of `runs` fetches.
    The server runs in this process, so its CPU time is the work done, whatever else the
    machine is busy with."""
    times: list[float] = []
    cpu: list[float] = []
    size = pages = 0
    for _ in range(runs):
        started, started_cpu = time.perf_counter(), time.process_time()
        size, pages = fetch(client, session)
        times.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
    return statistics.median(times), statistics.median(cpu), size, pages


def _export_memory(client: Any, session: Any) -> int:
    """How far the process's resident size rose above its start while one export streamed."""
    with resident_rise() as rise:
        _export(client, session)
    return rise()


def _export_allocations(client: Any, session: Any) -> int:
    """Python's allocation peak (tracemalloc) while one export streams: unlike the
    resident size, it starts afresh at each measure."""
    tracemalloc.start()
    try:
        _export(client, session)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _size(value: int) -> str:
    if value >= 1024 * 1024:
        return f"{value / 1024 / 1024:.1f} MB"
    return f"{value / 1024:.0f} KB"


def _seconds(value: float) -> str:
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.1f} s"


DOORS: dict[str, Callable[[Any, Any], tuple[int, int]]] = {
    "tree API, every page": _tree_api,
    "tree page (?tree=1)": _tree_page,
    "HTML export": _export,
}


def run(report: Report) -> None:
    from django.test import Client

    from bench import pages
    from sessions_app import services
    from sessions_app.models import Entry
    from sessions_app.services import pi_io

    owner = services.user_get_or_create_local(username="bench")
    client = Client(SERVER_NAME="127.0.0.1")
    client.force_login(owner)
    per_entry: dict[str, dict[int, float]] = {door: {} for door in DOORS}
    for entries in COMBS:
        data = comb_file(entries)
        session = pi_io.pi_import(
            source=io.BytesIO(data), owner=owner, name=f"comb {entries}"
        ).session
        for door, fetch in DOORS.items():
            took, cpu, size, pages_read = _timed(RUNS, fetch, client, session)
            per_entry[door][entries] = size / entries
            largest = entries == COMBS[-1]
            target = "< 16 MB, < 10 s" if largest else ""
            verdict = ("met" if size < TARGET_BYTES and took < 10 else "NOT met") if largest else ""
            note = f"CPU {_seconds(cpu)}; {size / entries:,.0f} B per entry"
            if pages_read > 1:
                note += f", {pages_read} pages"
            if door == "HTML export":
                note += f", file {len(data) / 1024:,.0f} KB"
            report.add(
                Row(
                    "trees",
                    f"{door}, comb of {entries:,} entries",
                    f"{_seconds(took)}, {_size(size)}",
                    target,
                    verdict,
                    note,
                )
            )
        if entries == COMBS[-1]:
            grown = _export_memory(client, session)
            report.add(Row("trees", f"HTML export memory, comb of {entries:,}", f"+{_size(grown)}"))
    for door, sizes in per_entry.items():
        ratio = sizes[COMBS[-1]] / sizes[COMBS[0]]
        report.add(
            Row(
                "trees",
                f"{door}: bytes per entry, {COMBS[-1]:,} vs {COMBS[0]:,} entries",
                f"{ratio:.2f}×",
                "≤ 1.1× (flat)",
                "met" if ratio <= 1.1 else "NOT met",
            )
        )

    session = pages.build(owner, LARGE_EVENTS)
    events = session.last_seq + 1
    entries = Entry.objects.filter(session=session).count()
    # Before any other read of this session: the resident size keeps its highest mark, so
    # an export measured after another would show only what it adds above that one's.
    grown = _export_memory(client, session)
    report.add(Row("trees", f"HTML export memory, {events:,} events", f"+{_size(grown)}"))
    peak = _export_allocations(client, session)
    report.add(
        Row("trees", f"HTML export, Python's allocation peak, {events:,} events", _size(peak))
    )
    large: dict[str, Callable[[Any, Any], tuple[int, int]]] = {
        "tree API, first page": _first_tree_page,
        **DOORS,
    }
    for door, fetch in large.items():
        took, cpu, size, pages_read = _timed(1, fetch, client, session)
        note = f"CPU {_seconds(cpu)}; {entries:,} entries, {size / entries:,.0f} B per entry"
        if pages_read > 1:
            note += f", {pages_read} pages"
        report.add(
            Row(
                "trees",
                f"{door}, {events:,} events",
                f"{_seconds(took)}, {_size(size)}",
                note=note,
            )
        )
        print(f"    {note}", flush=True)
