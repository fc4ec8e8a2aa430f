"""The report's charts (``jobs.serving.charts``) as geometry, worked by hand, and as drawn by
``jobs/templates/charts.html``: every mark with its exact value, any text escaped."""

from __future__ import annotations

import re

from jobs.common.pages import _environment
from jobs.serving import charts


def test_stacked_bars_are_scaled_to_the_longest_bar_and_say_their_totals():
    c = charts.bars("c", [("a", [("push", 3.0), ("pull", 1.0)]), ("b", [("push", 2.0)])])
    # the longest bar (4.0) is 400 wide from x = 190; rows 22 apart, marks 16 high
    assert [(m.series, m.x, m.y, m.width, m.height, m.value) for m in c.marks] == [
        ("push", 190.0, 3, 300.0, 16, 3.0),
        ("pull", 490.0, 3, 100.0, 16, 1.0),
        ("push", 190.0, 25, 200.0, 16, 2.0),
    ]
    assert [(t.x, t.text) for t in c.texts] == [(0, "a"), (596.0, "4.0"), (0, "b"), (396.0, "2.0")]
    assert (c.width, c.height) == (720, 50)


def test_lines_split_where_a_value_is_missing_and_columns_stand_on_one_base():
    c = charts.lines("t", ["01", "02", "03", "04"], {"served": [1.0, None, 2.0, 2.0]})
    assert len(c.lines) == 2 and [m.value for m in c.marks] == [1.0, 2.0, 2.0]
    assert c.lines[0].points.count(",") == 1 and c.lines[1].points.count(",") == 2
    col = charts.columns("h", ["1", "2"], [0.75, 0.25], "latency")
    assert [(m.y + m.height, m.height) for m in col.marks] == [(180.0, 160.0), (180.0, 160 / 3)]


def test_the_macros_draw_every_mark_with_its_value_and_escape_labels():
    c = charts.bars("chart-cost", [("<b>x</b>", [("maintenance", 2.5), ("evaluation", 0.5)])])
    macros = _environment().get_template("charts.html").make_module({"colours": charts.COLOURS})
    svg = str(macros.chart(c))
    assert re.findall(r'data-value="([^"]+)"', svg) == ["2.5", "0.5"]
    assert "<b>x</b>" not in svg and "&lt;b&gt;x&lt;/b&gt;" in svg
    assert 'id="chart-cost"' in svg and 'class="maintenance"' in svg
