"""The OpenTelemetry GenAI spans of a session's finished turns, read through the store
(`projections.otel_genai` maps them): what the OTLP projector pushes and the file export
streams.

A turn is read whole (its events by the (session, turn) key), then the input of each of
its model requests is built again from its `request/header` and the kept window of its leaf
(`projections.kept_window`), as the context view builds it: the memory of one turn at a
time.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from projections.context import EMPTY_CONTEXT, PathSettings, build_context_from_window
from projections.kept_window import LeafFacts, window_top
from projections.otel_genai import RequestInput, Span, TurnFacts, is_finished, turn_spans
from projections.records import EntryRecord, EventRecord
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
        facts = turn_facts(session_id, turn, agent=agent, with_messages=capture_content)
        if facts is not None:
            yield turn_spans(facts, capture_content=capture_content, max_chars=max_chars)


def turn_facts(
    session_id: uuid.UUID | str, turn: int, *, agent: str, with_messages: bool = True
) -> TurnFacts | None:
    """The facts of a finished turn (None for a running one); without messages, the
    requests' contexts are not read (their input is only what their header says)."""
    events = store.events_of_turns(session_id, [turn])
    spans = [s for s in project_trace(events).spans if s.kind == "turn"]
    if not spans or not is_finished(spans[0]):
        return None
    by_seq = {e.seq: e for e in events}
    sents = [e for e in events if e.type == "request/sent"]
    _add_headers(session_id, sents, by_seq)
    inputs = request_inputs(StoredEntries(session_id), sents, by_seq, with_messages=with_messages)
    return TurnFacts(str(session_id), agent, spans[0], by_seq, inputs)


def _add_headers(
    session_id: uuid.UUID | str, sents: list[EventRecord], by_seq: dict[int, EventRecord]
) -> None:
    """The headers the requests name that were written before the turn (a header is written
    only when it changes)."""
    for sent in sents:
        seq = sent.data.get("header_seq")
        if isinstance(seq, int) and seq not in by_seq:
            for event in store.events_after(session_id, seq - 1, 1):
                by_seq[event.seq] = event


def request_inputs(
    reader: StoredEntries,
    sents: list[EventRecord],
    by_seq: Mapping[int, EventRecord],
    *,
    with_messages: bool = True,
) -> dict[int, RequestInput]:
    """The input of each request: its header and its leaf's context. The requests of a turn
    have their leaves on one path, so the kept window is read once for the deepest of those
    that share a compaction, and each context is built from the part of it above its leaf."""
    leaves: list[tuple[EventRecord, Mapping[str, Any], LeafFacts | None]] = []
    for sent in sents:
        header = by_seq.get(sent.data.get("header_seq"))  # type: ignore[arg-type]
        if header is None or header.type != "request/header":
            continue  # no header: the span goes without its input
        leaf = sent.data.get("leaf_entry_id")
        leaves.append((sent, header.data, reader.facts(leaf) if isinstance(leaf, str) else None))
    if not with_messages:
        return {
            sent.seq: RequestInput(header, (), facts.compaction if facts else None)
            for sent, header, facts in leaves
        }
    wanted = {i for _, _, f in leaves if f for i in (f.compaction, f.thinking, f.model) if i}
    found = {e.id: e for e in reader.entries(sorted(wanted))} if wanted else {}
    paths: dict[str | None, tuple[int, list[EntryRecord], dict[str, int]]] = {}
    inputs: dict[int, RequestInput] = {}
    for sent, header, facts in reversed(leaves):  # the deepest leaf of each window first
        if facts is None:
            # A leaf that names no entry (Pi's fallback, the last entry before the request,
            # is not read whole here): the input holds no messages.
            inputs[sent.seq] = RequestInput.of(header, EMPTY_CONTEXT)
            continue
        compaction = found.get(facts.compaction) if facts.compaction else None
        if facts.compaction not in paths:
            top = window_top(reader, compaction)
            path = reader.path(facts.id, top)
            paths[facts.compaction] = (top, path, {e.id: i for i, e in enumerate(path)})
        top, path, index = paths[facts.compaction]
        at = index.get(facts.id)
        window = path[: at + 1] if at is not None else reader.path(facts.id, top)
        settings = PathSettings(
            thinking=found.get(facts.thinking) if facts.thinking else None,
            model=found.get(facts.model) if facts.model else None,
            compaction=compaction,
        )
        inputs[sent.seq] = RequestInput.of(header, build_context_from_window(window, settings))
    return inputs
