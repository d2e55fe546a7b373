"""The log and the tree: events (read and append), entries, the tree a window at a time, the
current leaf and Pi's tree navigation."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import HttpRequest
from ninja import Query, Router
from ninja.responses import Status

from projections.records import EntryRecord
from projections.tree import TreeRow
from sessions_app import access, agent, selectors, services, store
from sessions_app.api.base import ERRORS, auth_user, leaf_or_current
from sessions_app.api.cursors import cursor_decode, cursor_encode
from sessions_app.api.schemas import (
    PATH_PAGE_MAX,
    TREE_LABEL_MAX,
    AppendOut,
    EntryPageIn,
    EntryPageOut,
    ErrorOut,
    EventPageIn,
    EventPageOut,
    EventsAppendIn,
    LeafIn,
    LeafOut,
    NavigateIn,
    NavigateOut,
    TreeIn,
    TreeOut,
    plain,
)
from sessions_app.models import Session
from sessions_app.services import ratelimit

router = Router(tags=["sessions"])


@router.get("/sessions/{session_id}/events", response={200: EventPageOut, ERRORS: ErrorOut})
def event_list(request: HttpRequest, session_id: uuid.UUID, page: Query[EventPageIn]) -> Any:
    """Events with seq > after_seq, oldest first: at most `limit`, and at most
    `STRAND_API_PAGE_BYTES` (1 MiB by default) of event data as JSON, stopping before the
    event that would pass it but always holding one; `next_after_seq` reads on."""
    session = access.session_for(auth_user(request), session_id)
    after_seq = page.after_seq
    events = selectors.events_after(
        session.id, after_seq, page.limit, max_bytes=settings.STRAND_API_PAGE_BYTES
    )
    last = max(session.last_seq, events[-1].seq if events else -1)
    upto = events[-1].seq if events else after_seq
    return {
        "events": [plain(e) for e in events],
        "last_seq": last,
        "next_after_seq": upto if upto < last else None,
    }


@router.post("/sessions/{session_id}/events", response={201: AppendOut, ERRORS: ErrorOut})
def event_append(request: HttpRequest, session_id: uuid.UUID, body: EventsAppendIn) -> Any:
    """Append after `expected_seq`; 409 with `current_seq` when the session moved on.
    Clients may append entries, leaf moves and renames; the runtime writes the rest."""
    session = access.session_for(auth_user(request), session_id, write=True)
    ratelimit.rate_hit(auth_user(request), "append")
    for event in body.events:
        access.check_client_event(event.type, event.data)
    result = store.append_events(
        session.id,
        body.expected_seq,
        [store.NewEvent(e.type, e.data, ignorable=e.ignorable) for e in body.events],
    )
    return Status(201, plain(result))


@router.get("/sessions/{session_id}/entries", response={200: EntryPageOut, ERRORS: ErrorOut})
def entry_list(request: HttpRequest, session_id: uuid.UUID, page: Query[EntryPageIn]) -> Any:
    """Entries (the tree's nodes, as Pi writes them) in the order they were added, a page
    after `after_seq`; or, with `path`, the last entries of the path to `leaf`, the window
    the chat shows, with `older_cursor` for the window above. A page (either kind) holds at
    most `STRAND_API_PAGE_BYTES` (1 MiB by default) of entry data as JSON: it stops before
    the entry that would pass it (for `path`, the root-most one) but always holds one, and
    `next_after_seq` or `older_cursor` reads on."""
    session = access.session_for(auth_user(request), session_id)
    if page.path or page.cursor:
        if page.cursor:
            _, at = cursor_decode(page.cursor, "path")
            leaf, end = at["leaf"], at["end"]
        else:
            leaf = end = leaf_or_current(session, page.leaf)
        window = selectors.path_window(
            session,
            end,
            limit=min(page.limit, PATH_PAGE_MAX),
            max_bytes=settings.STRAND_API_PAGE_BYTES,
        )
        older = window.older_end
        return {
            "entries": [_entry(e) for e in window.entries],
            "next_after_seq": None,
            "entries_above": window.above,
            "older_cursor": cursor_encode("path", leaf=leaf, end=older) if older else None,
        }
    found = selectors.entry_page(
        session,
        after_seq=page.after_seq,
        limit=page.limit,
        max_bytes=settings.STRAND_API_PAGE_BYTES,
    )
    entries = [_entry(e) for e in found.entries]
    return {
        "entries": entries,
        "next_after_seq": entries[-1]["seq"] if found.more and entries else None,
    }


def _entry(entry: EntryRecord) -> dict[str, Any]:
    return {
        "id": entry.id,
        "parent_id": entry.parent_id,
        "type": entry.type,
        "timestamp": entry.timestamp,
        "seq": entry.seq,
        "data": entry.data,
    }


@router.get("/sessions/{session_id}/tree", response={200: TreeOut, ERRORS: ErrorOut})
def tree_get(request: HttpRequest, session_id: uuid.UUID, page: Query[TreeIn]) -> Any:
    """The branch tree as the session page draws it, a window of rows in display order:
    the `limit` rows around `entry` (default: the leaf). Each row has its depth and indent
    as numbers, so the answer grows with the rows it holds, whatever the tree's shape. The
    cursors read the rows before and after, the path above, or the entries below a row
    (`subtree_cursor`), always of the tree as it stood at the first window."""
    session = access.session_for(auth_user(request), session_id)
    # The page's own window when no limit is asked, as the selectors define it now.
    limit = page.limit or selectors.tree.TREE_ROWS
    if page.cursor:
        window = _tree_at_cursor(session, page.cursor, limit)
    else:
        leaf = leaf_or_current(session, page.leaf)
        window = selectors.tree_window(session, leaf, focus=page.entry, rows=limit)
    return _tree_answer(window, limit)


def _tree_at_cursor(session: Session, cursor: str, limit: int) -> selectors.TreeWindow:
    return selectors.tree_at(session, cursor_decode(cursor, *selectors.TREE_KINDS), rows=limit)


def _tree_answer(window: selectors.TreeWindow, limit: int) -> dict[str, Any]:
    tree = window.tree

    def encoded(at: selectors.TreeAt | None) -> str | None:
        return cursor_encode(at[0], **at[1]) if at else None

    nodes = [_tree_row(row, window, encoded) for row in window.rows]
    return {
        "leaf_id": window.leaf,
        "session_name": _clip(tree.session_name),
        "node_count": len(tree.rows),
        "root_count": len(tree.roots),
        "partial": window.partial,
        "rows_above": window.above,
        "rows_below": window.below,
        "nodes": nodes,
        "previous_cursor": encoded(window.previous),
        "next_cursor": encoded(window.following),
        "roots_cursor": encoded(window.roots),
        # The entries whose further children are not rows of this window (the parent of a
        # subtree window is a row of the window before it).
        "children_cursors": {
            entry_id: encoded(window.children_at(entry_id))
            for entry_id in window.more_children
            if entry_id not in window.tree.nodes
        },
    }


def _tree_row(
    row: TreeRow,
    window: selectors.TreeWindow,
    encoded: Callable[[selectors.TreeAt | None], str | None],
) -> dict[str, Any]:
    node = row.node
    return {
        "row": row.row,
        "id": node.id,
        "parent_id": node.parent_id,
        "type": node.type,
        "role": node.role,
        "timestamp": node.timestamp,
        "seq": node.seq,
        "depth": node.depth + window.depth_offset,
        "indent": row.display_indent,
        "connector": row.connector,
        "child_count": len(node.children),
        "text": node.text,
        "label": _clip(node.label),
        "marker": node.marker,
        "on_active_path": node.on_active_path,
        "is_current_leaf": node.id == window.leaf,
        "descendants": node.descendants,
        "messages_below": node.messages_below,
        "newest_leaf_id": node.newest_leaf_id,
        "subtree_cursor": encoded(window.subtree_at(node.id)),
        "children_cursor": encoded(window.children_at(node.id)),
    }


def _clip(text: str | None) -> str | None:
    return text if text is None or len(text) <= TREE_LABEL_MAX else text[: TREE_LABEL_MAX - 1] + "…"


@router.get("/sessions/{session_id}/leaf", response={200: LeafOut, ERRORS: ErrorOut})
def leaf_get(request: HttpRequest, session_id: uuid.UUID) -> Any:
    session = access.session_for(auth_user(request), session_id)
    return {"leaf_entry_id": session.leaf_entry_id, "last_seq": session.last_seq}


@router.put("/sessions/{session_id}/leaf", response={200: LeafOut, ERRORS: ErrorOut})
def leaf_move(request: HttpRequest, session_id: uuid.UUID, body: LeafIn) -> Any:
    """Point the current leaf at exactly this entry (null: the next entry starts a root).
    Refused with 409 while a turn runs, as every leaf move is."""
    user = auth_user(request)
    session = access.session_for(user, session_id, write=True)
    ratelimit.rate_hit(user, "navigate")
    result = services.session_move_leaf(session=session, to=body.entry_id)
    return {"leaf_entry_id": result.leaf_entry_id, "last_seq": result.last_seq}


@router.post("/sessions/{session_id}/navigate", response={200: NavigateOut, ERRORS: ErrorOut})
async def navigate(request: HttpRequest, session_id: uuid.UUID, body: NavigateIn) -> Any:
    """Move the leaf as Pi's tree navigation does: picking a user message lands on its
    parent and returns its text for editing; `summarize` leaves a summary of the branch.
    (Async: a summary waits for the model, and no server thread should wait with it.)"""
    session = await sync_to_async(access.session_for)(auth_user(request), session_id, write=True)
    # A summary is a model call, counted as such; a plain move is a click in the tree.
    scope = "summary" if body.summarize else "navigate"
    await sync_to_async(ratelimit.rate_hit)(auth_user(request), scope)
    return await agent.aagent_navigate(
        session, body.entry_id, summarize=body.summarize, instructions=body.instructions
    )
