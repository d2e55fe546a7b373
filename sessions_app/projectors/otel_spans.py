"""The OpenTelemetry GenAI spans of a session's finished turns, read through the store
(`projections.otel_genai` maps them): what the OTLP projector pushes and the file export
streams.

A turn is read whole (its events by the (session, turn) key), then each of its model
requests is rebuilt from its `request/header` and the kept window of its leaf, as the
context view rebuilds it: the memory of one turn at a time.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from projections.context import EMPTY_CONTEXT, SessionContext
from projections.kept_window import window_context
from projections.otel_genai import Span, TurnFacts, is_finished, turn_spans
from projections.records import EventRecord
from projections.request import RequestNotFound, RequestView, project_request
from projections.trace import project_trace
from sessions_app import store
from sessions_app.store.windows import StoredEntries


def agent_name(preset: Any) -> str:
    """The `gen_ai.agent.name` of a session: its preset's name."""
    name = preset.get("name") if isinstance(preset, Mapping) else None
    return str(name) if name else "strand"


def session_turn_spans(
    session_id: uuid.UUID | str,
    turns: Iterable[int],
    *,
    agent: str,
    capture_content: bool,
    max_chars: int,
) -> Iterator[list[Span]]:
    """The spans of each finished turn of `turns`, a turn at a time (a running one is left
    out: its spans go when it has ended)."""
    for turn in turns:
        facts = turn_facts(session_id, turn, agent=agent)
        if facts is not None:
            yield turn_spans(facts, capture_content=capture_content, max_chars=max_chars)


def turn_facts(session_id: uuid.UUID | str, turn: int, *, agent: str) -> TurnFacts | None:
    events = store.events_of_turns(session_id, [turn])
    spans = [s for s in project_trace(events).spans if s.kind == "turn"]
    if not spans or not is_finished(spans[0]):
        return None
    by_seq = {e.seq: e for e in events}
    reader = StoredEntries(session_id)
    requests: dict[int, RequestView] = {}
    for sent in (e for e in events if e.type == "request/sent"):
        view = _request(session_id, sent, by_seq, reader)
        if view is not None:
            requests[sent.seq] = view
    return TurnFacts(str(session_id), agent, spans[0], by_seq, requests)


def _request(
    session_id: uuid.UUID | str,
    sent: EventRecord,
    by_seq: dict[int, EventRecord],
    reader: StoredEntries,
) -> RequestView | None:
    header_seq = sent.data.get("header_seq")
    if isinstance(header_seq, int) and header_seq not in by_seq:
        # A header written before the turn (it is written only when it changes).
        for event in store.events_after(session_id, header_seq - 1, 1):
            by_seq[event.seq] = event
    ordered = sorted(by_seq.values(), key=lambda e: e.seq)
    try:
        return project_request(ordered, (), sent.seq, context=_context(reader, sent))
    except RequestNotFound:
        return None


def _context(reader: StoredEntries, sent: EventRecord) -> SessionContext:
    leaf = sent.data.get("leaf_entry_id")
    facts = reader.facts(leaf) if isinstance(leaf, str) else None
    # A leaf that names no entry (Pi's fallback, the last entry before the request) is not
    # read whole here: the span says the rebuilt payload does not match.
    return window_context(reader, facts) if facts is not None else EMPTY_CONTEXT
