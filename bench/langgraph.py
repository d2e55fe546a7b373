"""Strand against LangGraph's Postgres checkpointer as one conversation grows.

For each size N (100, 1,000, 10,000 messages) both stores are first given a conversation of
N messages; then one message at a time is appended and timed. The latency of such an append
and the bytes the database grew by per appended message (tables, their TOAST and indexes,
`pg_total_relation_size`) are reported for N. No model is involved: LangGraph runs a graph
`START → append → END` over `MessagesState` with `PostgresSaver`, Strand appends a
`user/message` event. Messages are ~1 KB of text.

Seeding N messages into LangGraph writes them as one checkpoint (`update_state`), not by
replaying N steps, which would take hours at 10,000 (every step stores the whole list).
"""

from __future__ import annotations

import random
import statistics
import time
import uuid
from typing import Any

from bench.common import Report, Row, psycopg_url, text_payload

SIZES = (100, 1_000, 10_000)
APPENDS = {100: 40, 1_000: 20, 10_000: 8}
STRAND_APPENDS = 200


def run(report: Report) -> None:
    try:
        import langgraph  # noqa: F401
        from langgraph.checkpoint.postgres import PostgresSaver  # noqa: F401
    except ImportError:
        report.add(
            Row(
                "langgraph",
                "LangGraph checkpointer",
                "not measured",
                note="langgraph not installed",
            )
        )
        return
    rng = random.Random(11)
    for size in SIZES:
        strand_ms, strand_bytes = _strand(size, rng)
        graph_ms, graph_bytes = _langgraph(size, rng)
        report.add(
            Row("langgraph", f"append latency at {size:,} messages: Strand", f"{strand_ms:.2f} ms"),
            Row(
                "langgraph",
                f"append latency at {size:,} messages: LangGraph PostgresSaver",
                f"{graph_ms:.2f} ms",
            ),
            Row(
                "langgraph",
                f"stored bytes per message at {size:,}: Strand",
                f"{strand_bytes:,.0f} B",
            ),
            Row(
                "langgraph",
                f"stored bytes per message at {size:,}: LangGraph",
                f"{graph_bytes:,.0f} B",
            ),
        )


def _message(rng: random.Random) -> str:
    return text_payload(rng, 600, 1400)


def _relation_bytes(tables: tuple[str, ...]) -> int:
    import psycopg

    with psycopg.connect(psycopg_url(), autocommit=True) as conn:
        total = 0
        for table in tables:
            row = conn.execute("SELECT pg_total_relation_size(%s::regclass)", [table]).fetchone()
            total += int(row[0]) if row else 0
        return total


def _strand(size: int, rng: random.Random) -> tuple[float, float]:
    from sessions_app import services, store
    from sessions_app.store import NewEvent

    def event() -> NewEvent:
        return NewEvent(
            "user/message",
            {"entry": {"type": "message", "message": {"role": "user", "content": _message(rng)}}},
        )

    owner = services.user_get_or_create_local(username="bench")
    session = services.session_create(owner=owner, title=f"grow {size}")
    seq = session.last_seq
    for start in range(0, size, 1000):
        seq = store.append_events(
            session.id, seq, [event() for _ in range(min(1000, size - start))]
        ).last_seq
    tables = ("sessions_app_event", "sessions_app_entry", "sessions_app_session")
    before = _relation_bytes(tables)
    timings = []
    for _ in range(STRAND_APPENDS):
        e = event()
        t = time.perf_counter()
        seq = store.append_events(session.id, seq, [e]).last_seq
        timings.append((time.perf_counter() - t) * 1000)
    grown = _relation_bytes(tables) - before
    return statistics.median(timings), grown / STRAND_APPENDS


def _langgraph(size: int, rng: random.Random) -> tuple[float, float]:
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.graph import END, START, MessagesState, StateGraph

    def append(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(content=_message(rng))]}

    builder = StateGraph(MessagesState)
    builder.add_node("append", append)
    builder.add_edge(START, "append")
    builder.add_edge("append", END)
    with PostgresSaver.from_conn_string(psycopg_url()) as saver:
        saver.setup()
        graph = builder.compile(checkpointer=saver)
        config: Any = {"configurable": {"thread_id": f"bench-{size}-{uuid.uuid4()}"}}
        seed = [HumanMessage(content=_message(rng)) for _ in range(size)]
        graph.update_state(config, {"messages": seed})
        tables = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")
        before = _relation_bytes(tables)
        timings = []
        for _ in range(APPENDS[size]):
            t = time.perf_counter()
            graph.invoke({"messages": []}, config)
            timings.append((time.perf_counter() - t) * 1000)
        grown = _relation_bytes(tables) - before
    return statistics.median(timings), grown / APPENDS[size]
