"""Bar charts drawn on the server as SVG geometry.

The pages' Content-Security-Policy allows no inline style, so a chart is a set of numbers
that a template writes as SVG attributes (x, y, width, height), with colours from the
stylesheet by class. Two shapes: columns over time (`column_chart`) and labelled horizontal
bars (`bar_chart`). Each bar keeps its label and value text for a tooltip, and the page
shows the same numbers in a table beside the chart.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Literal

Period = Literal["day", "week", "month"]


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    label: str
    value: str  # the value as shown (a tooltip, and the text beside a horizontal bar)


@dataclass(frozen=True)
class Tick:
    x: float
    y: float
    label: str


@dataclass(frozen=True)
class Chart:
    kind: Literal["columns", "bars"]
    width: int
    height: int
    bars: tuple[Bar, ...]
    # Columns: the value axis, a grid line each. Bars: each bar's value, beside it.
    value_ticks: tuple[Tick, ...]
    label_ticks: tuple[Tick, ...]  # the category labels
    plot_left: float
    plot_right: float
    plot_top: float
    plot_bottom: float

    @property
    def empty(self) -> bool:
        return not self.bars


def nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 or 10 times a power of ten that is at least `value`."""
    if value <= 1e-12:
        # Nothing to show (or too little to draw): an axis up to 1 leaves the bars flat.
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if value <= step * power * (1 + 1e-9):
            return step * power
    return 10 * power


def column_chart(
    points: Sequence[tuple[str, float]],
    *,
    value_text: Callable[[float], str],
    width: int = 560,
    height: int = 220,
    max_labels: int = 10,
) -> Chart:
    """Vertical bars, one per point, in order (time runs left to right)."""
    left, right, top, bottom = 64.0, float(width - 8), 10.0, float(height - 24)
    top_value = nice_ceiling(max((v for _, v in points), default=0.0))
    slot = (right - left) / max(len(points), 1)
    gap = min(slot * 0.2, 4.0)
    bars = tuple(
        Bar(
            x=round(left + i * slot + gap / 2, 2),
            y=round(bottom - (bottom - top) * value / top_value, 2),
            width=round(max(slot - gap, 1.0), 2),
            height=round((bottom - top) * value / top_value, 2),
            label=label,
            value=value_text(value),
        )
        for i, (label, value) in enumerate(points)
    )
    every = max(1, math.ceil(len(points) / max_labels))
    label_ticks = tuple(
        Tick(round(left + (i + 0.5) * slot, 2), bottom + 16, label)
        for i, (label, _) in enumerate(points)
        if i % every == 0
    )
    value_ticks = tuple(
        Tick(left - 6, round(bottom - (bottom - top) * k / 4, 2), value_text(top_value * k / 4))
        for k in range(5)
    )
    return Chart("columns", width, height, bars, value_ticks, label_ticks, left, right, top, bottom)


def bar_chart(
    points: Sequence[tuple[str, float]],
    *,
    value_text: Callable[[float], str],
    width: int = 520,
    row: int = 22,
    label_width: int = 170,
    value_width: int = 80,
) -> Chart:
    """Horizontal bars, one per point, top to bottom, each labelled on its left and its
    value written on its right."""
    left, right = float(label_width), float(width - value_width)
    top = 4.0
    height = int(top * 2 + row * max(len(points), 1))
    top_value = nice_ceiling(max((v for _, v in points), default=0.0))
    bars = tuple(
        Bar(
            x=left,
            y=top + i * row + 3,
            width=round(max((right - left) * value / top_value, 0.0), 2),
            height=row - 6,
            label=label,
            value=value_text(value),
        )
        for i, (label, value) in enumerate(points)
    )
    label_ticks = tuple(
        Tick(left - 8, top + i * row + row / 2 + 4, label) for i, (label, _) in enumerate(points)
    )
    value_ticks = tuple(
        Tick(round(bar.x + bar.width + 6, 2), bar.y + bar.height - 4, bar.value) for bar in bars
    )
    return Chart(
        "bars", width, height, bars, value_ticks, label_ticks, left, right, top, height - top
    )


def period_of(first: date, last: date) -> Period:
    """Days for up to two months, weeks for up to two years, months beyond."""
    span = (last - first).days
    if span <= 62:
        return "day"
    if span <= 731:
        return "week"
    return "month"


def period_start(day: date, period: Period) -> date:
    if period == "week":
        return day - timedelta(days=day.weekday())
    if period == "month":
        return day.replace(day=1)
    return day


def period_starts(first: date, last: date, period: Period) -> list[date]:
    """Every period from the one holding `first` to the one holding `last`, so that a
    period without requests is drawn as an empty slot, not skipped."""
    starts: list[date] = []
    current = period_start(first, period)
    while current <= last:
        starts.append(current)
        if period == "day":
            current += timedelta(days=1)
        elif period == "week":
            current += timedelta(days=7)
        else:
            current = (current.replace(day=28) + timedelta(days=4)).replace(day=1)
    return starts


def period_label(start: date, period: Period) -> str:
    if period == "month":
        return start.strftime("%Y-%m")
    return start.isoformat()
