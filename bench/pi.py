"""Pi files: import time, and context build time for the latest leaf, at two session sizes;
then Pi's own open + buildSessionContext of the same 2,000-entry file in Node.

The generated sessions are linear conversations (user, assistant with a tool call, tool
result, assistant) with a compaction every 200 entries that keeps the last ~40, a model or
thinking-level change now and then, and a short side branch every 500 entries. Message
text is 100 B–1.5 KB, so the 2,000-entry file is about the size of the one Pi's own
figures were measured on (1.7 MB).
"""

from __future__ import annotations

import json
import random
import statistics
import subprocess
import time
from functools import partial
from pathlib import Path
from typing import Any

from bench.common import RESULTS, ROOT, Report, Row, resident_rise, text_payload

SIZES = (2_000, 100_000)
CONTEXT_RUNS = 30
PI_DIR = ROOT / "tests" / "fixtures" / "pi"


def generate(
    target: Path,
    size: int,
    seed: int = 7,
    side_every: int = 500,
    result_chars: tuple[int, int] = (200, 1500),
) -> None:
    """A Pi v3 file of `size` entries or a few more (see the module's docstring); a side
    branch every `side_every` entries, tool results of `result_chars` characters."""
    rng = random.Random(seed)
    target.unlink(missing_ok=True)
    t0 = 1_767_225_600_000  # 2026-01-01
    lines = [
        {
            "type": "session",
            "version": 3,
            "id": f"bench-{size}",
            "timestamp": "2026-01-01T00:00:00.000Z",
            "cwd": "/bench",
        }
    ]
    ids: list[str] = []
    parent: str | None = None

    def add(entry: dict[str, Any], parent_id: str | None) -> str:
        n = len(ids)
        entry_id = f"{n:08x}"
        ms = t0 + n * 1000
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms / 1000)) + ".000Z"
        lines.append(
            {
                "type": entry.pop("type"),
                "id": entry_id,
                "parentId": parent_id,
                "timestamp": stamp,
                **entry,
            }
        )
        ids.append(entry_id)
        return entry_id

    usage = {
        "input": 900,
        "output": 120,
        "cacheRead": 0,
        "cacheWrite": 0,
        "totalTokens": 1020,
        "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0},
    }
    turn = 0
    since_compaction = 0
    main_line: list[str] = []  # the conversation's own path, to keep entries from
    while len(ids) < size:
        n = len(ids)
        if since_compaction >= 200:
            since_compaction = 0
            parent = add(
                {
                    "type": "compaction",
                    "summary": text_payload(rng, 200, 800),
                    "firstKeptEntryId": main_line[-40],
                    "tokensBefore": 40_000,
                },
                parent,
            )
            main_line.append(parent)
            continue
        if n and n % side_every == 7:
            side = add(
                {"type": "message", "message": {"role": "user", "content": "a side question"}},
                ids[-5],
            )
            add(
                {"type": "branch_summary", "fromId": side, "summary": "explored a side question"},
                side,
            )
            continue
        if n % 97 == 3:
            parent = add(
                {"type": "thinking_level_change", "thinkingLevel": rng.choice(["low", "high"])},
                parent,
            )
            main_line.append(parent)
            continue
        turn += 1
        call = {
            "type": "toolCall",
            "id": f"call{turn}",
            "name": "read_file",
            "arguments": {"path": f"src/{turn}.py"},
        }
        parent = add(
            {
                "type": "message",
                "message": {
                    "role": "user",
                    "content": text_payload(rng, 100, 600),
                    "timestamp": t0,
                },
            },
            parent,
        )
        parent = add(
            {
                "type": "message",
                "message": {
                    "role": "assistant",
                    "content": [{"type": "text", "text": text_payload(rng, 100, 800)}, call],
                    "api": "openai-completions",
                    "provider": "openai",
                    "model": "gpt-5",
                    "usage": usage,
                    "stopReason": "toolUse",
                    "timestamp": t0,
                },
            },
            parent,
        )
        parent = add(
            {
                "type": "message",
                "message": {
                    "role": "toolResult",
                    "toolCallId": f"call{turn}",
                    "toolName": "read_file",
                    "content": [{"type": "text", "text": text_payload(rng, *result_chars)}],
                    "isError": False,
                    "timestamp": t0,
                },
            },
            parent,
        )
        parent = add(
            {
                "type": "message",
                "message": {
                    "role": "assistant",
                    "content": [{"type": "text", "text": text_payload(rng, 100, 600)}],
                    "api": "openai-completions",
                    "provider": "openai",
                    "model": "gpt-5",
                    "usage": usage,
                    "stopReason": "stop",
                    "timestamp": t0,
                },
            },
            parent,
        )
        main_line.extend(ids[-4:])
        since_compaction += 4
        if len(lines) > 10_000:
            _write(target, lines)
            lines = []
    _write(target, lines)


def _write(target: Path, lines: list[dict[str, Any]]) -> None:
    with target.open("a", encoding="utf-8") as out:
        for line in lines:
            out.write(json.dumps(line, separators=(",", ":")) + "\n")


def run(report: Report) -> None:
    from sessions_app import selectors, services
    from sessions_app.services import pi_io

    owner = services.user_get_or_create_local(username="bench")
    RESULTS.mkdir(parents=True, exist_ok=True)
    context_ms: dict[int, float] = {}
    files: dict[int, Path] = {}
    for size in SIZES:
        path = RESULTS / f"pi-{size}.jsonl"
        if not path.exists():
            generate(path, size)
        files[size] = path
        started = time.perf_counter()
        with path.open("rb") as source:
            session = pi_io.pi_import(source=source, owner=owner, name=path.stem).session
        imported = time.perf_counter() - started
        lengths = []
        timings = []
        for _ in range(3):
            selectors.session_context(session)  # warm-up
        for _ in range(CONTEXT_RUNS):
            t = time.perf_counter()
            context = selectors.session_context(session)
            timings.append((time.perf_counter() - t) * 1000)
            lengths.append(len(context.messages))
        context_ms[size] = statistics.median(timings)
        mb = path.stat().st_size / 1e6
        report.add(
            Row(
                "pi files",
                f"import, {size:,} entries ({mb:.1f} MB)",
                f"{imported:.2f} s ({size / imported:,.0f} entries/s)",
            ),
            Row(
                "pi files",
                f"context of the latest leaf, {size:,} entries ({lengths[0]} messages)",
                f"{context_ms[size]:.2f} ms",
            ),
        )
    growth = context_ms[SIZES[1]] / context_ms[SIZES[0]]
    report.add(
        Row(
            "pi files",
            "context time, 100,000 vs 2,000 entries",
            f"{growth:.2f}×",
            "≤ 2×",
            "met" if growth <= 2 else "NOT met",
        )
    )
    pi_ms = _pi_open_and_build(files[SIZES[0]])
    if pi_ms is None:
        report.add(
            Row(
                "pi files",
                "Pi open + buildSessionContext, 2,000 entries",
                "not measured",
                note="node or npm missing",
            )
        )
        return
    speedup = pi_ms / context_ms[SIZES[0]]
    report.add(
        Row(
            "pi files",
            "Pi 0.73.1 open + buildSessionContext, 2,000 entries (Node)",
            f"{pi_ms:.2f} ms",
        ),
        Row(
            "pi files",
            "Strand context vs Pi open + build, 2,000 entries",
            f"{speedup:.1f}× faster",
            "≥ 2×",
            "met" if speedup >= 2 else "NOT met",
        ),
    )


# Branchy files (a spine of tool turns with a side branch every 50 entries) that the
# import and both exports are measured on, beside Pi's own HTML export of the same file; and
# a file of about 500 MB (tool results of 30–60 KB) whose import's memory is measured.
BRANCHY = (24_000, 100_000)
LARGE_FILE_ENTRIES = 44_000
LARGE_RESULT_CHARS = (30_000, 60_000)


def run_files(report: Report) -> None:
    """Import rate and peak memory, and the HTML and Pi exports' time and bytes beside Pi
    0.73.1's `exportFromFile` of the same file: read in this process, and downloaded from
    one daphne process with a signed-in cookie (the time set against Pi's)."""
    import requests
    from django.conf import settings
    from django.test import Client

    from deploy import daphne
    from deploy.daphne import free_port
    from sessions_app import services

    owner = services.user_get_or_create_local(username="bench")
    RESULTS.mkdir(parents=True, exist_ok=True)
    signed_in = Client()
    signed_in.force_login(owner)
    http = requests.Session()
    http.cookies.set(
        settings.SESSION_COOKIE_NAME, signed_in.cookies[settings.SESSION_COOKIE_NAME].value
    )
    server = daphne.start(port := free_port(), {"STRAND_RECOVER_AT_START": "0"})
    try:
        _files(report, owner, http, f"http://127.0.0.1:{port}")
    finally:
        daphne.stop(server)


def _files(report: Report, owner: Any, http: Any, base: str) -> None:
    from sessions_app.services import pi_io
    from sessions_app.web import html_export

    for size in BRANCHY:
        path = RESULTS / f"pi-branchy-{size}.jsonl"
        if not path.exists():
            generate(path, size, side_every=50)
        entries = _lines(path) - 1
        mb = path.stat().st_size / 1e6
        session, took, grown = _import(pi_io, path, owner)
        report.add(
            Row(
                "pi files",
                f"import, branchy file of {entries:,} entries ({mb:.1f} MB)",
                f"{took:.2f} s ({entries / took:,.0f} entries/s)",
                "≥ 15,000 entries/s",
                "met" if entries / took >= 15_000 else "NOT met",
                f"resident memory +{grown / 1e6:.0f} MB while it ran",
            )
        )
        html_s, html_bytes, html_cpu = _drain(partial(html_export.export_html, session))
        pi_s, pi_bytes, pi_cpu = _drain(partial(pi_io.pi_export_lines, session))
        page = f"{base}/sessions/{session.id}"
        _download(http, f"{page}/export.html")  # a warm process
        served_html_s, served_html_bytes = _download(http, f"{page}/export.html")
        served_pi_s, served_pi_bytes = _download(http, f"{page}/export.jsonl")
        theirs = _pi_export(path)
        report.add(
            Row(
                "pi files",
                f"HTML export, branchy file of {entries:,} entries",
                f"{html_s:.2f} s, {html_bytes / 1e6:.1f} MB",
                note=f"read in this process; CPU {html_cpu:.2f} s",
            ),
            Row(
                "pi files",
                f"Pi export (JSONL), branchy file of {entries:,} entries",
                f"{pi_s:.2f} s, {pi_bytes / 1e6:.1f} MB",
                note=f"read in this process; CPU {pi_cpu:.2f} s; {pi_bytes / 1e6 / pi_s:.0f} MB/s",
            ),
            Row(
                "pi files",
                f"HTML export through daphne, branchy file of {entries:,} entries",
                f"{served_html_s:.2f} s, {served_html_bytes / 1e6:.1f} MB",
                note="downloaded over loopback, to the last byte",
            ),
            Row(
                "pi files",
                f"Pi export (JSONL) through daphne, branchy file of {entries:,} entries",
                f"{served_pi_s:.2f} s, {served_pi_bytes / 1e6:.1f} MB",
                note=f"{served_pi_bytes / 1e6 / served_pi_s:.0f} MB/s",
            ),
        )
        html_s, html_bytes = served_html_s, served_html_bytes
        if theirs is None:
            report.add(Row("pi files", "Pi 0.73.1 exportFromFile", "not measured", note="no node"))
            continue
        pi_ms, pi_html_bytes = theirs
        time_ratio = html_s / (pi_ms / 1000)
        byte_ratio = html_bytes / pi_html_bytes
        report.add(
            Row(
                "pi files",
                f"Pi 0.73.1 exportFromFile, the same {entries:,} entries (Node)",
                f"{pi_ms / 1000:.2f} s, {pi_html_bytes / 1e6:.1f} MB",
            ),
            Row(
                "pi files",
                f"HTML export vs Pi's, {entries:,} entries: time",
                f"{time_ratio:.2f}×",
                "≤ 2×",
                "met" if time_ratio <= 2 else "NOT met",
            ),
            Row(
                "pi files",
                f"HTML export vs Pi's, {entries:,} entries: bytes",
                f"{byte_ratio:.2f}×",
                "≤ 1.5×",
                "met" if byte_ratio <= 1.5 else "NOT met",
            ),
        )
    path = RESULTS / "pi-large.jsonl"
    if not path.exists():
        generate(path, LARGE_FILE_ENTRIES, side_every=50, result_chars=LARGE_RESULT_CHARS)
    entries = _lines(path) - 1
    _, took, grown = _import(pi_io, path, owner)
    report.add(
        Row(
            "pi files",
            f"import, file of {path.stat().st_size / 1e6:,.0f} MB ({entries:,} entries)",
            f"{took:.1f} s ({entries / took:,.0f} entries/s, "
            f"{path.stat().st_size / 1e6 / took:.0f} MB/s)",
            "bounded memory",
            "met" if grown < 200e6 else "NOT met",
            f"resident memory +{grown / 1e6:.0f} MB while it ran",
        )
    )


def _lines(path: Path) -> int:
    with path.open("rb") as source:
        return sum(1 for _ in source)


def _import(pi_io: Any, path: Path, owner: Any) -> tuple[Any, float, int]:
    """(session, seconds, rise of the resident size) of one import."""
    with resident_rise() as rise:
        started = time.perf_counter()
        with path.open("rb") as source:
            session = pi_io.pi_import(source=source, owner=owner, name=path.stem).session
        took = time.perf_counter() - started
    return session, took, rise()


def _drain(make: Any) -> tuple[float, int, float]:
    """(seconds, UTF-8 bytes, CPU seconds) of reading an export's chunks to the end."""
    started, cpu = time.perf_counter(), time.process_time()
    size = sum(len(chunk.encode()) for chunk in make())
    return time.perf_counter() - started, size, time.process_time() - cpu


def _download(http: Any, url: str) -> tuple[float, int]:
    """(seconds, bytes) of downloading `url` to its last byte."""
    started = time.perf_counter()
    with http.get(url, stream=True, timeout=600) as response:
        response.raise_for_status()
        size = sum(len(piece) for piece in response.iter_content(256 * 1024))
    return time.perf_counter() - started, size


def _pi_export(path: Path) -> tuple[float, int] | None:
    """(median ms, bytes) of Pi's own `exportFromFile` of `path` (tests/fixtures/pi/export.mjs)."""
    try:
        out = subprocess.run(
            ["node", "export.mjs", str(path), "--runs", "3"],
            cwd=PI_DIR,
            capture_output=True,
            text=True,
            check=True,
            timeout=900,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    found = json.loads(out.strip().splitlines()[-1])
    return float(found["median_ms"]), int(found["bytes"])


def _pi_open_and_build(path: Path) -> float | None:
    try:
        if not (PI_DIR / "node_modules" / "@mariozechner" / "pi-coding-agent").exists():
            subprocess.run(
                ["npm", "ci", "--no-audit", "--no-fund", "--silent"], cwd=PI_DIR, check=True
            )
        out = subprocess.run(
            ["node", "bench.mjs", str(path), "--runs", "30"],
            cwd=PI_DIR,
            capture_output=True,
            text=True,
            check=True,
            timeout=600,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return float(json.loads(out.strip().splitlines()[-1])["median_ms"])
