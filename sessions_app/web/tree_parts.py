"""The session page's tree, a window at a time: the selectors' windows as the lines the
template draws, with the links that read on.

The page draws one window of the tree (`selectors.tree_window`, or the window a `tree_at`
cursor names) and, in its place, a link for each window beside it: the rows or the path
above, the rows or the chain further on, the entries below a row, an entry's further
branches, the other roots, and the inside of a long linear stretch (a run of "N entries").
Each link is a plain `href` to the page with that window (no JavaScript needed) and an
htmx request for the same window's lines alone (`fragment=tree-more`), which replace the
link: reading on as the user scrolls (`?tree=1`: the whole tree) or clicks. The cursors are
the tree API's, so every request reads a bounded window, whatever the tree's shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from projections.tree import TreeRow, TreeRun, tree_runs
from sessions_app import selectors
from sessions_app.bad_input import BadInput
from sessions_app.models import Session
from sessions_app.selectors.cursors import BadCursor, cursor_decode, cursor_encode
from sessions_app.web.page_query import PageQuery

TREE_RUN_MIN = 12  # rows of a linear stretch folded into one line
INDENT_MAX = 10_000  # the indent a window's rows are drawn from (deeper is drawn as a number)


@dataclass(frozen=True, slots=True)
class TreeLink:
    """A line of the tree that stands for another window, drawn in its place."""

    kind: str  # previous, next, below, children, roots, run
    text: str
    url: str  # the page with that window, relative to the page
    indent: int
    auto: bool = False  # read on when scrolled to (the whole tree)

    @property
    def is_link(self) -> bool:
        return True


TreeItem = TreeRow | TreeLink


def tree_part(
    session: Session, query: PageQuery, leaf: str | None, *, fragment: bool = False
) -> dict[str, Any]:
    """The template's names for the window the page shows: the first one, or `tree_at`'s
    (its rows `tree_rows` alone when a run is opened)."""
    window = _window(session, query, leaf)
    indent = max(0, min(query.tree_indent or 0, INDENT_MAX)) if fragment else 0
    rows = _slice(window, query.tree_rows)
    part: dict[str, Any] = {
        "tree": window.tree,
        "tree_rows": rows,
        "tree_items": _items(
            window, query, rows, indent, whole_slice=query.tree_rows is None, fragment=fragment
        ),
        "tree_indent": indent,
        "tree_depth_offset": window.depth_offset,
        "tree_leaf": window.leaf if window.partial else window.tree.leaf_id,
        "tree_reading": query.tree_at is not None,
    }
    if window.partial:
        part["tree_partial"] = True
    return part


def _window(session: Session, query: PageQuery, leaf: str | None) -> selectors.TreeWindow:
    if query.tree_at is None:
        return selectors.tree_window(session, leaf, focus=query.entry)
    try:
        at = cursor_decode(query.tree_at, *selectors.TREE_KINDS)
    except BadCursor:
        raise BadInput("the parameter 'tree_at' is not a window of this tree") from None
    return selectors.tree_at(session, at)


def _slice(window: selectors.TreeWindow, asked: str | None) -> tuple[TreeRow, ...]:
    if asked is None:
        return window.rows
    start, _, stop = asked.partition("-")
    if not (start.isdigit() and stop.isdigit()) or int(start) > int(stop):
        raise BadInput("the parameter 'tree_rows' is not a range of rows like 3-40")
    return window.rows[int(start) : int(stop)]


def _items(
    window: selectors.TreeWindow,
    query: PageQuery,
    rows: tuple[TreeRow, ...],
    indent: int,
    *,
    whole_slice: bool,
    fragment: bool,
) -> list[TreeItem]:
    def link(kind: str, text: str, at: selectors.TreeAt, depth: int, **extra: Any) -> TreeLink:
        encoded = cursor_encode(at[0], **at[1])
        url = query.querystring(
            tree_at=encoded,
            tree_rows=extra.get("rows"),
            tree_indent=depth or None,
            tree_up=kind == "previous",
            entry=None,
        )
        return TreeLink(kind, text, url, depth, auto=query.tree and kind == "next")

    items: list[TreeItem] = []
    if not whole_slice:  # a run opened: its rows alone, unfolded
        return list(rows)
    # In place of a link, a window goes on only the way it was read: what lies on its
    # other side is drawn already. A page of its own goes on both ways.
    up, down = (query.tree_up, not query.tree_up) if fragment else (True, True)
    if window.previous and up:
        items.append(link("previous", _previous_text(window), window.previous, indent))
    for entry_id in window.more_children:
        if entry_id not in window.tree.nodes:  # a subtree's parent, drawn in the window above
            at = window.children_at(entry_id)
            if at:
                items.append(link("children", "More branches here", at, indent))
    keep = {query.entry, query.mark, window.leaf, *window.expandable, *window.more_children}
    for item in tree_runs(rows, {k for k in keep if k}, TREE_RUN_MIN):
        if isinstance(item, TreeRun):
            first = rows[item.start]
            items.append(
                link(
                    "run",
                    f"{item.count:,} entries",
                    window.at or ("rows", {}),
                    indent + first.display_indent,
                    rows=f"{item.start}-{item.stop}",
                )
            )
            continue
        items.append(item)
        below = indent + item.display_indent + 1
        if (at := window.subtree_at(item.node.id)) is not None:
            items.append(link("below", "Entries below", at, below))
        if (at := window.children_at(item.node.id)) is not None:
            items.append(link("children", "More branches", at, below))
    if window.following and down:
        items.append(link("next", _next_text(window), window.following, indent))
    if window.roots:
        items.append(link("roots", "Other roots", window.roots, indent))
    return items


def _previous_text(window: selectors.TreeWindow) -> str:
    if window.partial:
        return f"{window.above:,} earlier entr{'y' if window.above == 1 else 'ies'} of this branch"
    return f"{window.above:,} entr{'y' if window.above == 1 else 'ies'} above"


def _next_text(window: selectors.TreeWindow) -> str:
    if not window.partial:
        return f"{window.below:,} more entr{'y' if window.below == 1 else 'ies'}"
    kind = window.following[0] if window.following else ""
    return {"below": "Further down", "children": "More branches", "roots": "More roots"}.get(
        kind, "More"
    )
