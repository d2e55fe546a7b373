"""The branch tree, a page of rows at a time."""

from __future__ import annotations

from dataclasses import dataclass

from projections.tree import TreeRow, TreeView, project_tree
from sessions_app import store
from sessions_app.models import Session


@dataclass(frozen=True)
class TreePage:
    """Rows `start` onwards of the tree as it stood at `as_of_seq` with `leaf` current.

    Entries never change and a later one has a higher seq, so the same (`as_of_seq`,
    `leaf`) always lays out the same rows: paging by row number over that snapshot visits
    every node exactly once, however the session grows meanwhile."""

    tree: TreeView
    rows: tuple[TreeRow, ...]
    as_of_seq: int
    leaf: str | None
    next_start: int | None


def tree_page(
    session: Session, *, as_of_seq: int, leaf: str | None, start: int, limit: int
) -> TreePage:
    entries = [e for e in store.entries_of(session.id) if e.seq <= as_of_seq]
    tree = project_tree(entries, leaf)
    end = start + limit
    return TreePage(
        tree=tree,
        rows=tree.rows[start:end],
        as_of_seq=as_of_seq,
        leaf=leaf,
        next_start=end if end < len(tree.rows) else None,
    )
