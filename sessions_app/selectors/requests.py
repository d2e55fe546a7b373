"""Model requests: the exact context a `request/sent` was built from, and the context view
of a branch (its requests, one rebuilt and compared with the one before)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

from django.db import connection

from projections.chat import content_text
from projections.context import (
    EMPTY_CONTEXT,
    MessageSource,
    SessionContext,
    build_session_context,
)
from projections.records import EventRecord
from projections.request import (
    ContextMessage,
    RequestDiff,
    RequestNotFound,
    RequestView,
    diff_requests,
    project_request,
)
from projections.tokens import estimate_tokens
from sessions_app import store
from sessions_app.models import Event, Session
from sessions_app.selectors import ceilings
from sessions_app.selectors.context import session_context
from sessions_app.selectors.events import event_at


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
        if ceilings.entries_over(
            session.id, as_of_seq=sent.seq - 1, max_bytes=ceilings.whole_read_bytes()
        ):
            raise ceilings.context_too_large(session.id, leaf)
        before = [e for e in store.entries_of(session.id) if e.seq < sent.seq]
        return build_session_context(before, leaf)
    return session_context(session, leaf)


# --- the context view: the requests of a branch, one of them rebuilt ---------------------------

CONTEXT_MESSAGES = 200  # messages of a context drawn (the latest); all on request
REQUEST_LIST = 200  # requests listed to choose from (the latest)
REQUEST_SCAN_ENTRIES = 2000  # entries at the end of a path searched for its requests


@dataclass(frozen=True, slots=True)
class RequestRef:
    seq: int
    turn: int | None
    step: int | None
    time: datetime
    leaf_entry_id: str | None


@dataclass(frozen=True, slots=True)
class RequestList:
    """The latest model requests of a branch (or of the session), oldest first."""

    refs: list[RequestRef]
    complete: bool  # all of them (else older ones, or ones further up the path, exist)


def requests_of(session: Session, leaf: str | None, *, everywhere: bool) -> RequestList:
    """The latest REQUEST_LIST model requests of the session, or of the branch to `leaf`:
    those built for one of the last REQUEST_SCAN_ENTRIES entries of its path (a long path
    is not walked to its root)."""
    sql = (
        "SELECT ev.seq, ev.turn, ev.step, ev.time, ev.data->>'leaf_entry_id' "
        "FROM sessions_app_event ev WHERE ev.session_id = %(s)s AND ev.type = 'request/sent'"
    )
    min_depth = 0
    if not everywhere:
        if leaf is None:
            return RequestList([], True)
        depth = store.depth_of(session.id, leaf) or 0
        min_depth = max(0, depth + 1 - REQUEST_SCAN_ENTRIES)
        sql = f"{store.PATH_CTE} {sql} AND ev.data->>'leaf_entry_id' IN (SELECT entry_id FROM path)"
    params = {"s": str(session.id), "leaf": leaf, "min_depth": min_depth, "n": REQUEST_LIST + 1}
    with connection.cursor() as cur:
        cur.execute(sql + " ORDER BY ev.seq DESC LIMIT %(n)s", params)
        found = [RequestRef(*row) for row in cur.fetchall()]
    found.reverse()
    complete = len(found) <= REQUEST_LIST and min_depth == 0
    return RequestList(found[-REQUEST_LIST:], complete)


def request_ref(session: Session, seq: int) -> RequestRef | None:
    """The model request recorded at `seq`, if that is one."""
    event = event_at(session.id, seq) if seq >= 0 else None
    if event is None or event.type != "request/sent":
        return None
    leaf = event.data.get("leaf_entry_id")
    return RequestRef(
        event.seq, event.turn, event.step, event.time, leaf if isinstance(leaf, str) else None
    )


def request_count(session: Session) -> int:
    return Event.objects.filter(session_id=session.id, type="request/sent").count()


@dataclass(frozen=True, slots=True)
class NextContext:
    """The context a next request from this leaf would start from (no request yet)."""

    messages: tuple[ContextMessage, ...]
    token_total: int
    preset: Mapping[str, Any]
    # Entries a context edit leaves out of this context (Pi 1.6), with that edit.
    omitted: tuple[MessageSource, ...] = ()


def next_context(session: Session, leaf: str | None) -> NextContext:
    context = session_context(session, leaf)
    sources = context.sources or (None,) * len(context.messages)
    lines = tuple(
        ContextMessage(
            index=i,
            role=str(message.get("role")),
            message=message,
            text=message_text(message),
            tokens=estimate_tokens(message),
            key=str(i),
            entry_id=source.entry_id if source is not None else None,
            edit_id=source.edit_id if source is not None else None,
        )
        for i, (message, source) in enumerate(zip(context.messages, sources, strict=True))
    )
    return NextContext(lines, sum(m.tokens for m in lines), session.preset or {}, context.omitted)


def message_text(message: Mapping[str, Any]) -> str:
    """The readable text of a context message, whatever its role."""
    role = message.get("role")
    if role in ("compactionSummary", "branchSummary"):
        return str(message.get("summary") or "")
    if role == "bashExecution":
        return f"$ {message.get('command') or ''}\n{message.get('output') or ''}".rstrip()
    return content_text(message.get("content"), "\n\n" if role == "assistant" else "\n")


@dataclass(frozen=True, slots=True)
class ContextWindow:
    """The context view of a branch: its requests, the one chosen (the latest by default)
    rebuilt exactly and compared with the one before, or the context a next request would
    start from; the latest CONTEXT_MESSAGES of its messages (all on request)."""

    requests: list[RequestRef]
    request_count: int
    chosen: RequestRef | None
    requests_complete: bool = True
    request_view: RequestView | None = None
    request_error: str | None = None
    previous: RequestRef | None = None
    diff: RequestDiff | None = None
    next_context: NextContext | None = None
    context_messages: tuple[ContextMessage, ...] = ()
    context_hidden: int = 0

    def as_template_context(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def context_window(
    session: Session,
    leaf: str | None,
    *,
    request: int | None = None,
    everywhere: bool = False,
    everything: bool = False,
) -> ContextWindow:
    """The context view of the branch to `leaf` (every request of the session with
    `everywhere`), showing the request at seq `request` (default: the branch's latest);
    `everything`: all of its messages, not only the latest."""
    listed = requests_of(session, leaf, everywhere=everywhere)
    requests, complete = listed.refs, listed.complete
    chosen: RequestRef | None = None
    if request is not None:
        chosen = next((r for r in requests if r.seq == request), None) or request_ref(
            session, request
        )
    elif requests:
        chosen = requests[-1]
    count = request_count(session)
    if chosen is None:
        try:
            upcoming = next_context(session, leaf)
        except ceilings.ReadTooLarge as exc:
            return ContextWindow(requests, count, None, complete, request_error=str(exc))
        shown, hidden = _shown(upcoming.messages, everything)
        return ContextWindow(
            requests,
            count,
            None,
            complete,
            next_context=upcoming,
            context_messages=shown,
            context_hidden=hidden,
        )
    try:
        view = request_view(session, chosen.seq)
    except (RequestNotFound, ceilings.ReadTooLarge) as exc:
        return ContextWindow(requests, count, chosen, complete, request_error=str(exc))
    shown, hidden = _shown(view.messages, everything)
    earlier = [r for r in requests if r.seq < chosen.seq]
    previous = earlier[-1] if earlier else None
    diff, error = None, None
    if previous is not None:
        try:
            diff = diff_requests(request_view(session, previous.seq), view)
        except (RequestNotFound, ceilings.ReadTooLarge) as exc:
            error = str(exc)
    return ContextWindow(
        requests,
        count,
        chosen,
        complete,
        request_view=view,
        request_error=error,
        previous=previous,
        diff=diff,
        context_messages=shown,
        context_hidden=hidden,
    )


def _shown(
    messages: tuple[ContextMessage, ...], everything: bool
) -> tuple[tuple[ContextMessage, ...], int]:
    hidden = 0 if everything else max(0, len(messages) - CONTEXT_MESSAGES)
    return messages[hidden:], hidden
