"""The OTLP export behind a sustained 1,000 events/s.

A collector of our own (a local HTTP server that reads each OTLP/HTTP protobuf body, gzip,
and counts its spans and their ids) stands where a tracing backend would. `manage.py project`
runs in a process of its own with `STRAND_OTLP_ENDPOINT` pointing at it, so it projects
search, usage and the export of every turn, as a server's projector does.

One writer appends whole turns of 11 events (turn/start, the user's message, a step with a
request answered by a tool call, the call and its result, a second request answered with
text, step/end, turn/end: 4 spans a turn, the requests rebuilt from their header and kept
window), round-robin over 20 sessions, paced to 1,000 events a second for DURATION_S. The
turns are made before the writer starts, each request's manifest with the hash of the payload
its context gives, so `verify --requests` holds over these sessions as over the runtime's.
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
# The turns the writer can reach at its pace, and a tenth more.
TURNS_PLANNED = RATE * DURATION_S * 11 // (10 * EVENTS_PER_TURN)


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
    _file_export(report)


def _lag(report: Report) -> None:
    from sessions_app import services, store
    from sessions_app.projectors import projector_lag
    from sessions_app.store import NewEvent
    from tests.sessions_app.audit_data import HEADER

    owner = services.user_get_or_create_local(username="bench-otlp")
    sessions = []
    chains: list[TurnChain] = []
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
        sessions.append(session)
        chains.append(TurnChain(header_seq))
    seqs = {s.id: s.last_seq for s in sessions}
    rng = random.Random(14)
    texts = [text_payload(rng, 300, 4000) for _ in range(200)]
    # Every turn the writer may need, made before it starts: each request's hash is that of
    # the payload built from its leaf's context, as the runtime's is, which costs the
    # writer's pace too much to do between appends.
    planned = []
    for n in range(TURNS_PLANNED):
        chain = chains[n % SESSIONS]
        planned.append((sessions[n % SESSIONS], chain.turn(texts[n % 200])))
    done = threading.Event()
    written = [0]
    turns = [0]
    started_at = datetime.now(UTC)

    def write() -> None:
        from django.db import connection

        started = time.perf_counter()
        while not done.is_set() and turns[0] < len(planned):
            session, events = planned[turns[0]]
            seqs[session.id] = store.append_events(session.id, seqs[session.id], events).last_seq
            turns[0] += 1
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
    total_turns = turns[0]
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


class TurnChain:
    """One session's conversation as the writer appends it: a line of tool turns, each
    request's manifest naming its leaf and the hash of the payload built from that leaf's
    context (`build_context_from_window` over the path, as `verify` rebuilds it)."""

    def __init__(self, header_seq: int, *, hashed: bool = True) -> None:
        self.header_seq = header_seq
        # Else each manifest's hash is zeros (for sessions nothing verifies: deleted after).
        self.hashed = hashed
        self.number = 0
        self.path: list[Any] = []
        self.model: Any = None

    def turn(self, text: str) -> list[Any]:
        from sessions_app.store import NewEvent

        self.number += 1
        turn = self.number
        user, asked, result, answer = (f"{kind}{turn:07x}" for kind in "uatb")
        call = f"call_{turn}"
        usage = {"input": 120, "output": 30, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 150}

        def event(kind: str, data: dict[str, Any]) -> Any:
            return NewEvent(kind, data, turn=turn, step=0)

        def reply(entry_id: str, content: list[Any], stop: str) -> Any:
            message = {
                "role": "assistant",
                "content": content,
                "provider": "openai",
                "model": "gpt-bench",
                "usage": usage,
                "stopReason": stop,
            }
            entry = self._entry(entry_id, {"message": message}, model=True)
            return event("assistant/message", {"entry": entry, "timing": {"duration_ms": 40}})

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
            event(
                "user/message",
                {"entry": self._entry(user, {"message": {"role": "user", "content": text}})},
            ),
            NewEvent("step/start", {"turn": turn, "step": 0}),
            event("request/sent", self._manifest()),
            reply(asked, [tool_call], "toolUse"),
            event("tool/call", {"call_id": call, "tool": "read", "arguments": '{"path":"a.txt"}'}),
            event("tool/result", {"entry": self._entry(result, {"message": tool_result})}),
            event("request/sent", self._manifest()),
            reply(answer, [{"type": "text", "text": "done"}], "stop"),
            NewEvent("step/end", {"turn": turn, "step": 0, "reason": "completed"}),
            NewEvent("turn/end", {"turn": turn, "reason": "completed"}),
        ]

    def _entry(self, entry_id: str, rest: dict[str, Any], model: bool = False) -> dict[str, Any]:
        from projections.records import EntryRecord

        parent = self.path[-1].id if self.path else None
        stamp = f"2026-06-01T00:00:{len(self.path) % 60:02d}.000Z"
        entry = {"type": "message", "id": entry_id, "parentId": parent, "timestamp": stamp}
        entry.update(rest)
        record = EntryRecord(entry_id, parent, "message", stamp, entry, 0)
        self.path.append(record)
        if model:
            self.model = record
        return entry

    def _manifest(self) -> dict[str, Any]:
        from projections.context import (
            PathSettings,
            build_context_from_window,
            to_provider_messages,
        )
        from projections.payload import build_payload, payload_sha256
        from tests.sessions_app.audit_data import HEADER

        digest = "0" * 64  # not the payload's: `hashed` is off
        if self.hashed:
            settings = PathSettings(thinking=None, model=self.model, compaction=None)
            context = build_context_from_window(self.path, settings)
            payload = build_payload(
                provider=HEADER["provider"],
                model=HEADER["model"],
                params=HEADER["params"],
                system_prompt=HEADER["system_prompt"],
                tools=HEADER["tools"],
                messages=to_provider_messages(context.messages),
            )
            digest = payload_sha256(payload)
        return {
            "header_seq": self.header_seq,
            "leaf_entry_id": self.path[-1].id,
            "payload_sha256": digest,
            "token_estimate": 10,
            "attempt": 1,
        }


FILE_TURNS = (500, 2000)


def _file_export(report: Report) -> None:
    """The OTLP file (`export.otlp.json`'s chunks, read in this process) of one session of
    each length in `FILE_TURNS`, its turns those of the lag's writer: the time per turn
    should not grow with the session (each request's input is folded on from the last).
    Their requests' hashes are zeros (hashing each payload of a long session whole would
    cost the writing more than the export), so the sessions are deleted once measured,
    before the audit's `verify --requests` could find them."""
    from django.conf import settings

    from sessions_app import services, store
    from sessions_app.selectors.otel import otlp_export_chunks
    from sessions_app.store import NewEvent
    from tests.sessions_app.audit_data import HEADER

    owner = services.user_get_or_create_local(username="bench-otlp-file")
    rng = random.Random(15)
    texts = [text_payload(rng, 300, 4000) for _ in range(200)]
    per_turn: dict[int, float] = {}
    for turns in FILE_TURNS:
        session = services.session_create(owner=owner, title=f"otlp file {turns}", cwd="")
        session.refresh_from_db()
        header = NewEvent("request/header", {"reason": "initial", **HEADER}, turn=0, step=0)
        last = store.append_events(session.id, session.last_seq, [header]).last_seq
        chain = TurnChain(last, hashed=False)
        for n in range(turns):
            last = store.append_events(session.id, last, chain.turn(texts[n % 200])).last_seq
        session.refresh_from_db()
        started, cpu = time.perf_counter(), time.process_time()
        size = sum(
            len(chunk.encode())
            for chunk in otlp_export_chunks(
                session,
                leaf=None,
                capture_content=True,
                max_chars=settings.STRAND_OTLP_ATTRIBUTE_CHARS,
            )
        )
        took, cpu = time.perf_counter() - started, time.process_time() - cpu
        per_turn[turns] = took / turns
        services.session_delete(session=session, by=owner)
        report.add(
            Row(
                "otlp export",
                f"file export (export.otlp.json), a session of {turns:,} tool turns",
                f"{took:.2f} s, {size / 1e6:.1f} MB",
                note=f"read in this process; CPU {cpu:.2f} s; {4 * turns:,} spans",
            )
        )
    short, long = FILE_TURNS
    report.add(
        Row(
            "otlp export",
            f"file export: time per turn, {long:,} vs {short:,} turns",
            f"{per_turn[long] / per_turn[short]:.2f}×",
            note="an input past STRAND_OTLP_ATTRIBUTE_CHARS is left out of its span",
        )
    )
    for row in report.rows[-3:]:
        print(f"  {row.name}: {row.value} ({row.note})", flush=True)
