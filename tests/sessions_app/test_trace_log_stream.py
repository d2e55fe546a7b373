"""The trace's read of the log gives exactly the events the trace folds (every event of a
turn, and the marks outside turns: compactions, context edits, usage, system messages), in
seq order, whatever the range size, and what was appended after the range it was given."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from django.contrib.auth.models import User

from projections.records import EventRecord
from projections.trace import is_mark
from sessions_app import selectors, store
from sessions_app.models import Session
from sessions_app.services import pi_io
from tests.web.test_export_bounds import session_of, turn_events

pytestmark = pytest.mark.django_db

CASES = Path(__file__).resolve().parents[1] / "fixtures" / "pi" / "v1.6" / "cases"
PI_FILES = ("compactions16", "context_edits", "system_messages", "usage_entries")


def folded(session: Session) -> list[EventRecord]:
    """What the trace keeps of the whole log (`trace_windows` skips the rest)."""
    return [
        event
        for event in selectors.log_stream(session.id)
        if event.turn is not None or is_mark(event)
    ]


@pytest.mark.parametrize("name", PI_FILES)
@pytest.mark.parametrize("page", [1, 7, 5000])
def test_an_imported_file_s_trace_reads_only_its_marks(alice: User, name: str, page: int) -> None:
    source = io.BytesIO((CASES / f"{name}.jsonl").read_bytes())
    session = pi_io.pi_import(source=source, owner=alice, name=name).session

    found = list(selectors.trace_log_stream(session.id, last_seq=session.last_seq, page=page))

    assert found == folded(session)
    assert found  # each file has marks outside turns
    assert len(found) < session.last_seq + 1  # and entries the trace does not draw


def test_turns_are_read_whole_and_later_appends_too(alice: User) -> None:
    session = session_of(alice, 3)
    stale = session.last_seq
    store.append_events(session.id, stale, turn_events(4))

    found = list(selectors.trace_log_stream(session.id, last_seq=stale, page=5))

    assert found == folded(session)
    assert {event.turn for event in found} == {1, 2, 3, 4}
