"""Every read of sessions, events and entries that the doors make (the pages, the API, the
HTML export, the websocket consumer, the commands). Nothing here writes.

Modules by what they read:

- `sessions`: the list a user sees (the home page's rows, the API's pages), one session;
- `pages`: the windows the page and the API show, the chat of a path's end and the trace
  of a branch's turns, with what it takes to read further;
- `tree`: the branch tree, a window of rows at a time (rows around the leaf, the path
  above, a subtree);
- `context`: the model context of a leaf, read from its kept window;
- `compare`: two branches side by side, read from their common ancestor down;
- `requests`: a model request rebuilt exactly, the context view of a branch;
- `replays`: the answers of a replay group side by side with the original one;
- `turns`: turn numbers, and the state of the latest turn (`projections.turns` folds it);
- `events`, `entries`: pages of the log, the whole log as a stream for exports;
- `otel`: a session or a branch as OpenTelemetry GenAI spans (an OTLP/JSON file).

Every window costs what it shows, not what the session holds. The public names are
re-exported here: `selectors.chat_window(...)`.
"""

from __future__ import annotations

from sessions_app.selectors.compare import ancestor_depth, branch_comparison
from sessions_app.selectors.context import session_context
from sessions_app.selectors.entries import (
    EntryPage,
    PathWindow,
    entry_exists,
    entry_page,
    entry_records,
    entry_stream,
    path_window,
)
from sessions_app.selectors.events import (
    event_at,
    events_after,
    events_of_turns,
    latest_event,
    log_stream,
    trace_log_stream,
)
from sessions_app.selectors.otel import otlp_export_chunks
from sessions_app.selectors.pages import (
    CHAT_ENTRIES,
    ChatWindow,
    TraceWindow,
    chat_window,
    selected_span,
    shown_leaf,
    trace_window,
)
from sessions_app.selectors.replays import replay_group
from sessions_app.selectors.requests import (
    CONTEXT_MESSAGES,
    ContextWindow,
    NextContext,
    RequestRef,
    context_window,
    message_text,
    next_context,
    request_context,
    request_view,
    requests_of,
)
from sessions_app.selectors.sessions import (
    SessionPage,
    SessionRow,
    session_by_id,
    session_is_observed,
    session_page,
    session_reloaded,
    session_rows,
    sessions_by_age,
    visible_session_id,
)
from sessions_app.selectors.tree import (
    TREE_FULL_LIMIT,
    TREE_KINDS,
    TREE_ROWS,
    TreeAt,
    TreeWindow,
    tree_at,
    tree_children_window,
    tree_path_window,
    tree_roots_window,
    tree_rows,
    tree_subtree_window,
    tree_window,
)
from sessions_app.selectors.turns import (
    open_turn_approvals,
    session_turn_state,
    turn_lock_held,
    turn_numbers,
    turn_states,
)

__all__ = [
    "CHAT_ENTRIES",
    "CONTEXT_MESSAGES",
    "TREE_FULL_LIMIT",
    "TREE_ROWS",
    "ChatWindow",
    "ContextWindow",
    "EntryPage",
    "NextContext",
    "PathWindow",
    "RequestRef",
    "SessionPage",
    "SessionRow",
    "TraceWindow",
    "TreeWindow",
    "ancestor_depth",
    "branch_comparison",
    "chat_window",
    "context_window",
    "entry_exists",
    "entry_page",
    "entry_records",
    "entry_stream",
    "event_at",
    "events_after",
    "events_of_turns",
    "latest_event",
    "log_stream",
    "trace_log_stream",
    "message_text",
    "next_context",
    "open_turn_approvals",
    "path_window",
    "otlp_export_chunks",
    "replay_group",
    "request_context",
    "request_view",
    "requests_of",
    "selected_span",
    "session_by_id",
    "session_is_observed",
    "session_context",
    "session_page",
    "session_reloaded",
    "session_rows",
    "session_turn_state",
    "sessions_by_age",
    "shown_leaf",
    "trace_window",
    "TREE_KINDS",
    "TreeAt",
    "tree_at",
    "tree_children_window",
    "tree_path_window",
    "tree_roots_window",
    "tree_rows",
    "tree_subtree_window",
    "tree_window",
    "turn_lock_held",
    "turn_numbers",
    "turn_states",
    "visible_session_id",
]
