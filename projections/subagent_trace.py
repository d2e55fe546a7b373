"""A `task` call's child session inside its parent's trace: the child's turn spans hung
under the call's tool span, their keys prefixed so they never meet the parent's own.

Pure: the caller reads the child's events and projects them (`projections.trace`); this
only grafts the spans it is given.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from projections.records import EventRecord

STARTED = "subagent/started"


def children_started(events: Sequence[EventRecord]) -> dict[str, str]:
    """call id → child session id, for each `subagent/started` among `events`."""
    found: dict[str, str] = {}
    for event in events:
        if event.type == STARTED:
            call_id, child = event.data.get("call_id"), event.data.get("child_session")
            if isinstance(call_id, str) and isinstance(child, str):
                found[call_id] = child
    return found


def graft_children(
    spans: Sequence[Any], nested: Mapping[str, tuple[str, Sequence[Any]]]
) -> tuple[Any, ...]:
    """`spans` with each tool span whose call id is in `nested` (call id → (child session,
    the child's spans)) holding the child's spans after its own children."""
    if not nested:
        return tuple(spans)
    return tuple(_grafted(span, nested) for span in spans)


def _grafted(span: Any, nested: Mapping[str, tuple[str, Sequence[Any]]]) -> Any:
    children = tuple(_grafted(child, nested) for child in span.children)
    call_id = span.key.removeprefix("tool-") if span.kind == "tool" else None
    if call_id is None or call_id not in nested:
        return replace(span, children=children) if children != span.children else span
    child_session, child_spans = nested[call_id]
    prefix = f"subagent-{call_id}-"
    return replace(
        span,
        children=(*children, *(_rekeyed(s, prefix, span.turn) for s in child_spans)),
        outputs=(*span.outputs, ("child_session", child_session)),
    )


def _rekeyed(span: Any, prefix: str, turn: int | None) -> Any:
    """A child's span as the parent's trace holds it: its key prefixed, and the parent's
    turn as its turn (the parent's page finds a span by its key in that turn)."""
    return replace(
        span,
        key=prefix + span.key,
        turn=turn,
        children=tuple(_rekeyed(child, prefix, turn) for child in span.children),
    )
