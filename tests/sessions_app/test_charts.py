"""Bar charts as SVG geometry: every bar inside the drawing, proportional to its value."""

from __future__ import annotations

from datetime import date

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sessions_app import charts


@pytest.mark.parametrize(
    ("value", "ceiling"),
    [(0, 1), (0.3, 0.5), (1, 1), (1.2, 2), (2.2, 2.5), (7, 10), (99, 100), (1234, 2000)],
)
def test_nice_ceiling(value: float, ceiling: float) -> None:
    assert charts.nice_ceiling(value) == pytest.approx(ceiling)


values = st.lists(st.floats(min_value=0, max_value=1e9, allow_nan=False), max_size=60)


@given(values)
def test_columns_stay_inside_the_plot_and_follow_their_values(points: list[float]) -> None:
    chart = charts.column_chart([(str(i), v) for i, v in enumerate(points)], value_text=str)
    assert len(chart.bars) == len(points)
    for bar in chart.bars:
        assert chart.plot_left <= bar.x and bar.x + bar.width <= chart.plot_right + 0.01
        assert chart.plot_top - 0.01 <= bar.y and bar.y + bar.height <= chart.plot_bottom + 0.01
    if points and max(points) > 1e-12:  # anything less is drawn flat
        largest = chart.bars[points.index(max(points))]
        assert largest.height == max(bar.height for bar in chart.bars) > 0
    assert len(chart.label_ticks) <= 10


@given(values)
def test_bars_stay_inside_the_drawing(points: list[float]) -> None:
    chart = charts.bar_chart([(f"user {i}", v) for i, v in enumerate(points)], value_text=str)
    assert chart.height >= 22 * len(points)
    for bar in chart.bars:
        assert chart.plot_left <= bar.x and bar.x + bar.width <= chart.plot_right + 0.01


def test_periods_cover_every_day_week_or_month_between_the_ends() -> None:
    assert charts.period_of(date(2026, 1, 1), date(2026, 2, 15)) == "day"
    assert charts.period_of(date(2026, 1, 1), date(2026, 9, 1)) == "week"
    assert charts.period_of(date(2024, 1, 1), date(2026, 9, 1)) == "month"
    days = charts.period_starts(date(2026, 2, 27), date(2026, 3, 2), "day")
    assert [d.isoformat() for d in days] == ["2026-02-27", "2026-02-28", "2026-03-01", "2026-03-02"]
    weeks = charts.period_starts(date(2026, 3, 4), date(2026, 3, 18), "week")
    assert weeks == [date(2026, 3, 2), date(2026, 3, 9), date(2026, 3, 16)]
    months = charts.period_starts(date(2025, 11, 30), date(2026, 2, 1), "month")
    assert [charts.period_label(m, "month") for m in months] == [
        "2025-11",
        "2025-12",
        "2026-01",
        "2026-02",
    ]
