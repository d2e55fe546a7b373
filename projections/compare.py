"""Two branches of one session side by side: where they diverge and what that changed.

`compare_branches` folds the entries of two root→leaf paths and the events of the turns
that wrote each branch into a `BranchComparison`:

- the common ancestor (the last entry both paths share; None when they share no root);
- the entries below it on each path, aligned position by position (row i holds the i-th
  entry after the divergence on each side), windowed by `offset` and `limit`, with `more`
  the offset of the next window when rows remain;
- per-branch totals: tokens, cost, tool calls and tool errors from the branch's own
  messages (so an imported session without turns still has them), model requests,
  interrupted turns and wall time from the trace of its turns;
- the diff of the contexts a model would receive next on each leaf.

A turn that wrote entries on both sides of the divergence (a branch made inside a turn)
counts on both branches: the events carry no entry to split it by.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from projections.chat import Usage, content_text, tool_calls_of
from projections.context import SessionContext, build_session_context, entry_message
from projections.records import EntryRecord, EventRecord
from projections.tokens import estimate_tokens
from projections.trace import TraceSpan, project_trace

DEFAULT_COMPARE_ROWS = 50
EXCERPT_CHARS = 400  # of each message's text in a row; the entry itself is a link away


@dataclass(frozen=True, slots=True)
class CompareItem:
    """One entry of a branch as a row shows it. `kind` is the message role (`user`,
    `assistant`, `toolResult`, `bashExecution`, `custom`) or the entry type for entries
    that are not messages (`compaction`, `branch_summary`, `model_change`, ...)."""

    entry_id: str
    kind: str
    text: str
    tool_calls: tuple[str, ...] = ()  # the names of the tools an assistant message called
    tool_name: str | None = None  # a tool result's tool
    is_error: bool = False


@dataclass(frozen=True, slots=True)
class CompareRow:
    index: int  # 0 is the first entry after the common ancestor
    a: CompareItem | None
    b: CompareItem | None


@dataclass(frozen=True, slots=True)
class BranchTotals:
    entries: int
    tokens: int
    cost: float
    responses: int  # assistant messages on the branch
    tool_calls: int
    tool_errors: int
    model_requests: int  # request spans of the branch's turns
    interrupted_turns: int
    wall_time_ms: int  # summed over the branch's ended (or last seen) turns


@dataclass(frozen=True, slots=True)
class MessageChange:
    """One line of the context diff: `kind` is added (only in B), removed (only in A) or
    changed (at the same place, different)."""

    kind: str
    position: int  # in B's context for added and changed, in A's for removed
    a: CompareItem | None
    b: CompareItem | None


@dataclass(frozen=True, slots=True)
class ContextDiff:
    messages_a: int
    messages_b: int
    tokens_a: int
    tokens_b: int
    shared: int  # messages equal in both, at the start
    changes: tuple[MessageChange, ...]  # the first `limit` changes
    more_changes: int  # changes left out of `changes`

    @property
    def token_delta(self) -> int:
        return self.tokens_b - self.tokens_a


@dataclass(frozen=True, slots=True)
class BranchComparison:
    ancestor: CompareItem | None
    leaf_a: str | None
    leaf_b: str | None
    rows: tuple[CompareRow, ...]
    offset: int
    total_rows: int
    more: int | None  # the offset of the next window, None at the end
    totals_a: BranchTotals
    totals_b: BranchTotals
    context: ContextDiff


def common_ancestor_depth(path_a: Sequence[EntryRecord], path_b: Sequence[EntryRecord]) -> int:
    """The depth of the last entry both root→leaf paths share, -1 when none."""
    depth = -1
    for a, b in zip(path_a, path_b, strict=False):
        if a.id != b.id:
            break
        depth += 1
    return depth


def compare_branches(
    path_a: Sequence[EntryRecord],
    path_b: Sequence[EntryRecord],
    *,
    events_a: Sequence[EventRecord] = (),
    events_b: Sequence[EventRecord] = (),
    offset: int = 0,
    limit: int = DEFAULT_COMPARE_ROWS,
    contexts: tuple[SessionContext, SessionContext] | None = None,
) -> BranchComparison:
    """The comparison of the two paths (root first, leaf last). `events_a` and `events_b` are
    every event of the turns that wrote each branch below the common ancestor.

    Both paths may instead start at the same depth at or above the common ancestor (a store
    reads only the branches then); `contexts` are then the two leaves' contexts, built from
    their kept windows, since the paths alone no longer reach the root."""
    depth = common_ancestor_depth(path_a, path_b)
    branch_a, branch_b = path_a[depth + 1 :], path_b[depth + 1 :]
    offset, end = window_bounds(len(branch_a), len(branch_b), offset=offset, limit=limit)
    return compare_window(
        ancestor=path_a[depth] if depth >= 0 else None,
        leaf_a=path_a[-1].id if path_a else None,
        leaf_b=path_b[-1].id if path_b else None,
        window_a=branch_a[offset:end],
        window_b=branch_b[offset:end],
        lengths=(len(branch_a), len(branch_b)),
        offset=offset,
        limit=limit,
        totals=(branch_totals(branch_a, events_a), branch_totals(branch_b, events_b)),
        contexts=contexts or (next_context(path_a), next_context(path_b)),
    )


def window_bounds(length_a: int, length_b: int, *, offset: int, limit: int) -> tuple[int, int]:
    """The rows [start, end) a window from `offset` of at most `limit` rows shows of two
    branches of these lengths below their ancestor."""
    total = max(length_a, length_b)
    start = max(0, min(offset, total))
    return start, min(total, start + max(1, limit))


def compare_window(
    *,
    ancestor: EntryRecord | None,
    leaf_a: str | None,
    leaf_b: str | None,
    window_a: Sequence[EntryRecord],
    window_b: Sequence[EntryRecord],
    lengths: tuple[int, int],
    offset: int,
    limit: int,
    totals: tuple[BranchTotals, BranchTotals],
    contexts: tuple[SessionContext, SessionContext],
) -> BranchComparison:
    """The comparison from what a store reads for one window: the entries of each branch
    at rows `offset` on (from `window_bounds`; a branch that ends sooner gives fewer), the
    branches' lengths below the ancestor and their totals, and the two leaves' next
    contexts. Its work follows the window, not the branches' length."""
    total = max(lengths)
    offset, end = window_bounds(*lengths, offset=offset, limit=limit)
    rows = tuple(
        CompareRow(
            index=i,
            a=compare_item(window_a[i - offset]) if i - offset < len(window_a) else None,
            b=compare_item(window_b[i - offset]) if i - offset < len(window_b) else None,
        )
        for i in range(offset, end)
    )
    return BranchComparison(
        ancestor=compare_item(ancestor) if ancestor is not None else None,
        leaf_a=leaf_a,
        leaf_b=leaf_b,
        rows=rows,
        offset=offset,
        total_rows=total,
        more=end if end < total else None,
        totals_a=totals[0],
        totals_b=totals[1],
        context=context_diff(*contexts, limit=limit),
    )


# --- rows --------------------------------------------------------------------------------


def compare_item(entry: EntryRecord) -> CompareItem:
    data = entry.data
    if entry.type == "compaction":
        return CompareItem(entry.id, "compaction", _excerpt(str(data.get("summary") or "")))
    if entry.type == "branch_summary":
        return CompareItem(entry.id, "branch_summary", _excerpt(str(data.get("summary") or "")))
    message = entry_message(entry)
    if message is None:
        return CompareItem(entry.id, entry.type, _excerpt(_entry_note(entry)))
    return message_item(entry.id, message)


def message_item(entry_id: str, message: Mapping[str, Any]) -> CompareItem:
    role = str(message.get("role") or "message")
    if role == "bashExecution":
        text = f"$ {message.get('command') or ''}\n{message.get('output') or ''}"
    elif role in ("branchSummary", "compactionSummary"):
        text = str(message.get("summary") or "")
    else:
        text = content_text(message.get("content"))
    return CompareItem(
        entry_id=entry_id,
        kind=role,
        text=_excerpt(text),
        tool_calls=tuple(str(call.get("name") or "") for call in tool_calls_of(message)),
        tool_name=str(message["toolName"]) if message.get("toolName") else None,
        is_error=bool(message.get("isError")),
    )


def _entry_note(entry: EntryRecord) -> str:
    data = entry.data
    if entry.type == "model_change":
        return f"{data.get('provider') or ''}/{data.get('modelId') or ''}"
    if entry.type == "thinking_level_change":
        return str(data.get("thinkingLevel") or "")
    if entry.type == "label":
        return str(data.get("label") or "")
    return ""


def _excerpt(text: str) -> str:
    return text if len(text) <= EXCERPT_CHARS else text[: EXCERPT_CHARS - 1] + "…"


# --- totals ------------------------------------------------------------------------------


def branch_totals(branch: Sequence[EntryRecord], events: Sequence[EventRecord]) -> BranchTotals:
    usage = Usage()
    responses = tool_calls = tool_errors = 0
    for entry in branch:
        if entry.type in ("usage", "compaction", "branch_summary"):
            # Pi 1.6: usage outside the conversation, and the usage that made a summary.
            usage = usage + (Usage.from_message(entry.data) or Usage())
            continue
        message = entry_message(entry) if entry.type == "message" else None
        if message is None:
            continue
        role = message.get("role")
        if role == "assistant":
            responses += 1
            tool_calls += len(tool_calls_of(message))
            usage = usage + (Usage.from_message(message) or Usage())
        elif role == "toolResult":
            # A tool result's usage (Pi 1.6) is model work the tool did itself.
            usage = usage + (Usage.from_message(message) or Usage())
            tool_errors += 1 if message.get("isError") else 0
    trace = project_trace(events)
    spans = [span for turn in trace.spans for span in _walk(turn)]
    wall = sum((turn.end - turn.start for turn in trace.spans if turn.end is not None), timedelta())
    return BranchTotals(
        entries=len(branch),
        tokens=usage.total_tokens,
        cost=usage.cost,
        responses=responses,
        tool_calls=tool_calls,
        tool_errors=tool_errors,
        model_requests=sum(1 for span in spans if span.kind == "request"),
        interrupted_turns=sum(1 for turn in trace.spans if turn.status == "interrupted"),
        wall_time_ms=int(wall.total_seconds() * 1000),
    )


def _walk(span: TraceSpan) -> list[TraceSpan]:
    found = [span]
    for child in span.children:
        found.extend(_walk(child))
    return found


# --- the next contexts -------------------------------------------------------------------


def context_diff(
    context_a: SessionContext, context_b: SessionContext, *, limit: int = DEFAULT_COMPARE_ROWS
) -> ContextDiff:
    """What the model would receive next on leaf B compared with leaf A."""
    messages_a = context_a.messages
    messages_b = context_b.messages
    keys_a = [_key(m) for m in messages_a]
    keys_b = [_key(m) for m in messages_b]
    shared = 0
    for key_a, key_b in zip(keys_a, keys_b, strict=False):
        if key_a != key_b:
            break
        shared += 1
    # (kind, position, index in A, index in B); only the first `limit` become items.
    found: list[tuple[str, int, int | None, int | None]] = []
    matcher = difflib.SequenceMatcher(a=keys_a, b=keys_b, autojunk=False)
    for tag, a0, a1, b0, b1 in matcher.get_opcodes():
        if tag == "equal":
            continue
        paired = min(a1 - a0, b1 - b0) if tag == "replace" else 0
        found += [("changed", b0 + i, a0 + i, b0 + i) for i in range(paired)]
        found += [("removed", i, i, None) for i in range(a0 + paired, a1)]
        found += [("added", i, None, i) for i in range(b0 + paired, b1)]
    changes = [
        MessageChange(
            kind,
            position,
            _context_item(messages_a[ia]) if ia is not None else None,
            _context_item(messages_b[ib]) if ib is not None else None,
        )
        for kind, position, ia, ib in found[:limit]
    ]
    return ContextDiff(
        messages_a=len(messages_a),
        messages_b=len(messages_b),
        tokens_a=sum(estimate_tokens(m) for m in messages_a),
        tokens_b=sum(estimate_tokens(m) for m in messages_b),
        shared=shared,
        changes=tuple(changes),
        more_changes=max(0, len(found) - limit),
    )


def next_context(path: Sequence[EntryRecord]) -> SessionContext:
    """Pi's context of the path's leaf, from the whole root→leaf path."""
    return build_session_context(path, path[-1].id if path else None)


# Bookkeeping a message carries that no provider payload includes: two answers that differ
# only in when they came or what they cost say the same thing to the next request.
_NOT_SENT = frozenset({"timestamp", "usage"})


def _key(message: Mapping[str, Any]) -> str:
    # Messages are JSON from the entries; their canonical text, less what is never sent to a
    # model, is their identity.
    sent = {k: v for k, v in message.items() if k not in _NOT_SENT}
    return json.dumps(sent, sort_keys=True, ensure_ascii=False, default=str)


def _context_item(message: Mapping[str, Any]) -> CompareItem:
    return message_item("", message)
