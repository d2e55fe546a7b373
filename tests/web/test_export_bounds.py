"""The HTML export streams a session in memory bounded by its windows, not by the session:
ten times the turns (each with a large tool output) cost about the memory of one window
more, where holding the log, the entries or the spans would cost ten times as much.

Memory is Python's own allocation peak while the export is read through its door
(tracemalloc), with the windows made small so that both sessions fill many of them."""

from __future__ import annotations

import io
import json
import tracemalloc

import pytest
from django.contrib.auth.models import User
from django.http import StreamingHttpResponse
from django.urls import reverse

from sessions_app import selectors, services, store
from sessions_app.models import Session
from sessions_app.services import pi_io
from sessions_app.store import NewEvent
from sessions_app.web import html_export
from tests.web.conftest import client_for

OUTPUT = 16_000  # characters of tool output in every turn


def turn_events(number: int) -> list[NewEvent]:
    """A turn of one step: a prompt, a reply that calls a tool, the tool's large output."""
    call = f"call-{number}"
    message = {
        "role": "assistant",
        "content": [
            {"type": "toolCall", "id": call, "name": "read", "arguments": {"path": "a.txt"}}
        ],
        "stopReason": "toolUse",
    }
    result = {
        "role": "toolResult",
        "toolCallId": call,
        "toolName": "read",
        "content": [{"type": "text", "text": f"{number} " + "x" * OUTPUT}],
        "isError": False,
    }
    return [
        NewEvent("turn/start", {"turn": number}, turn=number),
        NewEvent("step/start", {"turn": number, "step": 1}, turn=number, step=1),
        NewEvent(
            "user/message",
            {
                "entry": {
                    "type": "message",
                    "message": {"role": "user", "content": f"read it, {number}"},
                }
            },
            turn=number,
            step=1,
        ),
        NewEvent(
            "assistant/message",
            {"entry": {"type": "message", "message": message}},
            turn=number,
            step=1,
        ),
        NewEvent(
            "tool/result", {"entry": {"type": "message", "message": result}}, turn=number, step=1
        ),
        NewEvent("step/end", {"turn": number, "step": 1}, turn=number, step=1),
        NewEvent("turn/end", {"turn": number, "reason": "completed"}, turn=number),
    ]


def session_of(owner: User, turns: int) -> Session:
    session = services.session_create(owner=owner, title=f"{turns} turns", cwd="")
    for start in range(1, turns + 1, 100):  # the store takes a batch of 1,000 at most
        batch = [e for n in range(start, min(start + 100, turns + 1)) for e in turn_events(n)]
        session.last_seq = store.append_events(session.id, session.last_seq, batch).last_seq
    # The current branch ends in the first turn: the context view the export draws (the
    # page's read, as large as one model request's context) is the same for both sessions.
    first = selectors.entry_page(session, after_seq=-1, limit=1).entries[0]
    services.session_move_leaf(session=session, to=first.id)
    session.refresh_from_db()
    return session


def export_peak(owner: User, session: Session) -> tuple[int, bytes]:
    """Python's allocation peak while the export is read to its end, and its last bytes."""
    client = client_for(owner)
    tracemalloc.start()
    try:
        response = client.get(reverse("session-export-html", args=[session.id]))
        assert response.status_code == 200
        assert isinstance(response, StreamingHttpResponse)
        size, last = 0, b""
        for chunk in response.streaming_content:
            size += len(chunk)
            last = bytes(chunk)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert size > 0
    return peak, last


@pytest.mark.django_db
def test_ten_times_the_turns_cost_about_one_window_more(
    alice: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in {
        "ENTRIES_PER_READ": 30,
        "EVENTS_PER_READ": 50,
        "TRACE_WINDOW_TURNS": 10,
        "TRACE_WINDOW_EVENTS": 70,
    }.items():
        monkeypatch.setattr(html_export, name, value)
    small, large = session_of(alice, 30), session_of(alice, 300)
    export_peak(alice, small)  # templates compiled, static files found: not counted below

    small_peak, small_end = export_peak(alice, small)
    large_peak, large_end = export_peak(alice, large)

    assert small_end.rstrip().endswith(b"</html>") and large_end.rstrip().endswith(b"</html>")
    # The large session holds 300 outputs of 16 KB (4.8 MB, in its events and its entries);
    # held whole, the export's peak would grow about tenfold.
    assert large_peak < 3 * small_peak, (small_peak, large_peak)
    assert large_peak < 300 * OUTPUT, (small_peak, large_peak)


def imported_with_usage(owner: User, entries: int) -> Session:
    """A Pi 1.6 file of one prompt and `entries` usage entries outside turns, each naming
    a model of OUTPUT characters; its current leaf the prompt."""
    cost = {"input": 0, "output": 0, "cacheRead": 0.01, "cacheWrite": 0, "total": 0.01}
    usage = {"input": 0, "output": 0, "cacheRead": 10, "cacheWrite": 0, "totalTokens": 10}
    lines = [
        {"type": "session", "version": 3, "id": "s1", "timestamp": "2026-11-21T10:00:00.000Z"},
        {
            "type": "message",
            "id": "u0",
            "parentId": None,
            "timestamp": "2026-11-21T10:00:01.000Z",
            "message": {"role": "user", "content": "hello", "timestamp": 1},
        },
    ]
    for number in range(entries):
        lines.append(
            {
                "type": "usage",
                "id": f"e{number}",
                "parentId": "u0" if number == 0 else f"e{number - 1}",
                "timestamp": "2026-11-21T10:00:02.000Z",
                "kind": "cache_warm",
                "provider": "p",
                "model": f"{number} " + "m" * OUTPUT,
                "usage": {**usage, "cost": cost},
            }
        )
    text = "".join(json.dumps(line) + "\n" for line in lines)
    session = pi_io.pi_import(source=io.BytesIO(text.encode()), owner=owner, name="usage").session
    services.session_move_leaf(session=session, to="u0")
    session.refresh_from_db()
    return session


@pytest.mark.django_db
def test_ten_times_the_entries_outside_turns_cost_about_one_window_more(
    alice: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in {
        "ENTRIES_PER_READ": 30,
        "EVENTS_PER_READ": 50,
        "TRACE_WINDOW_TURNS": 10,
        "TRACE_WINDOW_EVENTS": 20,
    }.items():
        monkeypatch.setattr(html_export, name, value)
    small, large = imported_with_usage(alice, 30), imported_with_usage(alice, 300)
    export_peak(alice, small)

    small_peak, small_end = export_peak(alice, small)
    large_peak, large_end = export_peak(alice, large)

    assert small_end.rstrip().endswith(b"</html>") and large_end.rstrip().endswith(b"</html>")
    assert large_peak < 3 * small_peak, (small_peak, large_peak)
    assert large_peak < 300 * OUTPUT, (small_peak, large_peak)
    response = client_for(alice).get(reverse("session-export-html", args=[large.id]))
    html = b"".join(response.streaming_content).decode()  # type: ignore[attr-defined]
    assert html.count('<span class="kind">usage</span> usage: cache_warm') == 300
