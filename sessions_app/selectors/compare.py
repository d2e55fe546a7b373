"""Two branches of a session compared, read for one window of rows.

Both branches are below their common ancestor, and every entry is appended after its
parent, so all of them lie in the seqs from the ancestor's to the later leaf's. That range
is read backwards from the leaves, a chunk at a time (each twice the last), ids only,
until the two climbs from the leaves meet or pass their roots: the work follows the
distance from the leaves back to their ancestor, never the rest of the session.

Then: the entries of the rows shown; the few facts the totals sum of each branch entry
(its role, an assistant message's tokens, cost and tool calls, a tool result's error
flag), read as one range; one aggregate row per turn of either branch (its requests,
whether it was interrupted, its wall time), read as one range of the log; and the two
leaves' next contexts (their kept windows; without a compaction, the path above the
ancestor is read once).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from django.db import connection

from projections.chat import NOT_STARTED, OUTCOME_UNKNOWN
from projections.compare import (
    DEFAULT_COMPARE_ROWS,
    BranchComparison,
    BranchTotals,
    compare_window,
    next_context,
    window_bounds,
)
from projections.context import SessionContext
from sessions_app import store
from sessions_app.models import Session
from sessions_app.selectors import ceilings
from sessions_app.selectors.context import session_context

FIRST_CHUNK = 4096  # seqs read back from the later leaf at first; each next chunk doubles

# What the trace counts, read where it is: an assistant message's usage (its totalTokens,
# or the sum of its parts), its tool calls, and a tool result's error flag.
_ROLE = "CASE WHEN e.type = 'message' THEN e.data #>> '{message,role}' END"


def _number(*path: str) -> str:
    at = f"e.data #> '{{message,{','.join(path)}}}'"
    return f"CASE WHEN jsonb_typeof({at}) = 'number' THEN trunc(({at})::numeric) ELSE 0 END"


_TOKENS = (
    f"coalesce(nullif({_number('usage', 'totalTokens')}, 0), "
    + " + ".join(_number("usage", p) for p in ("input", "output", "cacheRead", "cacheWrite"))
    + ")"
)
_COST = (
    "CASE WHEN jsonb_typeof(e.data #> '{message,usage,cost,total}') = 'number' "
    "THEN (e.data #> '{message,usage,cost,total}')::float8 ELSE 0 END"
)
_CALLS = (
    "CASE WHEN jsonb_typeof(e.data #> '{message,content}') = 'array' THEN jsonb_array_length("
    "jsonb_path_query_array(e.data, '$.message.content[*] ? (@.type == \"toolCall\")')) "
    "ELSE 0 END"
)
# The climb reads ids only; the facts are read for the branches' entries alone.
_RANGE = """
SELECT e.entry_id, e.parent_id, e.depth, e.seq FROM sessions_app_entry e
WHERE e.session_id = %(s)s AND e.seq >= %(lo)s AND e.seq < %(hi)s
"""
# Every entry in the branches' range of seqs; the caller keeps the branches' own.
_FACTS = f"""
SELECT e.seq, f.role,
       CASE WHEN f.role = 'assistant' THEN {_TOKENS} ELSE 0 END,
       CASE WHEN f.role = 'assistant' THEN {_COST} ELSE 0 END,
       CASE WHEN f.role = 'assistant' THEN {_CALLS} ELSE 0 END,
       f.role = 'toolResult' AND coalesce(e.data #> '{{message,isError}}' = 'true'::jsonb, false)
FROM sessions_app_entry e
CROSS JOIN LATERAL (SELECT {_ROLE} AS role) f
WHERE e.session_id = %(s)s AND e.seq >= %(lo)s AND e.seq <= %(hi)s
"""

# The turns that wrote the branches' entries, read as one range of the log: one turn runs
# at a time, so only the turns of the range's first and last events reach past it, and the
# range is widened to hold them whole. Per turn: the seqs of the entries it wrote; its
# requests (the manifests, or the replies where a reply has none); whether it was
# interrupted; and its wall time in microseconds, to its turn/end or, for an interrupted
# turn, to the last event its own process wrote (recovery's closers come later). A turn
# still open has no wall time.
_TURNS = """
WITH bounds AS (
    SELECT least(%(lo)s, min(e.seq)) AS lo, greatest(%(hi)s, max(e.seq)) AS hi
    FROM sessions_app_event e
    WHERE e.session_id = %(s)s AND e.turn IN (
        SELECT x.turn FROM sessions_app_event x
        WHERE x.session_id = %(s)s AND x.seq IN (%(lo)s, %(hi)s) AND x.turn IS NOT NULL
    )
)
SELECT entries, greatest(sent, replies), interrupted,
       (extract(epoch FROM CASE WHEN interrupted THEN coalesce(alive, started) ELSE ended END
                         - started) * 1000000)::bigint
FROM (
    SELECT turn,
           array_agg(seq) FILTER (WHERE adds) AS entries,
           count(*) FILTER (WHERE type = 'request/sent') AS sent,
           count(*) FILTER (WHERE type = 'assistant/message') AS replies,
           min(time) AS started,
           max(time) FILTER (WHERE type = 'turn/end') AS ended,
           coalesce(bool_or(reason = 'interrupted') FILTER (WHERE type = 'turn/end'), false)
               AS interrupted,
           max(time) FILTER (WHERE type NOT IN ('turn/end', 'step/end') AND NOT recovered)
               AS alive
    FROM (
        SELECT e.seq, e.turn, e.type, e.time, e.entry_id IS NOT NULL AS adds,
               CASE WHEN e.type = 'turn/end' THEN e.data->>'reason' END AS reason,
               e.type = 'tool/result'
                   AND coalesce(e.data->>'error_code', '') = ANY(%(cut)s) AS recovered
        FROM sessions_app_event e, bounds
        WHERE e.session_id = %(s)s AND e.seq >= bounds.lo AND e.seq <= bounds.hi
          AND e.turn IS NOT NULL
        OFFSET 0  -- narrow rows first: the sort below carries no data
    ) e
    GROUP BY turn
) t
WHERE entries IS NOT NULL
"""


# One entry where it hangs: (id, parent id, depth, seq), as the range read gives it.
_Node = tuple[str, str | None, int, int]
# What the totals sum of one entry: (seq, role, tokens, cost, tool calls, error).
_Facts = tuple[int, str | None, int, float, int, bool]


@dataclass(frozen=True)
class Branch:
    """The entries below the common ancestor on one side, root side first."""

    nodes: list[_Node] = field(default_factory=list)

    @property
    def ids(self) -> list[str]:
        return [node[0] for node in self.nodes]

    @property
    def seqs(self) -> list[int]:
        return [node[3] for node in self.nodes]


@dataclass(frozen=True)
class Divergence:
    ancestor: str | None
    depth: int  # the ancestor's, -1 without one
    a: Branch
    b: Branch


@dataclass
class _Climb:
    """The path from a leaf up, as far as it has gone."""

    at: str | None  # the next entry to climb to; None past the root
    path: list[_Node] = field(default_factory=list)

    def step(self, node: _Node) -> None:
        """Climb onto `node`, then to its parent. A root (depth 0, an orphan too) ends the
        climb, and so would a parent whose stored depth is not below its child's: depth
        falls at each step, so a climb takes at most the leaf's depth + 1 steps whatever
        the parent ids say (a parent cycle stored before they were refused included)."""
        if self.path and node[2] >= self.path[-1][2]:
            self.at = None
            return
        self.path.append(node)
        self.at = node[1] if node[2] > 0 else None


def _climb_both(
    known: dict[str, _Node], a: _Climb, b: _Climb, *, complete: bool
) -> tuple[bool, str | None, int]:
    """Climb from both leaves at once, the deeper one first, until both stand on the same
    entry (their deepest common one), both pass their roots, or the entries read so far
    end. (whether done, the common entry, its depth.) `complete`: the entries read reach
    the session's start, so a parent not read names no entry (Pi keeps such an entry as a
    root)."""
    while True:
        if complete:
            for climb in (a, b):
                if climb.at is not None and climb.at not in known:
                    climb.at = None
        if a.at is None and b.at is None:
            return True, None, -1
        node_a = known.get(a.at) if a.at is not None else None
        node_b = known.get(b.at) if b.at is not None else None
        if a.at is not None and a.at == b.at:
            return (True, node_a[0], node_a[2]) if node_a is not None else (False, None, -1)
        # The deeper side climbs (a side past its root waits); an entry not read stops both.
        if b.at is None or (node_a is not None and node_b is not None and node_a[2] >= node_b[2]):
            side, node = a, node_a
        elif a.at is None or (node_a is not None and node_b is not None):
            side, node = b, node_b
        else:
            return False, None, -1
        if node is None:
            return False, None, -1
        side.step(node)


def divergence(session: Session, a: str, b: str) -> Divergence:
    """Where the paths to `a` and to `b` part (both must exist), and the entries below on
    each side. Each chunk read lets both climbs go on from where they stopped."""
    heads = {e.id: e for e in store.entries_by_id(session.id, [a, b])}
    hi = max(heads[a].seq, heads[b].seq) + 1
    known: dict[str, _Node] = {}
    climb_a, climb_b = _Climb(a), _Climb(b)
    chunk = FIRST_CHUNK
    while True:
        lo = max(0, hi - chunk)
        known.update((row[0], row) for row in _read_range(session, lo, hi))
        done, top, depth = _climb_both(known, climb_a, climb_b, complete=lo == 0)
        if done:
            break
        hi, chunk = lo, chunk * 2
    return Divergence(top, depth, Branch(climb_a.path[::-1]), Branch(climb_b.path[::-1]))


def _read_range(session: Session, lo: int, hi: int) -> list[_Node]:
    with connection.cursor() as cur:
        cur.execute(_RANGE, {"s": str(session.id), "lo": lo, "hi": hi})
        return cur.fetchall()


def _read_facts(session: Session, seqs: list[int]) -> dict[int, _Facts]:
    """The facts of the entries at `seqs` (those of the others in their range are read and
    left)."""
    if not seqs:
        return {}
    wanted = set(seqs)
    with connection.cursor() as cur:
        cur.execute(_FACTS, {"s": str(session.id), "lo": min(seqs), "hi": max(seqs)})
        return {row[0]: row for row in cur.fetchall() if row[0] in wanted}


def ancestor_depth(session: Session, a: str, b: str) -> int:
    """The depth of the deepest entry on both paths (to `a` and to `b`), -1 when none."""
    return divergence(session, a, b).depth


def branch_comparison(
    session: Session, a: str, b: str, *, offset: int = 0, limit: int = DEFAULT_COMPARE_ROWS
) -> BranchComparison:
    """The comparison of the branches to entries `a` and `b` (both must exist), its rows from
    `offset` (counted from the divergence) on, at most `limit` of them."""
    split = divergence(session, a, b)
    ids_a, ids_b = split.a.ids, split.b.ids
    offset, end = window_bounds(len(ids_a), len(ids_b), offset=offset, limit=limit)
    wanted = ids_a[offset:end] + ids_b[offset:end] + ([split.ancestor] if split.ancestor else [])
    found = {e.id: e for e in store.entries_by_id(session.id, wanted)}
    totals_a, totals_b = branch_totals(session, split.a, split.b)
    return compare_window(
        ancestor=found.get(split.ancestor) if split.ancestor else None,
        leaf_a=a,
        leaf_b=b,
        window_a=[found[i] for i in ids_a[offset:end]],
        window_b=[found[i] for i in ids_b[offset:end]],
        lengths=(len(ids_a), len(ids_b)),
        offset=offset,
        limit=limit,
        totals=(totals_a, totals_b),
        contexts=_contexts(session, a, b, split),
    )


def _contexts(
    session: Session, a: str, b: str, split: Divergence
) -> tuple[SessionContext, SessionContext]:
    if _compacted(session, a, b):
        # A context starts at its path's latest compaction: read the two kept windows.
        return session_context(session, a), session_context(session, b)
    # Without a compaction each context is the whole path: the path to A is read once,
    # and B's below the ancestor; neither past the ceiling of a whole read.
    for leaf in (a, b):
        if ceilings.path_over(session.id, leaf, min_depth=0, max_bytes=ceilings.whole_read_bytes()):
            raise ceilings.context_too_large(session.id, leaf)
    path_a = store.path_to_root(session.id, a)
    below_b = store.path_to_root(session.id, b, min_depth=split.depth + 1) if split.b.ids else []
    return next_context(path_a), next_context(path_a[: split.depth + 1] + below_b)


def _compacted(session: Session, *leaves: str) -> bool:
    """Whether a compaction lies on the path to any of `leaves` (each entry records its
    path's latest one on append)."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT 1 FROM sessions_app_entry WHERE session_id = %s AND entry_id = ANY(%s) "
            "AND path_compaction IS NOT NULL LIMIT 1",
            [str(session.id), list(leaves)],
        )
        return cur.fetchone() is not None


_TurnFacts = tuple[int, bool, int | None]  # requests, interrupted, wall time (µs)


def branch_totals(session: Session, a: Branch, b: Branch) -> tuple[BranchTotals, BranchTotals]:
    """Totals of each branch below the ancestor: its messages', and those of the turns that
    wrote its entries. A turn that wrote entries on both sides of the divergence counts on
    both. One read of the entries' facts and one of the turns, for both branches."""
    seqs_a, seqs_b = a.seqs, b.seqs
    facts = _read_facts(session, sorted(set(seqs_a) | set(seqs_b)))
    turns_a: list[_TurnFacts] = []
    turns_b: list[_TurnFacts] = []
    if facts:
        with connection.cursor() as cur:
            cur.execute(
                _TURNS,
                {
                    "s": str(session.id),
                    "lo": min(facts),
                    "hi": max(facts),
                    "cut": [OUTCOME_UNKNOWN, NOT_STARTED],
                },
            )
            rows = cur.fetchall()
        on_a, on_b = set(seqs_a), set(seqs_b)
        for entries, requests, interrupted, wall_us in rows:
            turn = (int(requests), bool(interrupted), wall_us)
            if not on_a.isdisjoint(entries):
                turns_a.append(turn)
            if not on_b.isdisjoint(entries):
                turns_b.append(turn)
    return (
        _totals([facts[s] for s in seqs_a], turns_a),
        _totals([facts[s] for s in seqs_b], turns_b),
    )


def _totals(entries: list[_Facts], turns: list[_TurnFacts]) -> BranchTotals:
    replies = [e for e in entries if e[1] == "assistant"]
    wall_us = sum(us for _, _, us in turns if us is not None)
    return BranchTotals(
        entries=len(entries),
        tokens=int(sum(e[2] for e in replies)),
        cost=float(sum(e[3] for e in replies)),
        responses=len(replies),
        tool_calls=int(sum(e[4] for e in replies)),
        tool_errors=sum(1 for e in entries if e[5]),
        model_requests=sum(requests for requests, _, _ in turns),
        interrupted_turns=sum(1 for _, cut, _ in turns if cut),
        wall_time_ms=int(timedelta(microseconds=wall_us).total_seconds() * 1000),
    )
