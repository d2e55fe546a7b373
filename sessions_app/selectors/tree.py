"""The branch tree, a window of rows at a time.

A window is drawn from the tree as it stood at `as_of_seq` (entries never change and a later
one has a higher seq, so the same snapshot always lays out the same rows), with `leaf` the
leaf shown. Two kinds, by the size of the session:

- whole: a session of at most TREE_FULL_LIMIT entries is laid out whole (Pi's /tree
  layout) and a window is a run of its rows, by default the TREE_ROWS around the leaf (or
  the entry asked for); the rows before and after are further windows of the same layout;
- partial: a larger session is drawn near the branch shown, from a window of entries: the
  path's last TREE_ROWS/2 entries down to the leaf (or to the entry asked for) and the
  first TREE_ROWS/2 entries of the branches that leave them. Further windows are the path
  above (the same drawing, further up), a subtree (the entries below one of those branch
  entries, drawn down the chain of newest children with the branches that leave it), the
  further children of an entry whose branches did not all fit, and the further roots.

Either way a window reads at most its own rows' worth of entries (or TREE_FULL_LIMIT), so
its cost does not grow with the session, and every entry is reached by some chain of
further windows: the whole tree is read a window at a time (`?tree=1` on the page, the
cursors of the API). In a partial window the projection sees only the window's entries:
counts below an entry are of those, and depths are relative to the window's top
(`depth_offset` makes them absolute). Orphans (an entry naming a parent the session does
not hold, which only a hand-made file has) are roots of a whole layout; a partial tree
finds the roots by their null parent only.

Each window knows the cursor that reads it again (`at`) and those of the windows beside
it, as (kind, fields) of `selectors.cursors`; the doors encode them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from django.db import connection

from projections.records import EntryRecord
from projections.tree import TreeRow, TreeView, project_tree, tree_entry
from sessions_app import store
from sessions_app.models import Session
from sessions_app.selectors.ceilings import ReadTooLarge

TREE_ROWS = 600  # rows of the tree drawn around the shown leaf; all on the page's request
# Entries laid out whole for each window of the tree (its cost); a larger tree is drawn near
# the branch shown.
TREE_FULL_LIMIT = 1000
# A window's entries are read by the stored size of their data, each cut to what the tree
# shows as it arrives: at most TREE_READ_BYTES at a time (or one larger entry), so that a
# window of small entries is one read and a window of large ones holds one chunk at a time.
# Up to TREE_READ_CHUNK entries are read at once without asking their sizes first.
TREE_READ_BYTES = 512 * 1024
TREE_READ_CHUNK = 16

# A cursor, before it is encoded: its kind and fields (`selectors.cursors.KINDS`).
TreeAt = tuple[str, dict[str, Any]]

_NONE: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class TreeWindow:
    tree: TreeView  # the layout the rows come from (of the window's entries when partial)
    rows: tuple[TreeRow, ...]
    as_of_seq: int
    leaf: str | None
    partial: bool
    above: int  # whole: rows before the window; partial: entries of the path above it
    below: int  # whole: rows after the window
    start: int = 0  # whole: the first row's number
    depth_offset: int = 0  # partial: the depth from the root of the layout's depth 0
    # Partial windows: where the path above continues (the last entry of the next window
    # up, and its child on the path, drawn already), the chain entry a subtree window
    # continues below, and the rows whose entry has children this window does not draw.
    older_end: str | None = None
    older_below: str | None = None
    chain_next: str | None = None
    expandable: frozenset[str] = field(default_factory=frozenset)
    # Partial windows: entries with more children than drawn → (seq of the last child
    # drawn, or -1; the child drawn elsewhere, on the path or the chain).
    more_children: Mapping[str, tuple[int, str | None]] = field(default_factory=lambda: _NONE)
    # The cursor of this window, and of the windows before and after it in reading order
    # (the rows around, the path above, the chain or the children or the roots further on).
    at: TreeAt | None = None
    previous: TreeAt | None = None
    following: TreeAt | None = None
    # Partial windows that reach a root while the session has others: the roots to read.
    roots: TreeAt | None = None

    def subtree_at(self, entry_id: str) -> TreeAt | None:
        """The window of the entries below `entry_id`, when this one does not draw them."""
        if entry_id not in self.expandable:
            return None
        return ("below", {**self._common(), "parent": entry_id})

    def children_at(self, entry_id: str) -> TreeAt | None:
        """The window of `entry_id`'s further children, when not all of them are drawn."""
        more = self.more_children.get(entry_id)
        if more is None:
            return None
        after, skip = more
        return ("children", {**self._common(), "parent": entry_id, "after": after, "skip": skip})

    def _common(self) -> dict[str, Any]:
        return {"as_of": self.as_of_seq, "leaf": self.leaf}


def tree_window(
    session: Session,
    leaf: str | None,
    *,
    focus: str | None = None,
    rows: int | None = None,
    as_of_seq: int | None = None,
) -> TreeWindow:
    """The tree as the page draws it first: `rows` rows around `focus` (default: the shown
    leaf) of the whole layout, or, for a large session, the path down to the shown leaf
    (down to `focus` when that path does not hold it). Further windows read on from it."""
    rows = TREE_ROWS if rows is None else rows
    as_of = session.last_seq if as_of_seq is None else as_of_seq
    if _fits_whole(session, as_of, TREE_FULL_LIMIT):
        tree = _whole(session, as_of, leaf)
        if len(tree.rows) <= rows:
            return _rows_window(tree, as_of, leaf, 0, len(tree.rows), rows)
        marks = [r.row for r in tree.rows if r.node.id == focus] or [
            r.row for r in tree.rows if r.node.is_current_leaf
        ]
        at = marks[0] if marks else len(tree.rows) - 1
        start = max(0, min(at - rows // 2, len(tree.rows) - rows))
        return _rows_window(tree, as_of, leaf, start, start + rows, rows)
    # No leaf (the next entry starts a root): drawn up from the latest entry instead.
    end = leaf if leaf is not None else _latest_entry(session, as_of)
    window = tree_path_window(session, as_of_seq=as_of, leaf=leaf, end=end, below=None, rows=rows)
    if focus is None or focus in window.tree.nodes or store.depth_of(session.id, focus) is None:
        return window
    return tree_path_window(session, as_of_seq=as_of, leaf=leaf, end=focus, below=None, rows=rows)


def tree_at(session: Session, at: TreeAt, *, rows: int | None = None) -> TreeWindow:
    """The window a cursor names (its kind and decoded fields), `rows` rows at most."""
    kind, fields = at
    rows = TREE_ROWS if rows is None else rows
    common = {"as_of_seq": fields["as_of"], "leaf": fields["leaf"]}
    if kind == "rows":
        stop = min(fields["stop"], fields["start"] + rows)
        return tree_rows(session, **common, start=fields["start"], stop=stop)
    if kind == "above":
        return tree_path_window(
            session, **common, end=fields["end"], below=fields["below"], rows=rows
        )
    if kind == "near":
        return tree_path_window(session, **common, end=fields["end"], below=None, rows=rows)
    if kind == "children":
        return tree_children_window(
            session,
            **common,
            parent=fields["parent"],
            after=fields["after"],
            skip=fields["skip"],
            rows=rows,
        )
    if kind == "roots":
        return tree_roots_window(
            session, **common, after=fields["after"], skip=fields["skip"], rows=rows
        )
    return tree_subtree_window(session, **common, parent=fields["parent"], rows=rows)


TREE_KINDS = ("rows", "above", "near", "below", "children", "roots")


def tree_rows(
    session: Session, *, as_of_seq: int, leaf: str | None, start: int, stop: int
) -> TreeWindow:
    """Rows `start` to `stop` of the whole layout (a further window of a whole tree)."""
    if not _fits_whole(session, as_of_seq, TREE_FULL_LIMIT):
        raise ReadTooLarge(
            "the tree of this cursor is too large to lay out whole; "
            "ask for the tree again without a cursor: it is drawn near the branch shown"
        )
    tree = _whole(session, as_of_seq, leaf)
    return _rows_window(tree, as_of_seq, leaf, start, stop, max(stop - start, 1))


def _fits_whole(session: Session, as_of: int, entries: int) -> bool:
    """Whether the tree as of `as_of` has at most `entries` entries (counted up to that)."""
    return _entry_count(session, as_of, upto=entries) <= entries


def _whole(session: Session, as_of: int, leaf: str | None) -> TreeView:
    """The whole layout, from every entry as of `as_of`, each cut to what the tree reads as
    it arrives (`tree_entry`): the entries' sizes first, in seq order, then their data
    TREE_READ_BYTES at a time, so the entries' size costs time, never memory."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT entry_id, pg_column_size(data) FROM sessions_app_entry "
            "WHERE session_id = %s AND seq >= 0 AND seq <= %s ORDER BY seq",
            [str(session.id), as_of],
        )
        sized = [(row[0], int(row[1])) for row in cur.fetchall()]
    return project_tree(_records_of(session, sized), leaf)


def _tree_records(session: Session, ids: list[str]) -> list[EntryRecord]:
    """The entries `ids` in seq order, cut to what the tree reads (`tree_entry`), read
    TREE_READ_BYTES of stored data at a time: however large the entries, a window holds a
    few hundred bytes for each."""
    if len(ids) <= TREE_READ_CHUNK:  # one read in seq order, the sizes not asked
        return [tree_entry(e) for e in store.entries_by_id(session.id, ids)] if ids else []
    return _records_of(session, _stored_sizes(session, ids))


def _records_of(session: Session, sized: list[tuple[str, int]]) -> list[EntryRecord]:
    """The entries of `sized` ((id, stored bytes) pairs) in seq order, cut to what the tree
    reads: one read for each run of them that holds at most TREE_READ_BYTES (or one entry)."""
    records: list[EntryRecord] = []
    chunk: list[str] = []
    held = 0
    for entry_id, size in sized:
        if chunk and held + size > TREE_READ_BYTES:
            records += [tree_entry(e) for e in store.entries_by_id(session.id, chunk)]
            chunk, held = [], 0
        chunk.append(entry_id)
        held += size
    if chunk:
        records += [tree_entry(e) for e in store.entries_by_id(session.id, chunk)]
    records.sort(key=lambda e: e.seq)
    return records


def _stored_sizes(session: Session, ids: list[str]) -> list[tuple[str, int]]:
    """(id, stored bytes of its data) of those of `ids` the session holds: key lookups of
    the (session, entry id) index, and the sizes as stored, without reading the values."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT entry_id, pg_column_size(data) FROM sessions_app_entry "
            "WHERE session_id = %s AND entry_id = ANY(%s)",
            [str(session.id), list(ids)],
        )
        return [(row[0], int(row[1])) for row in cur.fetchall()]


def _path_ids(session: Session, end: str, min_depth: int) -> list[tuple[str, str | None]]:
    """(id, parent id) of the path's entries from depth `min_depth` down to `end`."""
    with connection.cursor() as cur:
        cur.execute(
            f"{store.PATH_CTE} SELECT entry_id, parent_id FROM path ORDER BY depth",
            {"s": str(session.id), "leaf": end, "min_depth": min_depth},
        )
        return [(row[0], row[1]) for row in cur.fetchall()]


def _rows_window(
    tree: TreeView, as_of: int, leaf: str | None, start: int, stop: int, size: int
) -> TreeWindow:
    """Rows `start` to `stop` of `tree`; the windows before and after are `size` rows."""
    start = max(0, min(start, len(tree.rows)))
    stop = max(start, min(stop, len(tree.rows)))
    common = {"as_of": as_of, "leaf": leaf}
    return TreeWindow(
        tree=tree,
        rows=tree.rows[start:stop],
        as_of_seq=as_of,
        leaf=leaf,
        partial=False,
        above=start,
        below=len(tree.rows) - stop,
        start=start,
        at=("rows", {**common, "start": start, "stop": stop}),
        previous=("rows", {**common, "start": max(0, start - size), "stop": start})
        if start
        else None,
        following=("rows", {**common, "start": stop, "stop": stop + size})
        if stop < len(tree.rows)
        else None,
    )


def _latest_entry(session: Session, as_of: int) -> str | None:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT entry_id FROM sessions_app_entry WHERE session_id = %s AND seq <= %s "
            "ORDER BY seq DESC LIMIT 1",
            [str(session.id), as_of],
        )
        row = cur.fetchone()
    return str(row[0]) if row else None


def _entry_count(session: Session, as_of: int, *, upto: int | None = None) -> int:
    upto = TREE_FULL_LIMIT if upto is None else upto
    if as_of < upto:
        return as_of + 1  # an upper bound: every entry comes with an event
    # Counted only up to the limit: enough to tell the two kinds apart.
    with connection.cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM (SELECT 1 FROM sessions_app_entry "
            "WHERE session_id = %s AND seq <= %s LIMIT %s) e",
            [str(session.id), as_of, upto + 1],
        )
        row = cur.fetchone()
    return int(row[0]) if row else 0


# --- partial windows ---------------------------------------------------------------------------


def tree_path_window(
    session: Session,
    *,
    as_of_seq: int,
    leaf: str | None,
    end: str | None,
    below: str | None,
    rows: int | None = None,
) -> TreeWindow:
    """The path's `rows/2` entries down to `end` (the leaf, an entry asked for, or where the
    window below starts: `below` is its child on the path) and the first `rows/2` entries
    of the branches leaving them. The path is drawn as the shown one when it ends at the
    leaf, or continues a window that did (`below`)."""
    rows = TREE_ROWS if rows is None else rows
    common = {"as_of": as_of_seq, "leaf": leaf}
    if end is None:
        return _partial(session, [], as_of_seq, leaf, None, 0, above=0)
    depth = store.depth_of(session.id, end) or 0
    start = max(0, depth + 1 - max(rows // 2, 1))
    path = _path_ids(session, end, start)
    on_path = [entry_id for entry_id, _ in path]
    exclude = [*on_path, *([below] if below else [])]
    branches = _children_of(session, on_path, exclude, as_of_seq, limit=max(rows // 2, 1))
    entries = [*_tree_records(session, on_path), *_tree_records(session, branches)]
    # Each path entry's child on the path is drawn already (or by the window below).
    skips = dict(zip(on_path, [*on_path[1:], below], strict=True))
    older = start and path
    return _partial(
        session,
        entries,
        as_of_seq,
        leaf,
        end if end == leaf or below is not None else None,
        start,
        above=start,
        older_end=path[0][1] if older else None,
        older_below=path[0][0] if older else None,
        drawn_children=set(on_path),
        skips=skips,
        at=("above", {**common, "end": end, "below": below})
        if below
        else ("near", {**common, "end": end}),
        previous=("above", {**common, "end": path[0][1], "below": path[0][0]})
        if older and path[0][1]
        else None,
        roots=_other_roots(session, as_of_seq, leaf, on_path[0]) if path and not start else None,
    )


def tree_subtree_window(
    session: Session, *, as_of_seq: int, leaf: str | None, parent: str, rows: int | None = None
) -> TreeWindow:
    """The entries below `parent`: the chain of newest children down from it (`rows/2`
    entries) and the first `rows/2` entries of the branches that leave the chain (or leave
    `parent`); the chain's last entry continues in the next window."""
    count = max((TREE_ROWS if rows is None else rows) // 2, 1)
    common = {"as_of": as_of_seq, "leaf": leaf}
    depth = store.depth_of(session.id, parent)
    if depth is None:
        return _partial(session, [], as_of_seq, leaf, None, 0, above=0)
    chain = _newest_chain(session, parent, depth, as_of_seq, count + 1)
    more = len(chain) > count
    chain = chain[:count]
    # The chain's last entry's own branches belong to the next window when it goes on.
    parents = [parent, *(chain[:-1] if more else chain)]
    branches = _children_of(session, parents, chain, as_of_seq, limit=count)
    entries = _tree_records(session, [*chain, *branches])
    return _partial(
        session,
        entries,
        as_of_seq,
        leaf,
        leaf if leaf in {e.id for e in entries} else None,
        depth + 1,
        above=0,
        chain_next=chain[-1] if more else None,
        # The chain's children are drawn here, or below `chain_next` in the next window.
        drawn_children={parent, *chain},
        skips=dict(zip(parents, [*chain, None], strict=False)),
        at=("below", {**common, "parent": parent}),
        following=("below", {**common, "parent": chain[-1]}) if more else None,
    )


def tree_children_window(
    session: Session,
    *,
    as_of_seq: int,
    leaf: str | None,
    parent: str,
    after: int,
    skip: str | None,
    rows: int | None = None,
) -> TreeWindow:
    """`parent`'s children after seq `after` (but `skip`, drawn already), `rows` at most,
    oldest first; the entries below each are a subtree window of their own."""
    depth = store.depth_of(session.id, parent)
    if depth is None:
        return _partial(session, [], as_of_seq, leaf, None, 0, above=0)
    return _siblings(session, as_of_seq, leaf, parent, after, skip, rows, depth + 1)


def tree_roots_window(
    session: Session,
    *,
    as_of_seq: int,
    leaf: str | None,
    after: int,
    skip: str | None,
    rows: int | None = None,
) -> TreeWindow:
    """The roots after seq `after` (but `skip`, drawn already), `rows` at most, oldest
    first; the entries below each are a subtree window of their own."""
    return _siblings(session, as_of_seq, leaf, None, after, skip, rows, 0)


def _siblings(
    session: Session,
    as_of: int,
    leaf: str | None,
    parent: str | None,
    after: int,
    skip: str | None,
    rows: int | None,
    depth: int,
) -> TreeWindow:
    count = max(TREE_ROWS if rows is None else rows, 1)
    found = _children_after(session, parent, after, skip, as_of, count + 1)
    more = len(found) > count
    entries = _tree_records(session, [entry_id for entry_id, _ in found[:count]])
    common = {"as_of": as_of, "leaf": leaf}
    kind, place = ("children", {"parent": parent}) if parent else ("roots", {})
    last = found[count - 1][1] if more else None
    return _partial(
        session,
        entries,
        as_of,
        leaf,
        leaf if leaf in {e.id for e in entries} else None,
        depth,
        above=0,
        at=(kind, {**common, **place, "after": after, "skip": skip}),
        following=(kind, {**common, **place, "after": last, "skip": skip}) if more else None,
    )


def _partial(
    session: Session,
    entries: list[EntryRecord],
    as_of: int,
    leaf: str | None,
    active: str | None,
    depth_offset: int,
    *,
    above: int,
    older_end: str | None = None,
    older_below: str | None = None,
    chain_next: str | None = None,
    drawn_children: set[str] | None = None,
    skips: Mapping[str, str | None] | None = None,
    at: TreeAt | None = None,
    previous: TreeAt | None = None,
    following: TreeAt | None = None,
    roots: TreeAt | None = None,
) -> TreeWindow:
    tree = project_tree(entries, active)
    # Entries whose children this window does not draw, and that have some: a subtree.
    others = [e.id for e in entries if e.id not in (drawn_children or set())]
    expandable = frozenset(_with_children(session, others, as_of)) if others else frozenset()
    return TreeWindow(
        tree=tree,
        rows=tree.rows,
        as_of_seq=as_of,
        leaf=leaf,
        partial=True,
        above=above,
        below=0,
        depth_offset=depth_offset,
        older_end=older_end,
        older_below=older_below,
        chain_next=chain_next,
        expandable=expandable,
        more_children=_more_children(session, entries, skips or {}, as_of),
        at=at,
        previous=previous,
        following=following,
        roots=roots,
    )


def _more_children(
    session: Session,
    entries: list[EntryRecord],
    skips: Mapping[str, str | None],
    as_of: int,
) -> Mapping[str, tuple[int, str | None]]:
    """Of the entries whose children a window draws (`skips`: each with its child drawn
    elsewhere), those with more children than it draws: each child drawn is among the
    first by seq, so the others come after the last drawn. One key range each."""
    if not skips:
        return _NONE
    ids = list(skips)
    # The child drawn elsewhere is not among the first by seq: it may be the newest. (A
    # subtree window's parent is no node of its own: its children are read by parent id.)
    drawn: dict[str, int] = {}
    for entry in entries:
        parent = entry.parent_id
        if parent is not None and parent in skips and entry.id != skips[parent]:
            drawn[parent] = max(drawn.get(parent, -1), entry.seq)
    after = [drawn.get(i, -1) for i in ids]
    skip = [skips[i] for i in ids]
    # Each child is looked for among its parent's (`entry_session_parent_seq`), never along
    # the session's seqs: the seq bounds are written `seq + 0` so that no plan can take the
    # seq index's range for them. Taken, that range is read whole for every parent that has
    # no other child (as each entry of a long line has), and after an ANALYZE of other
    # sessions' shapes the planner did take it (300 parents of a 10,000-entry line: 560 ms
    # instead of 1 ms). The parent's children up to `after` are all drawn ones: few.
    with connection.cursor() as cur:
        cur.execute(
            """
            SELECT p.id FROM unnest(%(ids)s::text[], %(after)s::bigint[], %(skip)s::text[])
                AS p(id, after, skip)
            CROSS JOIN LATERAL (
                SELECT 1 FROM sessions_app_entry e
                WHERE e.session_id = %(s)s AND e.parent_id = p.id
                  AND e.seq + 0 > p.after AND e.seq + 0 <= %(as_of)s
                  AND e.entry_id IS DISTINCT FROM p.skip
                LIMIT 1
            ) c
            """,
            {"s": str(session.id), "ids": ids, "after": after, "skip": skip, "as_of": as_of},
        )
        found = {row[0] for row in cur.fetchall()}
    by_id = dict(zip(ids, zip(after, skip, strict=True), strict=True))
    return MappingProxyType({i: by_id[i] for i in ids if i in found})


def _other_roots(session: Session, as_of: int, leaf: str | None, root: str) -> TreeAt | None:
    """The roots window, when the session has a root besides `root` (drawn already)."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT 1 FROM sessions_app_entry WHERE session_id = %s AND parent_id IS NULL "
            "AND seq <= %s AND entry_id <> %s LIMIT 1",
            [str(session.id), as_of, root],
        )
        if cur.fetchone() is None:
            return None
    return ("roots", {"as_of": as_of, "leaf": leaf, "after": -1, "skip": root})


def _children_after(
    session: Session, parent: str | None, after: int, skip: str | None, as_of: int, limit: int
) -> list[tuple[str, int]]:
    """(id, seq) of the first `limit` children of `parent` (None: the roots) after seq
    `after`, but `skip`: a range of the (session, parent, seq) index."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT entry_id, seq FROM sessions_app_entry WHERE session_id = %(s)s "
            "AND parent_id IS NULL AND seq > %(after)s AND seq <= %(as_of)s "
            "AND entry_id IS DISTINCT FROM %(skip)s ORDER BY seq LIMIT %(limit)s"
            if parent is None
            else "SELECT entry_id, seq FROM sessions_app_entry WHERE session_id = %(s)s "
            "AND parent_id = %(p)s AND seq > %(after)s AND seq <= %(as_of)s "
            "AND entry_id IS DISTINCT FROM %(skip)s ORDER BY seq LIMIT %(limit)s",
            {
                "s": str(session.id),
                "p": parent,
                "after": after,
                "as_of": as_of,
                "skip": skip,
                "limit": limit,
            },
        )
        return [(row[0], int(row[1])) for row in cur.fetchall()]


def _children_of(
    session: Session, parents: list[str], exclude: list[str], as_of: int, *, limit: int
) -> list[str]:
    """The first `limit` children of `parents` (not in `exclude`) as of `as_of`, oldest
    first: at most `limit` per parent, each read by the (session, parent) key."""
    with connection.cursor() as cur:
        cur.execute(
            f"""{_PARENTS}
            SELECT c.entry_id FROM parent CROSS JOIN LATERAL (
                SELECT e.entry_id, e.seq FROM sessions_app_entry e
                WHERE e.session_id = %(s)s AND e.parent_id = parent.id
                  AND e.seq + 0 <= %(as_of)s AND e.entry_id <> ALL(%(exclude)s::text[])
                ORDER BY e.seq LIMIT %(limit)s
            ) c
            ORDER BY c.seq LIMIT %(limit)s
            """,
            {
                "s": str(session.id),
                "parents": parents,
                "exclude": exclude,
                "as_of": as_of,
                "limit": limit,
            },
        )
        return [row[0] for row in cur.fetchall()]


def _with_children(session: Session, ids: list[str], as_of: int) -> list[str]:
    """Those of `ids` that had a child as of `as_of`: one key lookup each."""
    with connection.cursor() as cur:
        cur.execute(
            f"""{_PARENTS}
            SELECT parent.id FROM parent CROSS JOIN LATERAL (
                SELECT 1 FROM sessions_app_entry e
                WHERE e.session_id = %(s)s AND e.parent_id = parent.id AND e.seq + 0 <= %(as_of)s
                LIMIT 1
            ) c
            """,
            {"s": str(session.id), "parents": ids, "as_of": as_of},
        )
        return [row[0] for row in cur.fetchall()]


# The distinct ids of %(parents)s, named `parent`. The reads above join to it LATERAL with a
# LIMIT, so that each parent costs one range of the (session, parent) index: Postgres keeps
# no statistics on session_id (migration 0006) and, left to choose, read the whole session
# through the (session, seq) index instead. For the same reason their `as_of` bound is
# written `seq + 0`: no plan can take it as a range of the (session, seq) index.
_PARENTS = "WITH parent AS (SELECT DISTINCT unnest(%(parents)s::text[]) AS id)"


def _newest_chain(session: Session, parent: str, depth: int, as_of: int, count: int) -> list[str]:
    """Down from `parent`, each entry's newest child, at most `count`: one index lookup a
    step (the depth grows at each, so a malformed cycle cannot loop)."""
    with connection.cursor() as cur:
        cur.execute(
            """
            WITH RECURSIVE chain AS (
                SELECT c.entry_id, c.depth, 1 AS n FROM (
                    SELECT e.entry_id, e.depth FROM sessions_app_entry e
                    WHERE e.session_id = %(s)s AND e.parent_id = %(p)s
                      AND e.depth > %(d)s AND e.seq + 0 <= %(as_of)s
                    ORDER BY e.seq DESC LIMIT 1
                ) c
                UNION ALL
                SELECT nx.entry_id, nx.depth, chain.n + 1 FROM chain CROSS JOIN LATERAL (
                    SELECT e.entry_id, e.depth FROM sessions_app_entry e
                    WHERE e.session_id = %(s)s AND e.parent_id = chain.entry_id
                      AND e.depth > chain.depth AND e.seq + 0 <= %(as_of)s
                    ORDER BY e.seq DESC LIMIT 1
                ) nx
                WHERE chain.n < %(count)s
            )
            SELECT entry_id FROM chain ORDER BY n
            """,
            {"s": str(session.id), "p": parent, "d": depth, "as_of": as_of, "count": count},
        )
        return [row[0] for row in cur.fetchall()]
