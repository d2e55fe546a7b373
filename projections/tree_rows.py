"""The whole branch tree as rows of a few numbers and short texts, for the HTML export.

The rows are those of `project_tree`'s layout, in the same order and with the same values,
for the export's script to draw; `tests/projections/test_tree_rows.py` holds the two side by
side. The export lays out every entry of a session, and `project_tree` keeps a record, a
node and a row object per entry (about 1.5 KB an entry, and most of the export's time):
this keeps an entry's id, parent, type, role, time and one-line text, numbers its entries
and lays them out with lists of numbers, and makes each row only as it is written.

Entries are added in file order (seq order); their data is read once, as they are added,
so the caller may drop each entry at once (the export writes it to the Pi file meanwhile).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from projections.chat import message_of
from projections.records import EntryRecord
from projections.tree import display_text, time_key

# A row: [id, depth, indent, connector (0 none, 1 "├─", 2 "└─"), type, role, text, label,
# newest leaf id, children, descendants, on the active path (0/1), the leaf asked for (0/1):
# none when that leaf is unknown and the path shown ends at the last entry instead)].
TreeRowData = tuple[Any, ...]  # a tuple of numbers and texts: the collector leaves it alone


class TreeRows:
    """The tree of the entries added so far, laid out on demand (`layout`)."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.parent_ids: list[str | None] = []
        self.types: list[str] = []
        self.roles: list[str | None] = []
        self.timestamps: list[str] = []
        self.texts: list[str] = []
        self.labels: dict[str, str] = {}  # target entry id → label, last writer wins
        self.last_seq = -1

    def add(self, entry: EntryRecord) -> None:
        """Keep what the tree reads of `entry`, the next one in file order."""
        if entry.seq <= self.last_seq:
            raise ValueError("tree rows take the entries in seq order")
        self.last_seq = entry.seq
        role = message_of(entry).get("role")
        self.ids.append(entry.id)
        self.parent_ids.append(entry.parent_id)
        self.types.append(sys.intern(entry.type))
        self.roles.append(sys.intern(str(role)) if role is not None else None)
        self.timestamps.append(entry.timestamp)
        self.texts.append(display_text(entry))
        if entry.type == "label":
            self._label(entry.data)

    def _label(self, data: Any) -> None:
        # As `tree._labels`: an empty label clears the target's.
        target = data.get("targetId")
        if not isinstance(target, str):
            return
        label = data.get("label")
        if isinstance(label, str) and label:
            self.labels[target] = label
        else:
            self.labels.pop(target, None)

    def layout(self, leaf_id: str | None) -> TreeLayout:
        """The tree as `project_tree(entries, leaf_id)` lays it out."""
        return _Layout(self, leaf_id).result()


@dataclass(frozen=True, slots=True)
class TreeLayout:
    leaf_id: str | None  # the leaf shown (an unknown one falls back to the last entry)
    nodes: int
    roots: int
    rows: Iterator[TreeRowData]  # every entry once, in the drawn order; made as read


class _Layout:
    """`project_tree`'s steps (`_link`, `_break_cycles`, `resolve_leaf`, `_path`,
    `_counts`, `_depths`, `_layout`) on entry numbers rather than ids and records.

    Children are linked lists in arrays of numbers (an entry's first child, a child's next
    sibling), not a list an entry: a list an entry would outlive the collector's young
    generations and bring on full collections of the whole process."""

    def __init__(self, tree: TreeRows, leaf_id: str | None) -> None:
        self.tree = tree
        self.leaf_id = leaf_id
        count = len(tree.ids)
        self.parents = [-1] * count
        self.first_kid = [-1] * count
        self.next_sibling = [-1] * count
        self.kid_counts = [0] * count
        self.roots: list[int] = []
        self.number = {entry_id: index for index, entry_id in enumerate(tree.ids)}
        self._link()
        self.leaf = self._leaf(leaf_id)
        self.active = [False] * count
        current = self.leaf
        while current >= 0:
            self.active[current] = True
            current = self.parents[current]
        self.depths = [0] * count
        self.descendants = [0] * count
        self.newest_leaf = list(range(count))
        self._counts()

    def result(self) -> TreeLayout:
        leaf = self.tree.ids[self.leaf] if self.leaf >= 0 else None
        return TreeLayout(leaf, len(self.tree.ids), len(self.roots), self._rows())

    def kids(self, index: int) -> list[int]:
        """The children of entry `index`, oldest first."""
        kids: list[int] = []
        kid = self.first_kid[index]
        while kid >= 0:
            kids.append(kid)
            kid = self.next_sibling[kid]
        return kids

    def _set_kids(self, index: int, kids: list[int]) -> None:
        self.first_kid[index] = kids[0] if kids else -1
        for kid, after in zip(kids, kids[1:], strict=False):
            self.next_sibling[kid] = after
        if kids:
            self.next_sibling[kids[-1]] = -1
        self.kid_counts[index] = len(kids)

    def _link(self) -> None:
        number = self.number
        last_kid = [-1] * len(self.parents)
        for index, parent_id in enumerate(self.tree.parent_ids):
            parent = number.get(parent_id, -1) if parent_id is not None else -1
            if parent < 0 or parent == index:
                self.roots.append(index)
                continue
            if last_kid[parent] < 0:
                self.first_kid[parent] = index
            else:
                self.next_sibling[last_kid[parent]] = index
            last_kid[parent] = index
            self.kid_counts[parent] += 1
            self.parents[index] = parent
        self._break_cycles()
        timestamps = self.tree.timestamps
        for index, kid_count in enumerate(self.kid_counts):
            if kid_count > 1:
                kids = self.kids(index)
                kids.sort(key=lambda kid: time_key(timestamps[kid], kid))
                self._set_kids(index, kids)

    def _break_cycles(self) -> None:
        """Entries on a parent cycle are reachable from no root; make the earliest a root."""
        reached = [False] * len(self.parents)
        for index in self._preorder(self.roots):
            reached[index] = True
        for index in range(len(self.parents)):
            if reached[index]:
                continue
            parent = self.parents[index]
            if parent >= 0:
                self._set_kids(parent, [kid for kid in self.kids(parent) if kid != index])
            self.parents[index] = -1
            self.roots.append(index)
            for below in self._preorder([index]):
                reached[below] = True

    def _preorder(self, roots: list[int]) -> list[int]:
        order: list[int] = []
        stack = roots[::-1]
        while stack:
            index = stack.pop()
            order.append(index)
            stack.extend(reversed(self.kids(index)))
        return order

    def _leaf(self, leaf_id: str | None) -> int:
        # As `chat.resolve_leaf`: an unknown leaf is the last entry, a null leaf stays null.
        if leaf_id is None or not self.number:
            return -1
        return self.number.get(leaf_id, len(self.number) - 1)

    def _counts(self) -> None:
        preorder = self._preorder(self.roots)
        depths = self.depths
        for index in preorder:
            for kid in self.kids(index):
                depths[kid] = depths[index] + 1
        descendants, newest = self.descendants, self.newest_leaf
        for index in reversed(preorder):  # every child before its parent
            kids = self.kids(index)
            if kids:
                descendants[index] = sum(descendants[kid] for kid in kids) + len(kids)
                newest[index] = newest[kids[-1]]

    def _active_first(self, kids: list[int]) -> list[int]:
        if len(kids) < 2:
            return kids
        active = self.active
        return sorted(kids, key=lambda kid: not active[kid])

    def _rows(self) -> Iterator[TreeRowData]:
        """Pi's flattenTree, as `tree._layout` runs it, without the gutters (the export
        draws the indentation with CSS)."""
        tree, active = self.tree, self.active
        ids, labels = tree.ids, tree.labels
        multiple_roots = len(self.roots) > 1
        # Stack items: (entry, indent, just branched, shows a connector, is last, virtual)
        stack: list[tuple[int, int, bool, bool, bool, bool]] = []
        roots = self._active_first(self.roots)
        for place in range(len(roots) - 1, -1, -1):
            is_last = place == len(roots) - 1
            indent = 1 if multiple_roots else 0
            stack.append(
                (roots[place], indent, multiple_roots, multiple_roots, is_last, multiple_roots)
            )
        while stack:
            index, indent, just_branched, show_connector, is_last, virtual = stack.pop()
            connector = 0 if not show_connector or virtual else 2 if is_last else 1
            entry_id = ids[index]
            yield (
                entry_id,
                self.depths[index],
                max(0, indent - 1) if multiple_roots else indent,
                connector,
                tree.types[index],
                tree.roles[index],
                tree.texts[index],
                labels.get(entry_id),
                ids[self.newest_leaf[index]],
                self.kid_counts[index],
                self.descendants[index],
                int(active[index]),
                int(entry_id == self.leaf_id),
            )
            kids = self._active_first(self.kids(index))
            branches = len(kids) > 1
            # A fork indents its children; the first generation after a fork is indented
            # once more to group it; a single-child chain stays flat.
            child_indent = indent + 1 if branches or (just_branched and indent > 0) else indent
            for place in range(len(kids) - 1, -1, -1):
                child_last = place == len(kids) - 1
                stack.append((kids[place], child_indent, branches, branches, child_last, False))
