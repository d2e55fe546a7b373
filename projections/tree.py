"""The branch tree: every entry of the session, the active path, labels and a layout.

Tree shape follows Pi's `getTree()`: roots are entries whose parentId is null, names the
entry itself, or names no entry of the session; children are ordered by timestamp, oldest
first, ties in file order. Malformed parent cycles (which Pi would drop from its tree) are
broken at their earliest entry so that every entry is shown exactly once.

The layout is Pi's `/tree` and HTML export layout (`flattenTree`): rows in depth-first
order, the branch holding the active leaf first at every fork, single-child chains kept at
one indent, with the vertical gutter lines each row needs. A row's own size does not grow
with its depth (an indent number and a connector); only `TreeRow.prefix`, Pi's text
drawing of one row, does, so no door draws a whole tree with it.

Everything is iterative: a session of 100,000 entries is a 100,000-deep chain.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

from projections.chat import content_text, message_of, resolve_leaf, tool_calls_of
from projections.records import EntryRecord

DISPLAY_TEXT_LIMIT = 100


@dataclass(frozen=True, slots=True)
class TreeNode:
    id: str
    parent_id: str | None  # in the tree: None for every root, even an orphan
    type: str
    role: str | None  # the message role for `message` entries
    timestamp: str
    seq: int
    depth: int
    children: tuple[str, ...]  # oldest first
    text: str  # a short one-line description
    label: str | None
    label_timestamp: str | None
    marker: str | None  # "compaction" or "branch_summary"
    on_active_path: bool
    is_leaf: bool  # has no children
    is_current_leaf: bool
    descendants: int
    messages_below: int  # message entries among the descendants
    newest_leaf_id: str  # following the newest child down; where a click on the node goes


@dataclass(frozen=True, slots=True)
class _Gutter:
    """A vertical line at `position` (in indent levels); shared by all rows below a fork,
    as a linked list so that deep trees do not copy it row by row."""

    position: int
    show: bool
    outer: _Gutter | None


@dataclass(frozen=True, slots=True)
class TreeRow:
    """One line of the drawn tree (Pi's flattened node).

    `indent` is Pi's indent, `display_indent` the indent to draw (one less with several
    roots, which hang from a virtual root); `row` is the line number.
    """

    node: TreeNode
    row: int
    indent: int
    display_indent: int
    show_connector: bool
    is_last: bool
    multiple_roots: bool
    is_virtual_root_child: bool
    _gutters: _Gutter | None

    @property
    def connector(self) -> str:
        """The connector just before the node: "├─", "└─" for a child of a fork, else ""."""
        if not self.show_connector or self.is_virtual_root_child:
            return ""
        return "└─" if self.is_last else "├─"

    @property
    def gutters(self) -> tuple[tuple[int, bool], ...]:
        """(position, show) of the vertical lines to the left of this row, outermost first.

        As long as the row is deep: for drawing one row as text (Pi's own look), never for
        every row of a tree, which would grow with the square of its depth."""
        found: list[tuple[int, bool]] = []
        gutter = self._gutters
        while gutter is not None:
            found.append((gutter.position, gutter.show))
            gutter = gutter.outer
        return tuple(reversed(found))

    @property
    def prefix(self) -> str:
        """The connector text in front of the node, e.g. "│  ├─ " (Pi's buildTreePrefix).

        As long as the row is deep (see `gutters`): the doors send `display_indent` and
        `connector` and draw the indentation with CSS."""
        connector = self.show_connector and not self.is_virtual_root_child
        connector_at = self.display_indent - 1 if connector else -1
        by_position: dict[int, bool] = {}
        for position, show in self.gutters:
            by_position.setdefault(position, show)
        cells: list[str] = []
        for level in range(self.display_indent):
            if level in by_position:
                cells.append("│  " if by_position[level] else "   ")
            elif level == connector_at:
                cells.append("└─ " if self.is_last else "├─ ")
            else:
                cells.append("   ")
        return "".join(cells)


@dataclass(frozen=True, slots=True)
class TreeView:
    leaf_id: str | None
    roots: tuple[str, ...]
    active_path: tuple[str, ...]  # root first
    active_ids: frozenset[str]
    nodes: Mapping[str, TreeNode]
    rows: tuple[TreeRow, ...]
    labels: Mapping[str, str]  # target entry id → label
    session_name: str | None  # the latest session_info name in file order
    max_indent: int


def project_tree(entries: Sequence[EntryRecord], leaf_id: str | None) -> TreeView:
    """The whole tree of `entries` (all entries of the session, any order)."""
    ordered = sorted(entries, key=lambda entry: entry.seq)
    by_id = {entry.id: entry for entry in ordered}
    children, roots, parents = _link(ordered, by_id)
    leaf = resolve_leaf(ordered, by_id, leaf_id)
    path = _path(parents, leaf)
    active = frozenset(path)
    labels, label_times = _labels(ordered)
    preorder = _preorder(roots, children)
    counts = _counts(preorder, by_id, children)
    depths = _depths(preorder, children)
    nodes = {
        entry_id: _node(
            by_id[entry_id],
            parents,
            children,
            depths,
            counts,
            labels,
            label_times,
            active,
            leaf,
        )
        for entry_id in preorder
    }
    rows = _layout(roots, children, active, nodes)
    return TreeView(
        leaf_id=leaf,
        roots=tuple(roots),
        active_path=tuple(path),
        active_ids=active,
        nodes=nodes,
        rows=rows,
        labels=labels,
        session_name=_session_name(ordered),
        max_indent=max((row.display_indent for row in rows), default=0),
    )


# --- structure ---------------------------------------------------------------------------


def _time_key(entry: EntryRecord) -> tuple[int, float, int]:
    return time_key(entry.timestamp, entry.seq)


def time_key(timestamp: str, order: int) -> tuple[int, float, int]:
    """Oldest first by the timestamp, then file order; unreadable times go last."""
    try:
        moment = datetime.fromisoformat(timestamp)
    except (TypeError, ValueError):
        return (1, math.inf, order)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (0, moment.timestamp(), order)


def _link(
    ordered: Sequence[EntryRecord], by_id: Mapping[str, EntryRecord]
) -> tuple[dict[str, list[str]], list[str], dict[str, str | None]]:
    children: dict[str, list[str]] = {entry.id: [] for entry in ordered}
    parents: dict[str, str | None] = {}
    roots: list[str] = []
    for entry in ordered:
        parent = entry.parent_id
        if parent is None or parent == entry.id or parent not in by_id:
            roots.append(entry.id)
            parents[entry.id] = None
        else:
            children[parent].append(entry.id)
            parents[entry.id] = parent
    _break_cycles(ordered, children, roots, parents)
    for kids in children.values():
        kids.sort(key=lambda entry_id: _time_key(by_id[entry_id]))
    return children, roots, parents


def _break_cycles(
    ordered: Sequence[EntryRecord],
    children: dict[str, list[str]],
    roots: list[str],
    parents: dict[str, str | None],
) -> None:
    """Entries on a parent cycle are reachable from no root; make the earliest a root."""
    reached = set(_preorder(roots, children))
    for entry in ordered:
        if entry.id in reached:
            continue
        parent = parents[entry.id]
        if parent is not None:
            children[parent].remove(entry.id)
        parents[entry.id] = None
        roots.append(entry.id)
        reached.update(_preorder([entry.id], children))


def _preorder(roots: Sequence[str], children: Mapping[str, Sequence[str]]) -> list[str]:
    order: list[str] = []
    stack = list(reversed(roots))
    while stack:
        entry_id = stack.pop()
        order.append(entry_id)
        stack.extend(reversed(children[entry_id]))
    return order


def _path(parents: Mapping[str, str | None], leaf: str | None) -> list[str]:
    # The tree's own parent links: after cycle breaking they always end at a root, so the
    # active path is exactly a root-to-leaf line of the drawn tree.
    path: list[str] = []
    current = leaf
    while current is not None:
        path.append(current)
        current = parents[current]
    path.reverse()
    return path


def _depths(preorder: Sequence[str], children: Mapping[str, Sequence[str]]) -> dict[str, int]:
    depths: dict[str, int] = {}
    for entry_id in preorder:
        depth = depths.setdefault(entry_id, 0)
        for child in children[entry_id]:
            depths[child] = depth + 1
    return depths


@dataclass
class _Counts:
    descendants: dict[str, int]
    messages: dict[str, int]
    newest_leaf: dict[str, str]


def _counts(
    preorder: Sequence[str],
    by_id: Mapping[str, EntryRecord],
    children: Mapping[str, Sequence[str]],
) -> _Counts:
    # Reverse pre-order visits every child before its parent.
    counts = _Counts({}, {}, {})
    for entry_id in reversed(preorder):
        kids = children[entry_id]
        counts.descendants[entry_id] = sum(counts.descendants[k] + 1 for k in kids)
        counts.messages[entry_id] = sum(
            counts.messages[k] + (by_id[k].type == "message") for k in kids
        )
        counts.newest_leaf[entry_id] = counts.newest_leaf[kids[-1]] if kids else entry_id
    return counts


# --- labels and names --------------------------------------------------------------------


def _labels(ordered: Sequence[EntryRecord]) -> tuple[dict[str, str], dict[str, str]]:
    """Last writer wins in file order across the whole session; an empty label clears."""
    labels: dict[str, str] = {}
    times: dict[str, str] = {}
    for entry in ordered:
        if entry.type != "label":
            continue
        target = entry.data.get("targetId")
        if not isinstance(target, str):
            continue
        label = entry.data.get("label")
        if isinstance(label, str) and label:
            labels[target] = label
            times[target] = entry.timestamp
        else:
            labels.pop(target, None)
            times.pop(target, None)
    return labels, times


def _session_name(ordered: Sequence[EntryRecord]) -> str | None:
    name: str | None = None
    for entry in ordered:
        if entry.type == "session_info":
            value = str(entry.data.get("name") or "").strip()
            name = value or None
    return name


# --- nodes -------------------------------------------------------------------------------


def _node(
    entry: EntryRecord,
    parents: Mapping[str, str | None],
    children: Mapping[str, Sequence[str]],
    depths: Mapping[str, int],
    counts: _Counts,
    labels: Mapping[str, str],
    label_times: Mapping[str, str],
    active: frozenset[str],
    leaf: str | None,
) -> TreeNode:
    role = message_of(entry).get("role")
    return TreeNode(
        id=entry.id,
        parent_id=parents[entry.id],
        type=entry.type,
        role=str(role) if role is not None else None,
        timestamp=entry.timestamp,
        seq=entry.seq,
        depth=depths[entry.id],
        children=tuple(children[entry.id]),
        text=display_text(entry),
        label=labels.get(entry.id),
        label_timestamp=label_times.get(entry.id),
        marker=entry.type if entry.type in ("compaction", "branch_summary") else None,
        on_active_path=entry.id in active,
        is_leaf=not children[entry.id],
        is_current_leaf=entry.id == leaf,
        descendants=counts.descendants[entry.id],
        messages_below=counts.messages[entry.id],
        newest_leaf_id=counts.newest_leaf[entry.id],
    )


def _first_line(text: str) -> str:
    # Look only at the start: a tool result can be megabytes long.
    stripped = text.lstrip()
    end = stripped.find("\n")
    line = (stripped if end < 0 else stripped[:end]).strip()
    if len(line) > DISPLAY_TEXT_LIMIT:
        return line[: DISPLAY_TEXT_LIMIT - 1] + "…"
    return line


# The message of a `tree_entry` of each usual role, shared (no reader changes it).
_ROLES: Mapping[str, Mapping[str, Any]] = {
    role: MappingProxyType({"role": role})
    for role in ("user", "assistant", "toolResult", "bashExecution", "custom", "hookMessage")
}


class _TreeData(dict[str, Any]):
    """The data of a `tree_entry`: what the tree reads, and the entry's description."""

    __slots__ = ("text",)

    def __init__(self, text: str, fields: Mapping[str, Any]) -> None:
        super().__init__(fields)
        self.text = text


def tree_entry(entry: EntryRecord) -> EntryRecord:
    """`entry` as the tree reads it: its data cut to the message's role and the fields of a
    label or a name, with its one-line description made already. `project_tree` lays out
    the same tree from these, so a door can hold the tree of a long session at a few
    hundred bytes an entry however large its entries are (the HTML export)."""
    data = entry.data
    fields: dict[str, Any] = {}
    if entry.type == "message":
        role = message_of(entry).get("role")
        shared = _ROLES.get(role) if isinstance(role, str) else None
        fields["message"] = shared if shared is not None else {"role": role}
    elif entry.type == "label":
        fields = {key: data[key] for key in ("targetId", "label") if key in data}
    elif entry.type == "session_info" and "name" in data:
        fields["name"] = data["name"]
    return EntryRecord(
        entry.id,
        entry.parent_id,
        sys.intern(entry.type),
        entry.timestamp,
        _TreeData(display_text(entry), fields),
        entry.seq,
    )


def display_text(entry: EntryRecord) -> str:
    """A short one-line description of an entry for the tree."""
    data = entry.data
    if isinstance(data, _TreeData):
        return data.text
    if entry.type == "message":
        return _message_text(message_of(entry))
    if entry.type == "model_change":
        return f"model: {data.get('provider', '')}/{data.get('modelId', '')}"
    if entry.type == "thinking_level_change":
        return f"thinking: {data.get('thinkingLevel', '')}"
    if entry.type == "compaction":
        return f"compaction: {_int(data.get('tokensBefore')):,} tokens"
    if entry.type == "branch_summary":
        return _first_line(f"branch summary: {data.get('summary') or '(empty)'}")
    if entry.type == "custom_message":
        text = _first_line(content_text(data.get("content")))
        return _first_line(f"[{data.get('customType', '')}] {text}")
    if entry.type == "custom":
        return f"custom: {data.get('customType', '')}"
    if entry.type == "label":
        label = data.get("label")
        return _first_line(f"label: {label}") if label else "label cleared"
    if entry.type == "session_info":
        name = str(data.get("name") or "").strip()
        return _first_line(f"name: {name or '(cleared)'}")
    if entry.type == "context_edit":
        what = "omitted" if data.get("replacement") is None else "replaced"
        return f"context edit: {data.get('targetId', '')} {what}"
    if entry.type == "usage":
        return f"usage: {data.get('kind', '')}"
    return entry.type


def _message_text(message: Mapping[str, Any]) -> str:
    role = message.get("role")
    content = message.get("content")
    if role == "user":
        text = _first_line(content_text(content))
        return text or ("[image]" if _has_image(content) else "(empty)")
    if role == "assistant":
        return _assistant_text(message)
    if role == "toolResult":
        text = _first_line(content_text(content))
        prefix = "error" if message.get("isError") else "result"
        return _first_line(f"{prefix}: {message.get('toolName', '')} {text}".rstrip())
    if role == "bashExecution":
        return _first_line(f"$ {message.get('command', '')}")
    if role in ("custom", "hookMessage"):
        return _first_line(f"[{message.get('customType', '')}] {content_text(content)}")
    if role == "system":
        return _system_text(message)
    return str(role)


def _system_text(message: Mapping[str, Any]) -> str:
    """What a system message changes: its sections by name, its tools (+added −removed)."""
    parts = []
    sections = message.get("sections")
    if isinstance(sections, Mapping):
        parts += [
            f"{name}{'' if text is not None else ' removed'}" for name, text in sections.items()
        ]
    for key, sign in (("toolsAdded", "+"), ("toolsRemoved", "−")):
        tools = message.get(key)
        if isinstance(tools, list):
            parts += [f"{sign}{t.get('name', '')}" for t in tools if isinstance(t, Mapping)]
    text = content_text(message.get("content"))
    return _first_line(f"system: {', '.join(parts) or text or '(empty)'}")


def _assistant_text(message: Mapping[str, Any]) -> str:
    if message.get("stopReason") == "error":
        return _first_line(f"error: {message.get('errorMessage') or 'unknown error'}")
    text = _first_line(content_text(message.get("content")))
    if text:
        return text
    names = [str(call.get("name", "")) for call in tool_calls_of(message)]
    if names:
        return _first_line(f"tool: {', '.join(names)}")
    if message.get("stopReason") == "aborted":
        return "(aborted)"
    return "(thinking)" if _has_block(message.get("content"), "thinking") else "(empty)"


def _has_image(content: Any) -> bool:
    return _has_block(content, "image")


def _has_block(content: Any, kind: str) -> bool:
    if isinstance(content, str) or not isinstance(content, Sequence):
        return False
    return any(isinstance(block, Mapping) and block.get("type") == kind for block in content)


def _int(value: Any) -> int:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


# --- layout ------------------------------------------------------------------------------


def _active_first(ids: Sequence[str], active: frozenset[str]) -> Sequence[str]:
    # Stable: the branch holding the active leaf first, the rest oldest first.
    if len(ids) < 2:
        return ids
    return sorted(ids, key=lambda entry_id: entry_id not in active)


def _layout(
    roots: Sequence[str],
    children: Mapping[str, Sequence[str]],
    active: frozenset[str],
    nodes: Mapping[str, TreeNode],
) -> tuple[TreeRow, ...]:
    """Pi's flattenTree, row for row."""
    multiple_roots = len(roots) > 1
    # Stack items: (id, indent, just_branched, show_connector, is_last, gutters, virtual)
    stack: list[tuple[str, int, bool, bool, bool, _Gutter | None, bool]] = []
    ordered_roots = _active_first(roots, active)
    for index in range(len(ordered_roots) - 1, -1, -1):
        is_last = index == len(ordered_roots) - 1
        stack.append(
            (
                ordered_roots[index],
                1 if multiple_roots else 0,
                multiple_roots,
                multiple_roots,
                is_last,
                None,
                multiple_roots,
            )
        )
    rows: list[TreeRow] = []
    while stack:
        entry_id, indent, just_branched, show_connector, is_last, gutters, virtual = stack.pop()
        display_indent = max(0, indent - 1) if multiple_roots else indent
        rows.append(
            TreeRow(
                node=nodes[entry_id],
                row=len(rows),
                indent=indent,
                display_indent=display_indent,
                show_connector=show_connector,
                is_last=is_last,
                multiple_roots=multiple_roots,
                is_virtual_root_child=virtual,
                _gutters=gutters,
            )
        )
        kids = _active_first(children[entry_id], active)
        branches = len(kids) > 1
        # A fork indents its children; the first generation after a fork is indented once
        # more to group it; a single-child chain stays flat.
        child_indent = indent + 1 if branches or (just_branched and indent > 0) else indent
        child_gutters = gutters
        if show_connector and not virtual:
            child_gutters = _Gutter(max(0, display_indent - 1), not is_last, gutters)
        for index in range(len(kids) - 1, -1, -1):
            child_last = index == len(kids) - 1
            stack.append(
                (kids[index], child_indent, branches, branches, child_last, child_gutters, False)
            )
    return tuple(rows)


# --- runs --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TreeRun:
    """Rows `start` to `stop` (positions in the rows given to `tree_runs`) of a linear
    stretch, drawn as one line that opens to them."""

    start: int
    stop: int

    @property
    def count(self) -> int:
        return self.stop - self.start


def tree_runs(
    rows: Sequence[TreeRow], keep: Container[str], minimum: int
) -> tuple[TreeRow | TreeRun, ...]:
    """`rows` with the inside of each long linear stretch folded into a run.

    A stretch is a line of rows each the only child of the row before, at one indent. Its
    first and last rows stay, and so do rows whose entry is in `keep` (the leaf, the entry
    asked for, one with further windows of its own), labeled, or a compaction or branch
    summary marker; a run of at least `minimum` other rows between them becomes a TreeRun.
    """
    out: list[TreeRow | TreeRun] = []
    index = 0
    while index < len(rows):
        end = index
        while end + 1 < len(rows) and _continues(rows[end], rows[end + 1]):
            end += 1
        out.append(rows[index])
        out += _folded(rows, index + 1, end, keep, minimum)
        if end > index:
            out.append(rows[end])
        index = end + 1
    return tuple(out)


def _continues(row: TreeRow, following: TreeRow) -> bool:
    node = row.node
    return (
        len(node.children) == 1
        and following.node.parent_id == node.id
        and following.display_indent == row.display_indent
    )


def _folded(
    rows: Sequence[TreeRow], start: int, stop: int, keep: Container[str], minimum: int
) -> list[TreeRow | TreeRun]:
    """Rows `start` to `stop` (the inside of a stretch), runs of unkept rows folded."""
    out: list[TreeRow | TreeRun] = []
    run_start = start
    for index in range(start, stop + 1):
        at_end = index == stop
        kept = not at_end and _kept(rows[index], keep)
        if not (kept or at_end):
            continue
        if index - run_start >= minimum:
            out.append(TreeRun(run_start, index))
        else:
            out += rows[run_start:index]
        if kept:
            out.append(rows[index])
        run_start = index + 1
    return out


def _kept(row: TreeRow, keep: Container[str]) -> bool:
    node = row.node
    return node.id in keep or node.label is not None or node.marker is not None
