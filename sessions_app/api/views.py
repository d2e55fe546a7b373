"""The views of a session: its model context, the chat and the trace windows, one model
request rebuilt exactly."""

from __future__ import annotations

import uuid
from typing import Any

from django.http import HttpRequest
from ninja import Query, Router

from projections.context import CONTEXT_FORMATS, UNSET
from projections.request import RequestNotFound
from projections.trace import project_trace
from sessions_app import access, selectors
from sessions_app.api.base import ERRORS, auth_user, check_entry, leaf_or_current
from sessions_app.api.cursors import cursor_decode, cursor_encode
from sessions_app.api.schemas import (
    ChatIn,
    ChatOut,
    CompareIn,
    CompareOut,
    ContextIn,
    ContextOut,
    ErrorOut,
    RequestOut,
    TraceIn,
    TraceOut,
    plain,
)
from sessions_app.errors import DomainError
from sessions_app.selectors.workspace_diffs import branches_diff

router = Router(tags=["sessions"])


@router.get("/sessions/{session_id}/context", response={200: ContextOut, ERRORS: ErrorOut})
def context_get(request: HttpRequest, session_id: uuid.UUID, query: Query[ContextIn]) -> Any:
    """The model context of a leaf: Pi's `buildSessionContext` (`pi`), Pi's `convertToLlm`
    of it (`llm`), or the messages Strand's own requests send (`provider`)."""
    session = access.session_for(auth_user(request), session_id)
    leaf = query.leaf
    if leaf is not None:
        check_entry(session, leaf)
    context = selectors.session_context(session, leaf if leaf is not None else UNSET)
    messages = CONTEXT_FORMATS[query.format](context.messages)
    return {
        "format": query.format,
        "leaf_id": leaf if leaf is not None else session.leaf_entry_id,
        "messages": plain(messages),
        "thinking_level": context.thinking_level,
        "model": context.model,
        "sources": plain(context.sources) if query.format == "pi" and context.sources else None,
        "omitted": plain(context.omitted),
    }


@router.get("/sessions/{session_id}/views/chat", response={200: ChatOut, ERRORS: ErrorOut})
def chat_view(request: HttpRequest, session_id: uuid.UUID, query: Query[ChatIn]) -> Any:
    """The chat of the path to `leaf` (default: the current leaf) as the session page shows
    it: its last `limit` entries; `older_cursor` gives the window above."""
    session = access.session_for(auth_user(request), session_id)
    if query.cursor:
        _, at = cursor_decode(query.cursor, "path")
        leaf, end = at["leaf"], at["end"]
    else:
        leaf = leaf_or_current(session, query.leaf)
        end = None
    window = selectors.chat_window(session, leaf, end=end, limit=query.limit)
    older = window.older_end
    return {
        **plain(window.chat),
        "path_length": window.path_length,
        "entries_above": window.above,
        "older_cursor": cursor_encode("path", leaf=leaf, end=older) if older else None,
    }


class UnknownEntry(DomainError):
    """An entry to compare that the session does not hold: the thing asked for is absent."""

    code = "not_found"


@router.get("/sessions/{session_id}/compare", response={200: CompareOut, ERRORS: ErrorOut})
def compare_get(request: HttpRequest, session_id: uuid.UUID, query: Query[CompareIn]) -> Any:
    """Two branches side by side: the entries to `a` and to `b` below their common ancestor
    (`limit` rows at a time; `more_cursor` gives the next), each branch's totals, and the
    difference between the contexts each leaf would send next."""
    session = access.session_for(auth_user(request), session_id)
    offset = 0
    if query.cursor:
        _, at = cursor_decode(query.cursor, "compare")
        if (at["a"], at["b"]) != (query.a, query.b):
            raise DomainError("the cursor belongs to another comparison")
        offset = max(0, at["offset"])
    for entry_id in (query.a, query.b):
        if not selectors.entry_exists(session, entry_id):
            raise UnknownEntry(f"{entry_id!r} is not an entry of this session")
    view = selectors.branch_comparison(session, query.a, query.b, offset=offset, limit=query.limit)
    more = view.more
    return {
        "a": query.a,
        "b": query.b,
        "ancestor": plain(view.ancestor),
        "offset": view.offset,
        "total_rows": view.total_rows,
        "rows": plain(view.rows),
        "more_cursor": cursor_encode("compare", a=query.a, b=query.b, offset=more)
        if more is not None
        else None,
        "totals_a": plain(view.totals_a),
        "totals_b": plain(view.totals_b),
        "context": {**plain(view.context), "token_delta": view.context.token_delta},
        "files": plain(branches_diff(session, query.a, query.b)),
    }


@router.get("/sessions/{session_id}/views/trace", response={200: TraceOut, ERRORS: ErrorOut})
def trace_view(request: HttpRequest, session_id: uuid.UUID, query: Query[TraceIn]) -> Any:
    """Turns → steps → model requests → tool calls, as the session page shows them: the
    latest `turns` turns of the branch to `leaf` (every turn with `scope=all`), or those
    before `before_turn`."""
    session = access.session_for(auth_user(request), session_id)
    window = selectors.trace_window(
        session,
        leaf_or_current(session, query.leaf),
        everywhere=query.scope == "all",
        before=query.before_turn,
        turns=query.turns,
    )
    trace = window.trace if window.trace is not None else project_trace(())
    return {
        **plain(trace),
        "turns": list(window.turns),
        "older_turn": window.older,
        "turn_count": window.turn_count,
        "turns_complete": window.complete,
    }


@router.get(
    "/sessions/{session_id}/views/requests/{seq}", response={200: RequestOut, ERRORS: ErrorOut}
)
def request_get(request: HttpRequest, session_id: uuid.UUID, seq: int) -> Any:
    """The exact context of one model request (the seq of its `request/sent`), rebuilt
    from the stored facts; `matches` says whether its hash equals the recorded one."""
    session = access.session_for(auth_user(request), session_id)
    if seq < 0 or seq > session.last_seq:
        raise RequestNotFound(f"no model request at seq {seq}")
    return plain(selectors.request_view(session, seq))
