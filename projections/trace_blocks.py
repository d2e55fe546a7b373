"""The trace view's turn blocks: each turn's spans placed on the turn's own time scale.

The page and the HTML export draw the trace as blocks of bars, newest turn first; a bar's
`left` and `width` are percents of its turn's duration, kept inside the block and never
thinner than a visible sliver.
"""

from __future__ import annotations

from dataclasses import dataclass

from projections.trace import TraceRow, TraceSpan, TraceView


@dataclass(frozen=True, slots=True)
class TraceBar:
    """One span of a turn block, placed on the turn's own time scale (percent)."""

    row: TraceRow
    depth: int
    left: float
    width: float


@dataclass(frozen=True, slots=True)
class TraceBlock:
    turn: TraceSpan
    bars: tuple[TraceBar, ...]
    duration_ms: int | None

    @property
    def failed_step(self) -> bool:
        """A step of the turn failed on a model request (it has its own error card)."""
        return any(bar.row.span.kind == "step" and bar.row.span.error for bar in self.bars)


def trace_blocks(trace: TraceView | None) -> list[TraceBlock]:
    """The trace's turns, newest first, each with its spans on its own time scale."""
    if trace is None:
        return []
    groups: list[list[TraceRow]] = []
    for row in trace.rows:
        if row.depth == 0 or not groups:
            groups.append([])
        groups[-1].append(row)
    blocks = [_block(group, trace) for group in groups]
    blocks.reverse()
    return blocks


def _block(group: list[TraceRow], trace: TraceView) -> TraceBlock:
    turn = group[0].span
    start = min(row.span.start for row in group)
    end = turn.end or trace.end or turn.start
    end = max([end, *(row.span.end for row in group if row.span.end is not None)])
    total = max((end - start).total_seconds() * 1000, 1.0)

    def place(row: TraceRow) -> TraceBar:
        left = (row.span.start - start).total_seconds() * 1000 / total * 100
        span_end = row.span.end or end
        width = (span_end - row.span.start).total_seconds() * 1000 / total * 100
        left = min(max(left, 0.0), 99.4)
        width = min(max(width, 0.6), 100.0 - left)
        return TraceBar(row=row, depth=row.depth, left=round(left, 2), width=round(width, 2))

    return TraceBlock(
        turn=turn,
        bars=tuple(place(row) for row in group),
        duration_ms=turn.duration_ms,
    )
