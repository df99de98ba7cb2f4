"""The report's charts: one colour per run, a learning curve drawn as lines only where a label has two
or more iterations, labelled bars when every point is at one iteration, integer x ticks (named where
asked), train and test in panels; policies side by side as rate bars, not a curve."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from webgym_rollout.report import charts
from webgym_rollout.report.charts import (
    PALETTE,
    CurvePoint,
    _curves,
    _learning_curve_figure,
    curve_points,
    learning_curve_svg,
    rate_chart,
    run_colours,
    write_learning_curve,
    write_rate_bars,
)
from webgym_rollout.report.rates import SuccessRate


class Elements(HTMLParser):
    """Every start tag of an SVG or HTML text as (tag, attributes), and the text of <text> elements."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.texts: list[tuple[dict[str, str], str]] = []
        self._open: dict[str, str] | None = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attributes = {k: v or "" for k, v in attrs}
        self.elements.append((tag, attributes))
        if tag == "text":
            self._open = attributes

    def handle_data(self, data):
        if self._open is not None:
            self.texts.append((self._open, data))
            self._open = None

    def find(self, tag: str, **attrs: str) -> list[dict[str, str]]:
        return [a for t, a in self.elements
                if t == tag and all(a.get(k.rstrip("_").replace("_", "-")) == v for k, v in attrs.items())]


def rgb(colour: str) -> tuple[int, int, int]:
    return int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16)


def png_colours(path) -> dict[tuple[int, int, int], int]:
    image = Image.open(path).convert("RGB")
    return {c: n for n, c in image.getcolors(image.width * image.height)}


DEMO = [CurvePoint.from_counts(1, "pixel-random", 0, 7), CurvePoint.from_counts(1, "DOM-aware random", 5, 7),
        CurvePoint.from_counts(1, "trained tiny policy", 3, 7)]


# ----------------------------------------------------------------------------------- colours

def test_run_colours_follow_the_palette_and_keep_given_colours():
    assert run_colours(["a", "b", "a", "c"]) == {"a": PALETTE[0], "b": PALETTE[1], "c": PALETTE[2]}
    # A label given a colour keeps it; the others skip the colours already taken.
    got = run_colours(["a", "b", "c"], {"b": PALETTE[0]})
    assert got == {"b": PALETTE[0], "a": PALETTE[1], "c": PALETTE[2]}
    # Past the palette the colours repeat rather than fail.
    many = run_colours(f"run{i}" for i in range(len(PALETTE) + 2))
    assert list(many.values()) == [*PALETTE, PALETTE[0], PALETTE[1]]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.text(min_size=1, max_size=6), max_size=12),
       st.dictionaries(st.text(min_size=1, max_size=6), st.sampled_from(PALETTE), max_size=3))
def test_run_colours_give_distinct_colours_while_the_palette_lasts(labels, given_colours):
    got = run_colours(labels, given_colours)
    assert set(got) == set(labels) | set(given_colours)
    assert all(got[k] == v for k, v in given_colours.items())
    new = [label for label in dict.fromkeys(labels) if label not in given_colours]
    free = [c for c in PALETTE if c not in given_colours.values()]
    assert [got[label] for label in new[:len(free)]] == free[:len(new)]
    assert run_colours(labels, given_colours) == got  # the same call, the same mapping


def test_rate_chart_draws_each_run_in_its_given_colour():
    rates = [SuccessRate.of(1, 2)]
    svg = Elements(rate_chart("t", ["all"], [("x", rates), ("y", rates)], 95,
                              colours={"y": "#123456"}))
    assert [b["fill"] for b in svg.find("rect", class_="bar", data_run="y")] == ["#123456"]
    assert [b["fill"] for b in svg.find("rect", class_="bar", data_run="x")] == [PALETTE[0]]
    assert svg.find("rect", class_="legend", data_label="y")[0]["fill"] == "#123456"


# ----------------------------------------------------------------------------------- the SVG curve

def test_one_iteration_is_labelled_bars_not_a_line():
    colours = run_colours(p.label for p in DEMO)
    svg = Elements(learning_curve_svg(DEMO, x_label="policy version", colours=colours))
    assert not svg.find("polyline") and not svg.find("polygon")
    bars = svg.find("rect", class_="bar")
    assert [(b["data-label"], b["fill"]) for b in bars] == [(p.label, colours[p.label]) for p in DEMO]
    # Bar heights follow the rates: 5/7 and 3/7 of the same axis; a 0 % bar is still a visible line.
    heights = {b["data-label"]: float(b["height"]) for b in bars}
    assert heights["trained tiny policy"] / heights["DOM-aware random"] == pytest.approx(3 / 5, abs=0.01)
    assert 0 < heights["pixel-random"] <= 1
    texts = [text for _, text in svg.texts]
    assert {"0.0%", "71.4%", "42.9%"} <= set(texts)  # each bar carries its value
    assert [text for a, text in svg.texts if a.get("data-label")] == [p.label for p in DEMO]
    assert "policy version 1" in texts  # the one iteration is named once, as an integer
    assert not [t for t in texts if "." in t and "%" not in t]  # no fractional tick


def test_a_label_measured_once_is_a_point_among_lines():
    points = [CurvePoint.from_counts(v, "train", 2 + v, 10) for v in (0, 1, 2)]
    points.append(CurvePoint.from_counts(2, "test", 3, 10))
    svg = Elements(learning_curve_svg(points))
    assert [line["data-label"] for line in svg.find("polyline")] == ["train"]
    assert len(svg.find("polygon")) == 1  # one band, train's
    assert [c["data-iteration"] for c in svg.find("circle", data_label="test")] == ["2"]
    assert len(svg.find("path", class_="ci")) == 1  # test's interval as a whisker
    ticks = [text for a, text in svg.texts if a.get("class") == "tick" and "%" not in text]
    assert ticks[:3] == ["0", "1", "2"]


def test_many_iterations_get_integer_ticks_including_the_last():
    points = [CurvePoint.from_counts(v, "train", v, 40) for v in range(0, 40, 1)]
    svg = Elements(learning_curve_svg(points))
    ticks = [text for a, text in svg.texts if a.get("class") == "tick" and "%" not in text]
    assert 2 <= len(ticks) <= 12 and ticks[0] == "0" and ticks[-1] == "39"
    assert all(t.isdigit() for t in ticks)


# ----------------------------------------------------------------------------------- the PNG curve

def figure_of(points, colours=None):
    curves = _curves(curve_points(points))
    return _learning_curve_figure(curves, run_colours(curves, colours), title="t", x_label="policy version",
                                  size=(8, 4.5), dpi=50)


def drawn_lines(axes):
    """Lines through two or more points (a whisker's caps and a marker-only point are not)."""
    return [line for line in axes.get_lines()
            if line.get_linestyle() not in ("None", "none", "") and len(set(line.get_xdata())) > 1]


def test_png_of_one_iteration_is_bars_on_named_ticks():
    axes = figure_of(DEMO).axes[0]
    assert not drawn_lines(axes)
    assert [t.get_text() for t in axes.get_xticklabels()] == [p.label for p in DEMO]
    assert axes.get_xlabel() == "policy version 1"
    bars = [patch for patch in axes.patches if patch.get_height() > 0]
    assert [round(b.get_height(), 1) for b in bars] == [71.4, 42.9]


@pytest.mark.parametrize("iterations", [[0, 1], [3, 4, 5], [0, 7], list(range(0, 60, 3))])
def test_png_x_ticks_are_integers_within_the_iterations(iterations):
    points = [CurvePoint.from_counts(v, "train", 1, 4) for v in iterations]
    points.append(CurvePoint.from_counts(iterations[-1], "test", 1, 4))
    axes = figure_of(points).axes[0]
    ticks = list(axes.get_xticks())
    assert all(float(t).is_integer() for t in ticks)
    assert min(ticks) == iterations[0] and max(ticks) == iterations[-1]
    assert set(ticks) <= set(iterations)
    # train is a line; test, measured once, is not
    assert [line.get_label() for line in drawn_lines(axes)] == ["train"]


def test_png_uses_the_given_colours(tmp_path):
    colours = {"pixel-random": "#8250df", "DOM-aware random": "#bc4c00", "trained tiny policy": "#1b7c83"}
    path = write_learning_curve(DEMO, tmp_path / "curve.png", colours=colours)
    seen = png_colours(path)
    # The DOM-aware and trained bars are solid areas of their colours; 0 % is a line in its colour.
    assert seen.get(rgb("#bc4c00"), 0) > 2000 and seen.get(rgb("#1b7c83"), 0) > 1000
    assert seen.get(rgb("#8250df"), 0) > 20
    assert rgb(PALETTE[0]) not in seen and rgb(PALETTE[1]) not in seen


# ----------------------------------------------------------------------------------- names and panels

def test_png_panels_draw_each_label_apart_on_named_versions():
    points = [CurvePoint.from_counts(0, "train", 94, 100), CurvePoint.from_counts(1, "test", 3, 8)]
    curves = _curves(curve_points(points))
    figure = _learning_curve_figure(curves, run_colours(curves), title="t", x_label="policy version",
                                    size=(8, 4.5), dpi=50, tick_names={0: "v0 (bootstrap: random)"},
                                    panels={"train": "training rollouts", "test": "held-out evaluation"})
    train, test = figure.axes
    assert (train.get_title(), test.get_title()) == ("training rollouts", "held-out evaluation")
    # Both panels share the versions, version 0 named as the bootstrap; no line joins train to test.
    for axes in (train, test):
        assert [t.get_text() for t in axes.get_xticklabels()] == ["v0 (bootstrap: random)", "1"]
        assert not drawn_lines(axes)
    assert [c.get_label() for c in train.containers] == ["train"]
    assert [c.get_label() for c in test.containers] == ["test"]


def test_svg_ticks_take_the_given_names():
    points = [CurvePoint.from_counts(v, "test", v, 4) for v in (0, 1, 2)]
    svg = Elements(learning_curve_svg(points, tick_names={0: "v0 (bootstrap: model)"}))
    ticks = [text for a, text in svg.texts if a.get("class") == "tick" and "%" not in text]
    assert ticks[:3] == ["v0 (bootstrap: model)", "1", "2"]


def test_rate_bars_put_different_policies_side_by_side(tmp_path):
    rates = [("pixel-random", SuccessRate.of(0, 24)), ("DOM-aware random", SuccessRate.of(5, 24)),
             ("round 0 (bootstrap)", SuccessRate.of(0, 24)), ("round 1", SuccessRate.of(21, 24))]
    colours = run_colours(name for name, _ in rates)
    path = write_rate_bars(rates, tmp_path / "heldout.png", title="Held-out", colours=colours)
    image = Image.open(path)
    assert image.size == (800, 450)
    seen = png_colours(path)
    assert seen.get(rgb(colours["round 1"]), 0) > 4 * seen.get(rgb(colours["DOM-aware random"]), 0) > 0
    assert seen.get(rgb(colours["pixel-random"]), 0) > 20  # 0 % stays visible as a line
    with pytest.raises(ValueError, match="rates"):
        write_rate_bars([], tmp_path / "none.png")


def test_rate_bars_name_each_policy_and_no_iteration(monkeypatch, tmp_path):
    figures = []
    monkeypatch.setattr(charts, "_save_png", lambda figure, path, dpi: figures.append(figure))
    rates = [("pixel-random", SuccessRate.of(0, 24)), ("round 1", SuccessRate.of(21, 24)),
             ("not run", SuccessRate.of(0, 0))]
    write_rate_bars(rates, tmp_path / "x.png", x_label="policy (held-out seeds)")
    (axes,) = figures[0].axes
    assert [t.get_text() for t in axes.get_xticklabels()] == ["pixel-random", "round 1", "not run"]
    assert axes.get_xlabel() == "policy (held-out seeds)"
    texts = [t.get_text() for t in axes.texts]
    assert texts == ["0.0% (0/24)", "87.5% (21/24)", "n/a"]
    assert not drawn_lines(axes)
