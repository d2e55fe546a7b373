"""Server time and HTML size of the session page and each view, at 1,000 and 100,000 events.

The sessions are written through `append_events` as the runtime writes them: per turn
`turn/start`, the user message, two steps (request header when it changes, `request/sent`,
the assistant message, a tool call and its result in the first step), `turn/end`; a
compaction every 200 entries. Pages are fetched in-process with Django's test client as the
session's owner (the full middleware, view and template stack; no network); the value is
the median of 5 fetches after one warm-up.
"""

from __future__ import annotations

import random
import statistics
import time
from typing import Any

from bench.common import Report, Row, text_payload

SIZES = (1_000, 100_000)
RUNS = 5
ZERO = "0" * 64


def _turn(turn: int, rng: random.Random, header: bool) -> list[Any]:
    from sessions_app.store import NewEvent

    usage = {
        "input": 900,
        "output": 120,
        "cacheRead": 0,
        "cacheWrite": 0,
        "totalTokens": 1020,
        "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0},
    }
    call_id = f"call_{turn}"

    def message(role: str, **fields: Any) -> dict[str, Any]:
        return {"entry": {"type": "message", "message": {"role": role, **fields}}}

    def assistant(content: list[Any], stop: str) -> dict[str, Any]:
        return message(
            "assistant",
            content=content,
            api="offline",
            provider="offline",
            model="strand-offline-1",
            usage=usage,
            stopReason=stop,
            timestamp=0,
        )

    events = [
        NewEvent("turn/start", {"turn": turn}),
        NewEvent(
            "user/message",
            message("user", content=text_payload(rng, 60, 400), timestamp=0),
            turn=turn,
        ),
    ]
    for step in (1, 2):
        events.append(NewEvent("step/start", {"turn": turn, "step": step}))
        if header and step == 1:
            events.append(
                NewEvent(
                    "request/header",
                    {
                        "reason": "initial",
                        "provider": "offline",
                        "model": "strand-offline-1",
                        "system_prompt": "You are helpful.",
                        "tools": [],
                    },
                    turn=turn,
                    step=step,
                )
            )
        events.append(
            NewEvent(
                "request/sent",
                {
                    "header_seq": 0,
                    "leaf_entry_id": None,
                    "payload_sha256": ZERO,
                    "token_estimate": 1000,
                },
                turn=turn,
                step=step,
            )
        )
        if step == 1:
            call = {
                "type": "toolCall",
                "id": call_id,
                "name": "read_file",
                "arguments": {"path": "a.py"},
            }
            events.append(
                NewEvent(
                    "assistant/message",
                    {
                        **assistant(
                            [{"type": "text", "text": text_payload(rng, 60, 300)}, call], "toolUse"
                        ),
                        "timing": {"ttft_ms": 20, "duration_ms": 200},
                    },
                    turn=turn,
                    step=step,
                )
            )
            events.append(
                NewEvent(
                    "tool/call",
                    {"call_id": call_id, "tool": "read_file", "arguments": "{}"},
                    turn=turn,
                    step=step,
                )
            )
            events.append(
                NewEvent(
                    "tool/result",
                    message(
                        "toolResult",
                        toolCallId=call_id,
                        toolName="read_file",
                        content=[{"type": "text", "text": text_payload(rng, 100, 800)}],
                        isError=False,
                        timestamp=0,
                    ),
                    turn=turn,
                    step=step,
                )
            )
        else:
            events.append(
                NewEvent(
                    "assistant/message",
                    {
                        **assistant([{"type": "text", "text": text_payload(rng, 60, 400)}], "stop"),
                        "timing": {"ttft_ms": 20, "duration_ms": 200},
                    },
                    turn=turn,
                    step=step,
                )
            )
        events.append(NewEvent("step/end", {"turn": turn, "step": step}))
    events.append(NewEvent("turn/end", {"turn": turn, "reason": "completed"}))
    return events


def build(owner: Any, size: int) -> Any:
    from sessions_app import services, store

    session = services.session_create(owner=owner, title=f"pages {size}")
    rng = random.Random(size)
    seq, turn, since = session.last_seq, 0, 0
    batch: list[Any] = []
    while seq + len(batch) < size - 20:
        turn += 1
        batch.extend(_turn(turn, rng, header=turn == 1))
        since += 4
        if len(batch) >= 900 or since >= 200:
            seq = store.append_events(session.id, seq, batch).last_seq
            batch = []
        if since >= 200:
            since = 0
            seq = _compact(store, session, seq, rng)
    if batch:
        seq = store.append_events(session.id, seq, batch).last_seq
    session.refresh_from_db()
    _analyze()
    return session


def _analyze() -> None:
    """What autovacuum would do within a minute of such a burst of writes."""
    from sessions_app import store

    store.refresh_statistics()


def _compact(store: Any, session: Any, seq: int, rng: random.Random) -> int:
    """A compaction that keeps the last ~40 entries of the path, from a user message."""
    from sessions_app.store import NewEvent

    session.refresh_from_db(fields=["leaf_entry_id"])
    if seq in range(2_000, 2_800) or seq in range(20_000, 20_800):
        _analyze()  # once the session is large enough to matter, and again at 20k events
    depth = store.depth_of(session.id, session.leaf_entry_id) or 0
    path = store.path_to_root(session.id, session.leaf_entry_id, min_depth=max(0, depth - 40))
    kept = next(e.id for e in path if e.type == "message" and e.data["message"]["role"] == "user")
    entry = {
        "type": "compaction",
        "summary": text_payload(rng, 200, 600),
        "firstKeptEntryId": kept,
        "tokensBefore": 40_000,
    }
    return store.append_events(
        session.id, seq, [NewEvent("entry/compaction", {"entry": entry})]
    ).last_seq


def run(report: Report) -> None:
    from django.test import Client

    from sessions_app import services

    owner = services.user_get_or_create_local(username="bench")
    client = Client(SERVER_NAME="127.0.0.1")
    client.force_login(owner)
    for size in SIZES:
        started = time.perf_counter()
        session = build(owner, size)
        made = time.perf_counter() - started
        base = f"/sessions/{session.id}/"
        pages = {
            "session page (chat)": base,
            "trace view": base + "?view=trace",
            "context view": base + "?view=context",
            "chat view, htmx partial": base + "?view=chat",
        }
        for name, url in pages.items():
            headers: dict[str, Any] = (
                {"HTTP_HX_REQUEST": "true", "HTTP_HX_TARGET": "view"} if "htmx" in name else {}
            )
            response = client.get(url, **headers)
            assert response.status_code == 200, (url, response.status_code)
            timings = []
            for _ in range(RUNS):
                t = time.perf_counter()
                response = client.get(url, **headers)
                timings.append((time.perf_counter() - t) * 1000)
            ms = statistics.median(timings)
            kb = len(response.content) / 1024
            target = "< 300 ms, < 500 KB" if size == SIZES[-1] else ""
            verdict = ("met" if ms < 300 and kb < 500 else "NOT met") if target else ""
            report.add(
                Row(
                    "pages",
                    f"{name}, {session.last_seq + 1:,} events",
                    f"{ms:.0f} ms, {kb:.0f} KB",
                    target,
                    verdict,
                    note=f"session written in {made:.0f} s"
                    if name.startswith("session page")
                    else "",
                )
            )
