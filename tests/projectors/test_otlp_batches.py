"""The live export reads a batch's turns together and a session's path once: the spans it
pushes are those the file export makes of the same turns, whether the turns come in one
batch or over several (the later ones read only the entries added since), and the
statements of a batch do not grow with its turns."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from bench.otlp import TurnChain
from projections import otel_genai
from projections.context import build_context_from_window
from projections.otel_genai import Span
from sessions_app import services, store
from sessions_app.models import Session
from sessions_app.projectors import otel_spans, otlp, project_pending
from sessions_app.projectors.otel_spans import agent_name, session_turn_spans
from sessions_app.store import NewEvent
from tests.sessions_app.audit_data import HEADER

pytestmark = pytest.mark.django_db


@pytest.fixture
def pushed(monkeypatch: Any, settings: Any) -> list[Span]:
    settings.STRAND_OTLP_ENDPOINT = "http://127.0.0.1:9/v1/traces"
    spans: list[Span] = []
    monkeypatch.setattr(otlp, "push", spans.extend)
    monkeypatch.setattr(otlp, "kept_paths", otlp.KeptPaths(otlp.KEPT_ENTRIES, otlp.KEPT_BYTES))
    return spans


def _session(owner: Any, title: str) -> tuple[Session, int]:
    session = services.session_create(owner=owner, title=title, cwd="")
    session.refresh_from_db()
    header = NewEvent("request/header", {"reason": "initial", **HEADER}, turn=0, step=0)
    store.append_events(session.id, session.last_seq, [header])
    session.refresh_from_db()
    return session, session.last_seq


_CHAINS: dict[Any, TurnChain] = {}  # each session's conversation so far, by its id


def _write_turns(session: Session, header_seq: int, turns: range) -> None:
    session.refresh_from_db()
    last = session.last_seq
    chain = _CHAINS.setdefault(session.id, TurnChain(header_seq))
    for turn in turns:
        events = chain.turn(f"question {turn} " * 40)
        assert chain.number == turn
        last = store.append_events(session.id, last, events).last_seq


def _exported(session: Session, turns: range) -> list[Span]:
    batches = session_turn_spans(
        session.id,
        turns,
        agent=agent_name(session.preset),
        capture_content=True,
        max_chars=256 * 1024,
    )
    return [span for batch in batches for span in batch]


def _by_session(spans: list[Span]) -> dict[str, list[Span]]:
    grouped: dict[str, list[Span]] = {}
    for span in spans:
        conversation = next(
            a["value"]["stringValue"]
            for a in span["attributes"]
            if a["key"] == "gen_ai.conversation.id"
        )
        grouped.setdefault(conversation, []).append(span)
    return grouped


def test_turns_pushed_over_several_batches_are_the_file_exports_spans(
    alice: Any, pushed: list[Span]
) -> None:
    first, first_header = _session(alice, "first")
    second, second_header = _session(alice, "second")
    _write_turns(first, first_header, range(1, 3))
    _write_turns(second, second_header, range(1, 2))
    project_pending([otlp.OtlpProjector()])
    _write_turns(first, first_header, range(3, 5))  # read from the kept path down
    _write_turns(second, second_header, range(2, 4))
    project_pending([otlp.OtlpProjector()])
    expected = _exported(first, range(1, 3)) + _exported(second, range(1, 2))
    expected += _exported(first, range(3, 5)) + _exported(second, range(2, 4))
    assert len(pushed) == 4 * 7
    # Sessions of one batch come in no set order; each session's spans come in turn order.
    assert _by_session(pushed) == _by_session(expected)
    inputs = [a for s in pushed for a in s["attributes"] if a["key"] == "gen_ai.input.messages"]
    assert len(inputs) == 2 * 7  # the later requests' inputs hold the whole path


def test_a_batch_reads_its_turns_in_statements_that_do_not_grow_with_them(
    alice: Any, pushed: list[Span]
) -> None:
    counts = []
    for n, turns in enumerate((2, 6)):
        sessions = [_session(alice, f"s{n}-{i}") for i in range(3)]
        for session, header_seq in sessions:
            _write_turns(session, header_seq, range(1, turns + 1))
        with CaptureQueriesContext(connection) as queries:
            project_pending([otlp.OtlpProjector()])
        counts.append(len(queries.captured_queries))
    assert len(pushed) == 4 * 3 * (2 + 6)
    assert counts[0] == counts[1]


@pytest.fixture
def counted(monkeypatch: Any) -> tuple[list[object], list[object]]:
    """The messages converted for the spans, and the context folds started, as they come."""
    converted: list[object] = []
    folds: list[object] = []
    convert = otel_genai.input_message

    def counted_convert(message: Any) -> Any:
        converted.append(message)
        return convert(message)

    class CountedFold(otel_spans.ContextFold):
        def __init__(self, *args: Any) -> None:
            folds.append(self)
            super().__init__(*args)

    monkeypatch.setattr(otel_genai, "input_message", counted_convert)
    monkeypatch.setattr(otel_spans, "ContextFold", CountedFold)
    return converted, folds


def test_a_later_batch_works_only_on_what_its_turns_add(
    alice: Any, pushed: list[Span], counted: tuple[list[object], list[object]]
) -> None:
    """Turn after turn, one a batch: each batch converts only the messages its turn adds
    and folds its contexts on from the last one's, however long the session has grown."""
    converted, folds = counted
    session, header_seq = _session(alice, "long")
    work = []
    for turn in range(1, 9):
        _write_turns(session, header_seq, range(turn, turn + 1))
        before = len(converted), len(folds)
        project_pending([otlp.OtlpProjector()])
        work.append((len(converted) - before[0], len(folds) - before[1]))
    # The first batch starts the fold; each later one converts its turn's user message,
    # reply, tool result and answer only.
    assert work == [(3, 1)] + [(4, 0)] * 7
    assert len(pushed) == 4 * 8
    assert pushed == _exported(session, range(1, 9))


def test_a_long_sessions_file_folds_its_path_once(
    alice: Any, counted: tuple[list[object], list[object]]
) -> None:
    """The file of a session read `TURNS_PER_READ` turns at a time: one fold down the whole
    path, and each message converted once, as in one read."""
    converted, folds = counted
    session, header_seq = _session(alice, "file")
    turns = 2 * otel_spans.TURNS_PER_READ + 5
    _write_turns(session, header_seq, range(1, turns + 1))
    spans = _exported(session, range(1, turns + 1))
    assert len(spans) == 4 * turns
    assert len(folds) == 1
    # Every message a request's input holds: the last turn's answer is in none.
    assert len(converted) == 4 * turns - 1


def test_a_window_past_the_read_ceiling_is_never_read_and_its_inputs_are_named_left_out(
    alice: Any, pushed: list[Span], settings: Any, monkeypatch: Any
) -> None:
    """A session whose path grows past STRAND_WHOLE_READ_BYTES: each request within it has
    its input, each past it names the input in `strand.content.omitted`, and no context is
    built from much more than the ceiling, pushed turn by turn from the kept path as in the
    file."""
    settings.STRAND_WHOLE_READ_BYTES = 16_000
    built: list[int] = []  # the JSON size of each window a context is built from

    def size(entries: Any) -> int:
        return sum(len(json.dumps(entry.data)) for entry in entries)

    class MeasuredFold(otel_spans.ContextFold):
        def __init__(self, window: Any, compaction: Any) -> None:
            super().__init__(window, compaction)
            self.size = size(window)
            built.append(self.size)

        def extend(self, entries: Any) -> bool:
            taken = super().extend(entries)
            if taken:
                self.size += size(entries)
                built.append(self.size)
            return taken

    def measured_build(window: Any, path_settings: Any) -> Any:
        built.append(size(window))
        return build_context_from_window(window, path_settings)

    monkeypatch.setattr(otel_spans, "ContextFold", MeasuredFold)
    monkeypatch.setattr(otel_spans, "build_context_from_window", measured_build)
    session, header_seq = _session(alice, "past the ceiling")
    turns = 40
    for turn in range(1, turns + 1):
        _write_turns(session, header_seq, range(turn, turn + 1))
        project_pending([otlp.OtlpProjector()])
    session.refresh_from_db()
    whole = size(store.path_to_root(session.id, session.leaf_entry_id or ""))
    assert whole > 4 * settings.STRAND_WHOLE_READ_BYTES
    assert 0 < max(built) < 1.5 * settings.STRAND_WHOLE_READ_BYTES

    def inputs(spans: list[Span]) -> list[bool]:
        """For each chat span: whether its input is there (else it is named left out)."""
        found = []
        for span in spans:
            attrs = {a["key"]: a["value"] for a in span["attributes"]}
            if span["name"].startswith("chat"):
                omitted = attrs.get("strand.content.omitted", {}).get("arrayValue", {})
                named = [v["stringValue"] for v in omitted.get("values", [])]
                assert ("gen_ai.input.messages" in attrs) != ("gen_ai.input.messages" in named)
                found.append("gen_ai.input.messages" in attrs)
        return found

    pushed_inputs = inputs(pushed)
    assert len(pushed_inputs) == 2 * turns
    cut = pushed_inputs.index(False)
    assert cut > 2 and pushed_inputs == [True] * cut + [False] * (2 * turns - cut)
    assert pushed == _exported(session, range(1, turns + 1))
