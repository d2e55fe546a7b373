"""The OTLP export behind a sustained 1,000 events/s.

A collector of our own (a local HTTP server that reads each OTLP/HTTP protobuf body, gzip,
and counts its spans and their ids) stands where a tracing backend would. `manage.py project`
runs in a process of its own with `STRAND_OTLP_ENDPOINT` pointing at it, so it projects
search, usage and the export of every turn, as a server's projector does.

One writer appends whole turns of 11 events (turn/start, the user's message, a step with a
request answered by a tool call, the call and its result, a second request answered with
text, step/end, turn/end: 4 spans a turn, the requests rebuilt from their header and kept
window), round-robin over 20 sessions, paced to 1,000 events a second for DURATION_S.
`projector_lag("otlp")` is read every half second. The figures: the writer's achieved rate,
the median and maximum of the events not exported yet and of the age of the oldest of them,
and that the collector received each span once.

Run alone: `python -m bench otlp` (the benchmark database, `strand_bench`).
"""

from __future__ import annotations

import gzip
import os
import random
import statistics
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from bench.common import ROOT, Report, Row, text_payload

RATE = 1000
SESSIONS = 20
DURATION_S = 30
PORT = 26_790
EVENTS_PER_TURN = 11


class _Collector(BaseHTTPRequestHandler):
    spans: list[bytes] = []
    lock = threading.Lock()

    def do_POST(self) -> None:  # noqa: N802 - the handler's name
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )

        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        message = ExportTraceServiceRequest.FromString(body)
        ids = [
            s.span_id for rs in message.resource_spans for ss in rs.scope_spans for s in ss.spans
        ]
        with self.lock:
            self.spans.extend(ids)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def run(report: Report) -> None:
    from django.conf import settings

    from sessions_app.projectors import project_pending

    collector = ThreadingHTTPServer(("127.0.0.1", PORT), _Collector)
    threading.Thread(target=collector.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{PORT}/v1/traces"
    settings.STRAND_OTLP_ENDPOINT = endpoint
    project_pending()  # what earlier suites wrote, so the projector starts level
    projector = subprocess.Popen(
        [sys.executable, "manage.py", "project"],
        cwd=ROOT,
        env={**os.environ, "STRAND_OTLP_ENDPOINT": endpoint},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _lag(report)
    finally:
        projector.terminate()
        try:
            projector.wait(10)
        except subprocess.TimeoutExpired:
            projector.kill()
            projector.wait(10)
        collector.shutdown()


def _lag(report: Report) -> None:
    from projections.payload import build_payload, payload_sha256
    from sessions_app import services, store
    from sessions_app.projectors import projector_lag
    from sessions_app.store import NewEvent
    from tests.sessions_app.audit_data import HEADER

    owner = services.user_get_or_create_local(username="bench-otlp")
    sessions = []
    for n in range(SESSIONS):
        session = services.session_create(owner=owner, title=f"bench otlp {n}", cwd="")
        session.refresh_from_db()
        header_seq = session.last_seq + 1
        store.append_events(
            session.id,
            session.last_seq,
            [NewEvent("request/header", {"reason": "initial", **HEADER}, turn=0, step=0)],
        )
        session.refresh_from_db()
        sessions.append((session, header_seq))
    seqs = {s.id: s.last_seq for s, _ in sessions}
    turns = dict.fromkeys(seqs, 0)
    rng = random.Random(14)
    texts = [text_payload(rng, 300, 4000) for _ in range(200)]
    sha = payload_sha256(
        build_payload(
            provider=HEADER["provider"],
            model=HEADER["model"],
            params=HEADER["params"],
            system_prompt=HEADER["system_prompt"],
            tools=HEADER["tools"],
            messages=[],
        )
    )
    done = threading.Event()
    written = [0]
    started_at = datetime.now(UTC)

    def write() -> None:
        from django.db import connection

        started = time.perf_counter()
        n = 0
        while not done.is_set():
            session, header_seq = sessions[n % SESSIONS]
            turns[session.id] += 1
            events = _turn(turns[session.id], texts[n % 200], header_seq, sha)
            seqs[session.id] = store.append_events(session.id, seqs[session.id], events).last_seq
            n += 1
            written[0] += len(events)
            pause = started + written[0] / RATE - time.perf_counter()
            if pause > 0:
                time.sleep(pause)
        connection.close()

    _Collector.spans.clear()
    writer = threading.Thread(target=write)
    behind: list[int] = []
    ages: list[float] = []
    started = time.perf_counter()
    writer.start()
    try:
        while time.perf_counter() - started < DURATION_S:
            time.sleep(0.5)
            lag = projector_lag("otlp")
            behind.append(lag.events)
            ages.append(
                (datetime.now(UTC) - lag.oldest).total_seconds() * 1000 if lag.oldest else 0.0
            )
    finally:
        done.set()
        writer.join()
    took = time.perf_counter() - started
    rate = written[0] / took
    # Until the projector has caught up: every turn written exported, once.
    deadline = time.monotonic() + 120
    while projector_lag("otlp").events and time.monotonic() < deadline:
        time.sleep(0.2)
    caught_up = (datetime.now(UTC) - started_at).total_seconds() - took
    total_turns = sum(turns.values())
    with _Collector.lock:
        received = list(_Collector.spans)
    report.add(
        Row(
            "otlp export",
            f"lag behind a writer paced to {RATE:,} events/s ({EVENTS_PER_TURN}-event turns) "
            f"for {DURATION_S} s: events not exported",
            f"median {statistics.median(behind):.0f}, max {max(behind)}",
            note=f"writer achieved {rate:,.0f} events/s; load {os.getloadavg()[0]:.1f}",
        ),
        Row(
            "otlp export",
            "the same: age of the oldest event not exported",
            f"median {statistics.median(ages):.0f} ms, max {max(ages):.0f} ms",
            note=f"{len(behind)} samples; caught up {caught_up:.1f} s after the writer stopped",
        ),
        Row(
            "otlp export",
            "spans the collector received",
            f"{len(received):,} ({len(set(received)):,} distinct)",
            note=f"{total_turns:,} turns written, 4 spans each: {4 * total_turns:,}",
        ),
    )
    for row in report.rows[-3:]:
        print(f"  {row.name}: {row.value} ({row.note})", flush=True)


def _turn(turn: int, text: str, header_seq: int, sha: str) -> list[Any]:
    from sessions_app.store import NewEvent

    user, asked, result, answer = (f"{kind}{turn:07x}" for kind in "uatb")
    call = f"call_{turn}"
    usage = {"input": 120, "output": 30, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 150}

    def sent(leaf: str) -> Any:
        data = {"header_seq": header_seq, "leaf_entry_id": leaf, "payload_sha256": sha}
        return NewEvent(
            "request/sent", {**data, "token_estimate": 10, "attempt": 1}, turn=turn, step=0
        )

    def reply(entry_id: str, content: list[Any], stop: str) -> Any:
        message = {
            "role": "assistant",
            "content": content,
            "provider": "openai",
            "model": "gpt-bench",
            "usage": usage,
            "stopReason": stop,
        }
        data = {"entry": {"type": "message", "id": entry_id, "message": message}}
        return NewEvent(
            "assistant/message", {**data, "timing": {"duration_ms": 40}}, turn=turn, step=0
        )

    tool_call = {"type": "toolCall", "id": call, "name": "read", "arguments": {"path": "a.txt"}}
    tool_result = {
        "role": "toolResult",
        "toolCallId": call,
        "toolName": "read",
        "content": [{"type": "text", "text": text[:200]}],
        "isError": False,
    }
    return [
        NewEvent("turn/start", {"turn": turn, "trigger": "message"}),
        NewEvent(
            "user/message",
            {
                "entry": {
                    "type": "message",
                    "id": user,
                    "message": {"role": "user", "content": text},
                }
            },
            turn=turn,
            step=0,
        ),
        NewEvent("step/start", {"turn": turn, "step": 0}),
        sent(user),
        reply(asked, [tool_call], "toolUse"),
        NewEvent(
            "tool/call",
            {"call_id": call, "tool": "read", "arguments": '{"path":"a.txt"}'},
            turn=turn,
            step=0,
        ),
        NewEvent(
            "tool/result",
            {"entry": {"type": "message", "id": result, "message": tool_result}},
            turn=turn,
            step=0,
        ),
        sent(result),
        reply(answer, [{"type": "text", "text": "done"}], "stop"),
        NewEvent("step/end", {"turn": turn, "step": 0, "reason": "completed"}),
        NewEvent("turn/end", {"turn": turn, "reason": "completed"}),
    ]
