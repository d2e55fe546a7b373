"""Every read of sessions, events and entries that the doors (pages, the API, the HTML
export, the websocket consumer, the commands) make. Nothing here writes.

Modules by what they read: `context` (a leaf's model context), `entries`, `tree` (the branch
tree, a page of rows at a time), `requests` (model requests), `turns`. Their public names
are re-exported here, so `selectors.session_context(...)` reads as before.
"""

from __future__ import annotations

from sessions_app.selectors.context import session_context
from sessions_app.selectors.entries import entry_exists, entry_records
from sessions_app.selectors.requests import request_context, request_view
from sessions_app.selectors.tree import TreePage, tree_page
from sessions_app.selectors.turns import turn_numbers

__all__ = [
    "TreePage",
    "entry_exists",
    "entry_records",
    "request_context",
    "request_view",
    "session_context",
    "tree_page",
    "turn_numbers",
]
