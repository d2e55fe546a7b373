"""The context read from the kept window equals Pi's build over the whole path."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from projections.context import build_session_context
from sessions_app import selectors, services, store
from sessions_app.events import event_type_for_entry
from sessions_app.store import NewEvent

KINDS = ["user", "assistant", "tool", "compaction", "thinking", "model", "summary", "label"]


@st.composite
def trees(draw: st.DrawFn) -> list[dict[str, Any]]:
    size = draw(st.integers(min_value=1, max_value=25))
    entries: list[dict[str, Any]] = []
    for i in range(size):
        kind = draw(st.sampled_from(KINDS))
        parent = draw(st.one_of(st.none(), st.integers(0, i - 1))) if i else None
        entry: dict[str, Any] = {
            "id": f"e{i:07d}",
            "parentId": None if parent is None else f"e{parent:07d}",
            "timestamp": f"2026-01-01T00:00:{i % 60:02d}.000Z",
        }
        if kind == "user":
            entry |= {"type": "message", "message": {"role": "user", "content": f"u{i}"}}
        elif kind == "assistant":
            entry |= {
                "type": "message",
                "message": {
                    "role": "assistant",
                    "content": [{"type": "text", "text": f"a{i}"}],
                    "provider": "p",
                    "model": f"m{i}",
                },
            }
        elif kind == "tool":
            entry |= {
                "type": "message",
                "message": {"role": "toolResult", "toolCallId": "c", "content": []},
            }
        elif kind == "compaction":
            kept = draw(st.integers(0, i)) if i else 0
            entry |= {
                "type": "compaction",
                "summary": f"s{i}",
                "firstKeptEntryId": f"e{kept:07d}",
                "tokensBefore": i,
            }
        elif kind == "thinking":
            entry |= {
                "type": "thinking_level_change",
                "thinkingLevel": draw(st.sampled_from(["low", "high"])),
            }
        elif kind == "model":
            entry |= {"type": "model_change", "provider": "q", "modelId": f"n{i}"}
        elif kind == "summary":
            entry |= {
                "type": "branch_summary",
                "fromId": "root",
                "summary": draw(st.sampled_from(["", "went elsewhere"])),
            }
        else:
            entry |= {"type": "label", "targetId": "e0000000", "label": "x"}
        entries.append(entry)
    return entries


@pytest.mark.django_db
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(entries=trees())
def test_window_context_equals_the_whole_path_build(alice, entries):
    session = services.session_create(owner=alice)
    events = [NewEvent(event_type_for_entry(e), {"entry": e}) for e in entries]
    store.append_events(session.id, 0, events)
    session.refresh_from_db()
    records = store.entries_of(session.id)
    for entry in entries:
        expected = build_session_context(records, entry["id"]).to_pi()
        assert selectors.session_context(session, entry["id"]).to_pi() == expected, entry["id"]
    assert (
        selectors.session_context(session, "unknown0").to_pi()
        == build_session_context(records, "unknown0").to_pi()
    )
