"""The home page's search, for a user with little data beside one with much.

Bob owns SESSIONS sessions holding BOB_ENTRIES user and assistant messages between them
(300–1,000 characters of text each, appended through `store.append_events` in batches of
100); Alice owns one session of 6 messages. Each figure is the median of RUNS searches
after one, through the selector the home page calls (`selectors.session_rows`): Alice's
search should cost what her own sessions hold, whatever Bob stores. The data is made once
and reused by later runs (it is found by its titles).

Run alone: `python -m bench search` (the benchmark database, `strand_bench`).
"""

from __future__ import annotations

import random
import time
from typing import Any

from bench.common import Report, Row, median_of, text_payload

BOB_ENTRIES = 200_000
SESSIONS = 20
ALICE_ENTRIES = 6
RUNS = 5
TARGET_MS = 100
QUERY = "postgres summary"


def _user(name: str) -> Any:
    from django.contrib.auth import get_user_model

    user, _ = get_user_model().objects.get_or_create(username=f"bench-search-{name}")
    return user


def _messages(rng: random.Random, count: int) -> list[Any]:
    from sessions_app.store import NewEvent

    events = []
    for i in range(count):
        text = text_payload(rng, 300, 1000)
        if i % 2 == 0:
            message: dict[str, Any] = {"role": "user", "content": text}
            kind = "user/message"
        else:
            message = {"role": "assistant", "content": [{"type": "text", "text": text}]}
            kind = "assistant/message"
        events.append(NewEvent(kind, {"entry": {"type": "message", "message": message}}))
    return events


def _fill(owner: Any, title: str, entries: int, rng: random.Random) -> None:
    from sessions_app import services, store
    from sessions_app.models import Session

    if Session.objects.filter(owner=owner, title=title, message_count__gte=entries).exists():
        return
    Session.objects.filter(owner=owner, title=title).delete()
    session = services.session_create(owner=owner, title=title, cwd="")
    expected = session.last_seq
    for start in range(0, entries, 100):
        expected = store.append_events(
            session.id, expected, _messages(rng, min(100, entries - start))
        ).last_seq


def build() -> tuple[Any, Any]:
    rng = random.Random(19)
    alice, bob = _user("alice"), _user("bob")
    for n in range(SESSIONS):
        _fill(bob, f"bench search bob {n}", BOB_ENTRIES // SESSIONS, rng)
    _fill(alice, "bench search alice", ALICE_ENTRIES, rng)
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("ANALYZE sessions_app_entry")
        cur.execute("ANALYZE sessions_app_session")
    return alice, bob


def _search_ms(user: Any) -> float:
    from sessions_app import selectors

    started = time.perf_counter()
    selectors.session_rows(user, query=QUERY)
    return (time.perf_counter() - started) * 1000


def run(report: Report) -> None:
    started = time.perf_counter()
    alice, bob = build()
    print(f"  data ready in {time.perf_counter() - started:.0f} s", flush=True)
    alice_ms, alice_all = median_of(RUNS, lambda: _search_ms(alice))
    bob_ms, bob_all = median_of(RUNS, lambda: _search_ms(bob))
    verdict = "met" if alice_ms <= TARGET_MS else "NOT met"
    report.add(
        Row(
            "search",
            f"Alice's search ({ALICE_ENTRIES} entries) beside Bob's {BOB_ENTRIES:,}",
            f"{alice_ms:.1f} ms",
            f"≤ {TARGET_MS} ms",
            verdict,
            "runs: " + ", ".join(f"{v:.0f}" for v in alice_all),
        ),
        Row(
            "search",
            f"Bob's search ({BOB_ENTRIES:,} entries in {SESSIONS} sessions)",
            f"{bob_ms:.0f} ms",
            note="runs: " + ", ".join(f"{v:.0f}" for v in bob_all),
        ),
    )
