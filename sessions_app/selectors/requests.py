"""Model requests: the exact context a `request/sent` was built from."""

from __future__ import annotations

from projections.context import EMPTY_CONTEXT, SessionContext, build_session_context
from projections.records import EventRecord
from projections.request import RequestNotFound, RequestView, project_request
from sessions_app import store
from sessions_app.models import Session
from sessions_app.selectors.context import session_context


def request_view(session: Session, seq: int) -> RequestView:
    """The exact context of the model request recorded at `seq` (a `request/sent`).

    Reads only what the rebuild needs: that turn's events, the header the request names,
    and the entries that existed when it was sent.
    """
    found = store.events_after(session.id, seq - 1, 1)
    if not found or found[0].seq != seq or found[0].type != "request/sent":
        raise RequestNotFound(f"no model request (request/sent) at seq {seq}")
    sent = found[0]
    events = {sent.seq: sent}
    if sent.turn is not None:
        events.update((e.seq, e) for e in store.events_of_turns(session.id, [sent.turn]))
    header_seq = sent.data.get("header_seq")
    if isinstance(header_seq, int) and header_seq not in events:
        events.update((e.seq, e) for e in store.events_after(session.id, header_seq - 1, 1))
    ordered = sorted(events.values(), key=lambda e: e.seq)
    return project_request(ordered, (), seq, context=request_context(session, sent))


def request_context(session: Session, sent: EventRecord) -> SessionContext:
    """The context a `request/sent` was built from, read from its leaf's kept window."""
    leaf = sent.data.get("leaf_entry_id")
    if not isinstance(leaf, str):
        return EMPTY_CONTEXT
    if not store.entries_by_id(session.id, [leaf]):
        # A leaf that names no entry: Pi's fallback, the last entry before the request.
        before = [e for e in store.entries_of(session.id) if e.seq < sent.seq]
        return build_session_context(before, leaf)
    return session_context(session, leaf)
