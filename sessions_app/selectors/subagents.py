"""Reads of subagents' child sessions: their spans inside a parent's trace, a parent's
children for the pages."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from projections.records import EventRecord
from projections.subagent_trace import children_started
from projections.trace import TraceSpan, project_trace
from sessions_app.models import Event, Session
from sessions_app.selectors.events import events_of_turns

# Children drawn inside one window of a parent's trace; the rest are reached by their links.
CHILDREN_SHOWN = 10
# A child's turn that its `task` call ran: its first.
TASK_TURN = 1


def subagent_spans(
    session: Session, events: Sequence[EventRecord]
) -> dict[str, tuple[str, tuple[TraceSpan, ...]]]:
    """call id → (child session, the spans of the turn it ran) for the `task` calls
    among `events` (at most CHILDREN_SHOWN), of children of `session`."""
    started = list(children_started(events).items())[:CHILDREN_SHOWN]
    ids = []
    for _, child in started:
        try:
            ids.append(uuid.UUID(child))
        except ValueError:
            continue
    mine = {
        str(i)
        for i in Session.objects.filter(id__in=ids, parent=session, origin="subagent").values_list(
            "id", flat=True
        )
    }
    found: dict[str, tuple[str, tuple[TraceSpan, ...]]] = {}
    for call_id, child in started:
        if child not in mine:
            continue
        child_events = events_of_turns(child, [TASK_TURN])
        if child_events:
            found[call_id] = (child, project_trace(child_events).spans)
    return found


def subagent_children(session: Session, limit: int = 50) -> list[Session]:
    """The children `session`'s `task` calls started, oldest first (at most `limit`)."""
    return list(
        Session.objects.filter(parent=session, origin="subagent").order_by("created_at")[:limit]
    )


# Parents a page's breadcrumbs name above a child (more than subagents may nest).
LINEAGE_SHOWN = 8


def subagent_lineage(session: Session) -> list[Session]:
    """The sessions above a child, the top one first: its parent, that one's parent while
    it is a child too (at most LINEAGE_SHOWN). Empty for a session no `task` call started."""
    chain: list[Session] = []
    current = session
    while current.origin == "subagent" and current.parent_id and len(chain) < LINEAGE_SHOWN:
        parent = (
            Session.objects.filter(id=current.parent_id)
            .only("id", "title", "owner_id", "origin", "parent_id", "delegation_depth")
            .first()
        )
        if parent is None:
            break
        chain.append(parent)
        current = parent
    return chain[::-1]


# `task` calls a page links to their children (the newest; older ones show their child
# in their results).
CALLS_LINKED = 50


def subagent_calls(session: Session) -> dict[str, str]:
    """call id → child session, for the newest `task` calls of `session` that started one
    (at most CALLS_LINKED): a running call links to its child before it has a result."""
    rows = (
        Event.objects.filter(session=session, type="subagent/started")
        .order_by("-seq")
        .values_list("data", flat=True)[:CALLS_LINKED]
    )
    found: dict[str, str] = {}
    for data in rows:
        call_id, child = data.get("call_id"), data.get("child_session")
        if isinstance(call_id, str) and isinstance(child, str):
            try:
                found[call_id] = str(uuid.UUID(child))
            except ValueError:
                continue
    return found
