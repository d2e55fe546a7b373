"""A session as one self-contained HTML file: the branch tree and the three views, with
inline CSS, script and data, so it opens anywhere with no network.

The chat of the current leaf is rendered in place; the chat of every other branch tip is
rendered into an inert `<template>` that the tree shows on click (up to `MAX_BRANCHES`
tips). The trace covers every turn; the context view shows the latest request of the
current branch with its diff. The Pi session file travels inside, base64-encoded, behind a
download link. Everything passes through the same templates, escaping and markdown
sanitizing as the pages.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from django.contrib.staticfiles import finders
from django.template.loader import render_to_string
from django.utils import timezone
from django.utils.text import slugify

from projections.chat import project_chat
from projections.records import EventRecord
from projections.trace import project_trace
from projections.tree import project_tree
from sessions_app import pi_io, store
from sessions_app.models import Session
from sessions_app.views import PageQuery, context_for_export, trace_blocks

MAX_BRANCHES = 100
PAGE = 5000
STYLES = ("css/strand.css", "css/highlight.css")
SCRIPTS = ("js/strand.js", "js/export.js")


def export_html(session: Session) -> str:
    entries = store.entries_of(session.id)
    events = list(_all_events(session))
    leaf = session.leaf_entry_id
    tree = project_tree(entries, leaf)
    tips = [leaf, *(node.id for node in tree.nodes.values() if node.is_leaf and node.id != leaf)]
    included = tips[: MAX_BRANCHES + 1]
    base = {"session": session, "q": PageQuery(), "export": True, "can_write": False}
    chats = {
        tip: render_to_string(
            "sessions/_chat_items.html",
            {**base, "items": project_chat(entries, tip, events).items, "leaf": tip},
        )
        for tip in included
    }
    turn_events = [event for event in events if event.turn is not None]
    trace = project_trace(turn_events) if turn_events else None
    context = {
        **base,
        **context_for_export(session),
        "is_owner": True,
        "state": None,
        "tree": tree,
        "tree_rows": tree.rows,
        "current_leaf": leaf,
        "view": "chat",
        "trace": trace,
        "blocks": trace_blocks(trace),
        "older": None,
        "leaf": leaf,
        "chats": {
            "current": chats.get(leaf, ""),
            "branches": [(tip, html) for tip, html in chats.items() if tip is not None],
        },
        "missing_tips": [tip for tip in tips[MAX_BRANCHES + 1 :] if tip],
        "jsonl_base64": _jsonl_base64(session),
        "css": _static_text(STYLES),
        "script": _static_text(SCRIPTS).replace("</", "<\\/"),
        "exported_at": timezone.now(),
        "filename": (slugify(session.title)[:60] or "session") + f"-{str(session.id)[:8]}",
    }
    return render_to_string("sessions/export.html", context)


def _all_events(session: Session) -> Iterator[EventRecord]:
    after = -1
    while True:
        page = store.events_after(session.id, after, PAGE)
        yield from page
        if len(page) < PAGE:
            return
        after = page[-1].seq


def _jsonl_base64(session: Session) -> str:
    text = "".join(
        line if line.endswith("\n") else line + "\n" for line in pi_io.pi_export_lines(session)
    )
    return base64.b64encode(text.encode("utf-8")).decode("ascii")


def _static_text(names: tuple[str, ...]) -> str:
    parts: list[str] = []
    for name in names:
        found: Any = finders.find(name)
        if found:
            parts.append(Path(found).read_text(encoding="utf-8"))
    return "\n".join(parts)
