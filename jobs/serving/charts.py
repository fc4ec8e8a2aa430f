"""The report's charts as geometry, drawn as inline SVG by the macros of
``jobs/templates/charts.html``: horizontal stacked bars, vertical columns, lines over days.

What a chart shows is computed here (each mark's place, size, colour, value and tooltip); how
it is drawn is the template's. Each mark carries its exact value (``data-value`` in the page),
which the browser tests read back.
"""

from __future__ import annotations

from dataclasses import dataclass

COLOURS = {
    "maintenance": "#4a7fb5",
    "evaluation": "#e39b3a",
    "push": "#4a7fb5",
    "pull": "#e39b3a",
    "view": "#5aa469",
    "latency": "#8e6bb8",
    "served": "#4a7fb5",
    "best pure": "#999999",
    "realized": "#c0392b",
}
"""Series colours (fill), shared by the charts and their legends."""


def num(x: float | None, digits: int = 1) -> str:
    """A number as the report writes every number: thousands separated, ``digits`` decimals;
    empty for none."""
    return "" if x is None else f"{x:,.{digits}f}"


@dataclass(frozen=True)
class Mark:
    """One rect or circle: where, how big, its series (class and colour), value and tooltip."""

    series: str
    x: float
    y: float
    width: float
    height: float
    value: float
    title: str

    @property
    def css(self) -> str:
        return self.series.replace(" ", "-")

    @property
    def colour(self) -> str:
        return COLOURS[self.series]


@dataclass(frozen=True)
class Text:
    x: float
    y: float
    text: str


@dataclass(frozen=True)
class Polyline:
    colour: str
    points: str


@dataclass(frozen=True)
class Chart:
    """One SVG: its id and size, and what is drawn in it."""

    id: str
    width: float
    height: float
    marks: tuple[Mark, ...]
    texts: tuple[Text, ...] = ()
    lines: tuple[Polyline, ...] = ()
    axis: tuple[float, float, float, float] | None = None
    """x1, y1, x2, y2 of a base line."""
    circles: bool = False
    """Marks drawn as points (lines over days), not rects."""


def bars(chart_id: str, rows: list[tuple[str, list[tuple[str, float]]]], digits: int = 1) -> Chart:
    """Horizontal stacked bars: one bar per (label, [(series, value), ...]), each segment
    with its value, its total written after it."""
    label_w, bar_w, row_h = 190, 400, 22
    top = max((sum(v for _, v in segs) for _, segs in rows), default=0.0) or 1.0
    marks, texts = [], []
    for i, (label, segs) in enumerate(rows):
        y = 3 + i * row_h
        texts.append(Text(0, y + 15, label))
        x = float(label_w)
        for series, v in segs:
            w = bar_w * v / top
            title = f"{label}, {series}: {num(v, digits)}"
            marks.append(Mark(series, x, y, w, row_h - 6, v, title))
            x += w
        texts.append(Text(x + 6, y + 15, num(sum(v for _, v in segs), digits)))
    return Chart(chart_id, 720, row_h * len(rows) + 6, tuple(marks), tuple(texts))


def columns(chart_id: str, labels: list[str], values: list[float], series: str) -> Chart:
    """Vertical bars of shares in [0, 1], labelled below and valued above."""
    col_w, h, base = 60, 160, 180
    top = max(values, default=0.0) or 1.0
    marks, texts = [], []
    for i, (label, v) in enumerate(zip(labels, values, strict=True)):
        x, bh = 5 + i * col_w, h * v / top
        title = f"{label} sources: {100 * v:.1f}% of feed views"
        marks.append(Mark(series, x + 8, base - bh, col_w - 16, bh, v, title))
        texts.append(Text(x + 8, base - bh - 4, f"{100 * v:.1f}%"))
        texts.append(Text(x + 8, base + 16, label))
    return Chart(chart_id, col_w * len(labels) + 10, 210, tuple(marks), tuple(texts))


def lines(chart_id: str, labels: list[str], series: dict[str, list[float | None]]) -> Chart:
    """Lines over days: one polyline per series (a missing value splits it), a point per
    value."""
    width, left, h, top_y = 720, 80, 170, 10
    values = [v for vs in series.values() for v in vs if v is not None]
    hi = max(values, default=1.0) * 1.05 or 1.0
    step = (width - left - 20) / max(len(labels) - 1, 1)

    def xy(i: int, v: float) -> tuple[float, float]:
        return left + i * step, top_y + h * (1 - v / hi)

    texts = [Text(0, top_y + 10, num(hi, 0)), Text(0, top_y + h, "0")]
    for i, label in enumerate(labels):
        if len(labels) <= 8 or i % 2 == 0 or i == len(labels) - 1:
            texts.append(Text(left + i * step - 30, top_y + h + 18, label))
    polylines, marks = [], []
    for name, vs in series.items():
        runs: list[list[tuple[float, float]]] = [[]]
        for i, v in enumerate(vs):
            if v is None:
                runs.append([])
            else:
                runs[-1].append(xy(i, v))
        for r in (r for r in runs if r):
            polylines.append(Polyline(COLOURS[name], " ".join(f"{x:.1f},{y:.1f}" for x, y in r)))
        for i, v in enumerate(vs):
            if v is not None:
                x, y = xy(i, v)
                marks.append(Mark(name, x, y, 4, 4, v, f"{labels[i]}, {name}: {num(v)}"))
    return Chart(
        chart_id,
        width,
        h + 50,
        tuple(marks),
        tuple(texts),
        tuple(polylines),
        (left, top_y + h, width - 10, top_y + h),
        circles=True,
    )
