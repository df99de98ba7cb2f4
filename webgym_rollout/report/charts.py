"""Charts of the evaluation report: inline SVG drawn here (no script, nothing loaded: the page opens
from disk) and the learning curve, as SVG for the report and as a PNG (matplotlib's Agg canvas).

A learning curve is a list of `CurvePoint`s (iteration, label such as ``train`` or ``test``,
success rate and its Wilson interval); `write_learning_curve` draws them as a PNG,
`learning_curve_svg` inline. A label measured at two or more iterations is a line with its
confidence band; a label measured once is a point with its interval as a whisker; when every point
is at the same iteration (one evaluated version) the chart is labelled bars, one per label, on that
iteration. The x axis has integer ticks only; ``tick_names`` names some of them (version 0 as the
bootstrap policy), and ``panels`` draws each label in its own panel (train and test apart).

`write_rate_bars` draws success rates of different things side by side (policies on the same
held-out tasks): bars with their intervals, no iteration axis, nothing joining them.

Colours: each run or curve has one colour, `run_colours` assigns them (the palette in order of first
appearance, a label given a colour keeps it). Every chart here takes a ``colours`` mapping, so that a
run is drawn in the same colour in the report's tables, its SVG charts and the PNG learning curve:
pass the same mapping to `write_learning_curve` and `webgym_rollout.report.write_report`.
"""

from __future__ import annotations

import html
import io
import logging
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from webgym_core.files import write_atomic
from webgym_rollout.report.rates import SuccessRate, wilson_interval

__all__ = ["PALETTE", "CurvePoint", "count_chart", "curve_points", "histogram", "learning_curve_svg",
           "rate_chart", "run_colours", "write_learning_curve", "write_rate_bars"]

logger = logging.getLogger(__name__)

PALETTE = ("#0969da", "#cf222e", "#1a7f37", "#8250df", "#bc4c00", "#1b7c83", "#6e7781", "#bf3989")
"""Colours of the runs / curves, in order."""


def run_colours(labels: Iterable[str], colours: Mapping[str, str] | None = None) -> dict[str, str]:
    """One colour per label: a label in `colours` keeps its colour, the others take the palette's
    colours not yet used, in order of their first appearance (the palette repeats once every colour
    is taken). Returns `colours` and the new labels together, so that the same call on the same
    labels always gives the same mapping."""
    result = dict(colours or {})
    free = [colour for colour in PALETTE if colour not in result.values()]
    taken = 0
    for label in labels:
        if label not in result:
            result[label] = free[taken] if taken < len(free) else PALETTE[(taken - len(free)) % len(PALETTE)]
            taken += 1
    return result


@dataclass(frozen=True)
class CurvePoint:
    """One point of a learning curve: a success rate measured at an iteration."""

    iteration: int
    label: str
    """The curve it belongs to, e.g. ``train`` or ``test``."""
    rate: float
    low: float
    """Lower end of the confidence interval."""
    high: float
    """Upper end of the confidence interval."""

    def __post_init__(self) -> None:
        if not 0 <= self.low <= self.rate <= self.high <= 1:
            raise ValueError(f"rate: expected 0 <= low <= rate <= high <= 1, got low={self.low}, "
                             f"rate={self.rate}, high={self.high} (iteration {self.iteration}, {self.label})")

    @classmethod
    def from_counts(cls, iteration: int, label: str, successes: int, trials: int,
                    confidence: float = 0.95) -> CurvePoint:
        """The point of `successes` out of `trials` evaluated episodes, with its Wilson interval.
        Raises ValueError when `trials` is 0 (an evaluation with no evaluated episode has no rate:
        leave it off the curve)."""
        if trials <= 0:
            raise ValueError(f"trials: no evaluated episode at iteration {iteration} ({label}), "
                             "so there is no success rate to draw")
        low, high = wilson_interval(successes, trials, confidence)
        return cls(iteration, label, successes / trials, low, high)

    def as_dict(self) -> dict[str, Any]:
        return {"iteration": self.iteration, "label": self.label, "rate": self.rate, "low": self.low,
                "high": self.high}


def curve_points(points: Iterable[CurvePoint | Sequence[Any] | Mapping[str, Any]]) -> list[CurvePoint]:
    """`points` as `CurvePoint`s (records may be tuples in field order or dicts as `as_dict` writes)."""
    result = []
    for point in points:
        if isinstance(point, CurvePoint):
            result.append(point)
        elif isinstance(point, Mapping):
            result.append(CurvePoint(int(point["iteration"]), str(point["label"]), float(point["rate"]),
                                     float(point["low"]), float(point["high"])))
        else:
            iteration, label, rate, low, high = point
            result.append(CurvePoint(int(iteration), str(label), float(rate), float(low), float(high)))
    if not result:
        raise ValueError("points: no learning-curve points to draw")
    return sorted(result, key=lambda p: p.iteration)


def _curves(points: list[CurvePoint]) -> dict[str, list[CurvePoint]]:
    curves: dict[str, list[CurvePoint]] = {}
    for point in points:
        curves.setdefault(point.label, []).append(point)
    return curves


def write_learning_curve(points: Iterable[CurvePoint | Sequence[Any] | Mapping[str, Any]],
                         png_path: str | Path, *, title: str = "Success rate by iteration",
                         x_label: str = "iteration",
                         size: tuple[float, float] = (8.0, 4.5), dpi: int = 100,
                         colours: Mapping[str, str] | None = None,
                         tick_names: Mapping[int, str] | None = None,
                         panels: Mapping[str, str] | None = None) -> Path:
    """Draw a learning curve as a PNG of ``size`` inches at `dpi` (800 x 450 pixels by default).

    `points` are `CurvePoint`s, or records ``(iteration, label, rate, low, high)`` (tuples, or dicts
    as `CurvePoint.as_dict` writes them): one line per label (``train``, ``test``) with its
    confidence band, a point with a whisker for a label measured once, labelled bars when all
    points are at one iteration. `colours` maps labels to colours (`run_colours`; the labels it
    lacks take free palette colours in order). `tick_names` names iterations on the x axis (e.g.
    ``{0: "v0 (bootstrap: random)"}``; the others show their number). With `panels` (label -> panel
    title) each label is drawn in its own panel, side by side on the same axes, so that two
    measures of different things (the success of the training rollouts, the held-out success)
    are not read as one line. The file is replaced atomically; returns its path. Uses
    matplotlib's Agg canvas directly (no pyplot, no global backend change)."""
    curves = _curves(curve_points(points))
    figure = _learning_curve_figure(curves, run_colours(curves, colours), title=title, x_label=x_label,
                                    size=size, dpi=dpi, tick_names=tick_names, panels=panels)
    _save_png(figure, png_path, dpi)
    logger.info("wrote %s (%d curves)", png_path, len(curves))
    return Path(png_path)


def write_rate_bars(rates: Sequence[tuple[str, SuccessRate]], png_path: str | Path, *,
                    title: str = "Success rate", x_label: str = "",
                    size: tuple[float, float] = (8.0, 4.5), dpi: int = 100,
                    colours: Mapping[str, str] | None = None) -> Path:
    """Draw success rates side by side as a PNG: one bar per name (a policy, a run), in the order
    given, with its interval as a whisker and ``rate (successes/trials)`` above it. This is a
    comparison of different things measured once, not a curve: nothing joins the bars and the x
    axis has no iterations. A rate without trials is left out (its name shows ``n/a``). `colours`
    as for `write_learning_curve`. The file is replaced atomically; returns its path."""
    if not rates:
        raise ValueError("rates: no success rates to draw")
    colours = run_colours((name for name, _ in rates), colours)
    figure, (axes,) = _figure(size, dpi, 1)
    _png_bars(axes, [(name, rate.rate, rate.low, rate.high,
                      f"{rate.rate:.1%} ({rate.successes}/{rate.trials})" if rate.trials else "n/a")
                     for name, rate in rates], colours)
    axes.set_xlabel(x_label)
    axes.set_ylabel("success rate")
    axes.set_title(_wrapped(title, size))
    _save_png(figure, png_path, dpi)
    logger.info("wrote %s (%d rates)", png_path, len(rates))
    return Path(png_path)


def _save_png(figure: Any, png_path: str | Path, dpi: int) -> None:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi)
    png_path = Path(png_path)
    png_path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(png_path, buffer.getvalue())


def _iteration_ticks(iterations: Sequence[int], most: int = 12) -> list[int]:
    """Integer ticks for these iterations: all of them when few, else every n-th (the last one kept)."""
    every = -(-len(iterations) // most)
    ticks = list(iterations[::every])
    if ticks[-1] != iterations[-1]:
        ticks[-1] = iterations[-1]
    return ticks


def _wrapped(title: str, size: tuple[float, float]) -> str:
    """`title` broken into lines that fit a figure `size[0]` inches wide (about 10 characters an inch)."""
    return "\n".join(textwrap.wrap(title, max(20, int(10 * size[0])))) or title


def _tick_name(iteration: int, tick_names: Mapping[int, str] | None) -> str:
    return (tick_names or {}).get(iteration, str(iteration))


def _figure(size: tuple[float, float], dpi: int, columns: int) -> tuple[Any, list[Any]]:
    """A matplotlib `Figure` on its own Agg canvas and its `columns` axes side by side (one y axis)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # optional: matplotlib
    from matplotlib.figure import Figure  # optional: matplotlib
    from matplotlib.ticker import PercentFormatter  # optional: matplotlib

    figure = Figure(figsize=size, dpi=dpi, layout="constrained")
    FigureCanvasAgg(figure)
    all_axes = list(figure.subplots(1, columns, sharey=True, squeeze=False)[0])
    for axes in all_axes:
        axes.yaxis.set_major_formatter(PercentFormatter())
    return figure, all_axes


def _png_bars(axes: Any, bars: Sequence[tuple[str, float | None, float, float, str]],
              colours: Mapping[str, str]) -> None:
    """Labelled bars (name, rate, low, high, text above the bar) with their intervals as whiskers;
    a 0 % bar stays visible as a line in its colour, a bar without a rate is left out."""
    for i, (name, rate, low, high, text) in enumerate(bars):
        if rate is None:
            axes.annotate(text, (i, 0), xytext=(0, 4), textcoords="offset points", ha="center")
            continue
        axes.bar(i, 100 * rate, width=0.6, color=colours[name], label=name,
                 yerr=[[100 * (rate - low)], [100 * (high - rate)]], capsize=6,
                 error_kw={"ecolor": "#222222", "elinewidth": 1.2})
        if not rate:
            axes.hlines(0, i - 0.3, i + 0.3, colors=colours[name], linewidth=3, clip_on=False)
        axes.annotate(text, (i, 100 * high), xytext=(0, 4), textcoords="offset points", ha="center",
                      va="bottom", annotation_clip=False)
    axes.set_xticks(range(len(bars)), labels=[bar[0] for bar in bars])
    axes.set_xlim(-0.6, len(bars) - 0.4)
    axes.spines[["top", "right"]].set_visible(False)
    axes.set_ylim(0, 108)  # room for the value above a bar at 100 %
    axes.spines["left"].set_bounds(0, 100)
    axes.set_yticks(range(0, 101, 20))
    axes.grid(axis="y", alpha=0.3)


def _png_lines(axes: Any, curves: dict[str, list[CurvePoint]], colours: Mapping[str, str],
               iterations: Sequence[int], tick_names: Mapping[int, str] | None) -> None:
    """One line per curve with its band; a curve measured once is a point with a whisker."""
    for label, curve in curves.items():
        colour = colours[label]
        xs = [p.iteration for p in curve]
        if len(curve) > 1:
            axes.fill_between(xs, [100 * p.low for p in curve], [100 * p.high for p in curve],
                              color=colour, alpha=0.15, linewidth=0)
            axes.plot(xs, [100 * p.rate for p in curve], marker="o", color=colour, label=label)
        else:  # measured once: a point with its interval as a whisker, no line
            (point,) = curve
            axes.errorbar(xs, [100 * point.rate], yerr=[[100 * (point.rate - point.low)],
                                                        [100 * (point.high - point.rate)]],
                          fmt="o", color=colour, capsize=4, linewidth=1.2, label=label)
    ticks = _iteration_ticks(iterations)
    axes.set_xticks(ticks, labels=[_tick_name(t, tick_names) for t in ticks])
    pad = max(0.5, 0.03 * (iterations[-1] - iterations[0]))
    axes.set_xlim(iterations[0] - pad, iterations[-1] + pad)
    axes.set_ylim(0, 100)
    axes.grid(alpha=0.3)


def _learning_curve_figure(curves: dict[str, list[CurvePoint]], colours: Mapping[str, str], *, title: str,
                           x_label: str, size: tuple[float, float], dpi: int,
                           tick_names: Mapping[int, str] | None = None,
                           panels: Mapping[str, str] | None = None) -> Any:
    """The matplotlib `Figure` of `write_learning_curve` (one axes, or one per label with `panels`)."""
    iterations = sorted({p.iteration for curve in curves.values() for p in curve})
    if panels:
        figure, all_axes = _figure(size, dpi, len(curves))
        for axes, (label, curve) in zip(all_axes, curves.items(), strict=True):
            _png_lines(axes, {label: curve}, colours, iterations, tick_names)
            axes.set_title(panels.get(label, label), fontsize="medium")
            axes.set_xlabel(x_label)
        all_axes[0].set_ylabel("success rate")
        figure.suptitle(_wrapped(title, size))
        return figure
    figure, (axes,) = _figure(size, dpi, 1)
    if len(iterations) == 1:  # one evaluated version: a bar per label, no line through one point
        _png_bars(axes, [(label, p.rate, p.low, p.high, f"{p.rate:.1%}") for label, (p,) in curves.items()],
                  colours)
        axes.set_xlabel(f"{x_label} {_tick_name(iterations[0], tick_names)}")
    else:
        _png_lines(axes, curves, colours, iterations, tick_names)
        axes.set_xlabel(x_label)
        axes.legend(loc="best")
    axes.set_ylabel("success rate")
    axes.set_title(_wrapped(title, size))
    return figure


# ------------------------------------------------------------------------------------- SVG charts

def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _short(text: str, width: int = 30) -> str:
    return text if len(text) <= width else text[:width - 1] + "\u2026"


def _svg(width: int, height: int, title: str, body: list[str], kind: str) -> str:
    return (f"<svg xmlns='http://www.w3.org/2000/svg' class='chart {kind}' width='{width}' "
            f"height='{height}' viewBox='0 0 {width} {height}' role='img' aria-label='{_e(title)}'>"
            f"<title>{_e(title)}</title>{''.join(body)}</svg>")


def _legend(names: Sequence[str], x: float, y: float, colours: Mapping[str, str]) -> list[str]:
    parts = []
    for name in names:
        parts.append(f"<rect class='legend' data-label='{_e(name)}' x='{x:.1f}' y='{y - 9:.1f}' width='10' "
                     f"height='10' fill='{colours[name]}'/><text x='{x + 14:.1f}' y='{y:.1f}'>"
                     f"{_e(_short(name, 24))}</text>")
        x += 34 + 7 * min(len(name), 24)
    return parts


def rate_chart(title: str, groups: Sequence[str], series: Sequence[tuple[str, Sequence[SuccessRate]]],
                level: int, *, colours: Mapping[str, str] | None = None) -> str:
    """Horizontal bars: per group one bar per run, its success rate with the interval as a whisker;
    each run in its colour of `colours` (`run_colours`; by default the palette in the runs' order)."""
    colours = run_colours((run for run, _ in series), colours)
    left, plot, right, bar, gap = 210, 380, 150, 14, 10
    top = 40 if len(series) > 1 else 24
    height = top + len(groups) * (len(series) * bar + gap) + 24
    width = left + plot + right
    body = [f"<text class='heading' x='0' y='14'>{_e(title)}</text>"]
    if len(series) > 1:
        body += _legend([name for name, _ in series], left, 32, colours)
    for tick in (0, 25, 50, 75, 100):
        x = left + plot * tick / 100
        body.append(f"<line class='grid' x1='{x:.1f}' y1='{top - 4}' x2='{x:.1f}' y2='{height - 20}'/>"
                    f"<text class='tick' x='{x:.1f}' y='{height - 6}' text-anchor='middle'>{tick}%</text>")
    y = top
    for g, group in enumerate(groups):
        body.append(f"<text class='group' x='{left - 8}' y='{y + len(series) * bar / 2 + 4:.1f}' "
                    f"text-anchor='end'><title>{_e(group)}</title>{_e(_short(group))}</text>")
        for run, rates in series:
            rate = rates[g]
            colour = colours[run]
            if rate.trials:
                w = plot * (rate.rate or 0.0)
                lo, hi = left + plot * rate.low, left + plot * rate.high
                mid = y + bar / 2
                body.append(
                    f"<rect class='bar' data-run='{_e(run)}' data-group='{_e(group)}' x='{left}' y='{y}' "
                    f"width='{max(w, 1):.1f}' height='{bar - 2}' fill='{colour}'>"
                    f"<title>{_e(run)} / {_e(group)}: {_e(rate.describe())}, {level}% interval</title></rect>"
                    f"<path class='ci' d='M{lo:.1f} {mid:.1f}H{hi:.1f}M{lo:.1f} {mid - 4:.1f}V{mid + 4:.1f}"
                    f"M{hi:.1f} {mid - 4:.1f}V{mid + 4:.1f}'/>")
            body.append(f"<text class='value' x='{left + plot + 8}' y='{y + bar - 3}'>"
                        f"{_e(rate.percent())} ({rate.successes}/{rate.trials})</text>")
            y += bar
        y += gap
    return _svg(width, height, title, body, "rates")


def count_chart(title: str, items: Sequence[tuple[str, int]], colour: str) -> str:
    """Horizontal bars of counts (error kinds)."""
    left, plot, right, bar = 210, 300, 60, 16
    height = 24 + len(items) * bar + 8
    body = [f"<text class='heading' x='0' y='14'>{_e(title)}</text>"]
    biggest = max((count for _, count in items), default=0) or 1
    for i, (name, count) in enumerate(items):
        y = 24 + i * bar
        body.append(f"<text class='group' x='{left - 8}' y='{y + 12}' text-anchor='end'>"
                    f"{_e(_short(name))}</text><rect class='bar' data-group='{_e(name)}' x='{left}' y='{y}' "
                    f"width='{max(plot * count / biggest, 1):.1f}' height='{bar - 3}' fill='{colour}'>"
                    f"<title>{_e(name)}: {count}</title></rect>"
                    f"<text class='value' x='{left + plot * count / biggest + 6:.1f}' y='{y + 12}'>"
                    f"{count}</text>")
    return _svg(left + plot + right, height, title, body, "counts")


def histogram(title: str, counts: Mapping[int, int], lowest: int, highest: int, colour: str) -> str:
    """Vertical bars: successful episodes by their number of steps, from `lowest` to `highest`."""
    left, bottom, plot_h = 40, 34, 120
    bins = list(range(lowest, highest + 1))
    width_each = max(8, min(28, 480 // max(len(bins), 1)))
    width = max(left + len(bins) * width_each + 16, 8 * len(title))  # room for the heading
    height = 24 + plot_h + bottom
    biggest = max(counts.values(), default=0) or 1
    body = [f"<text class='heading' x='0' y='14'>{_e(title)}</text>",
            f"<text class='tick' x='{left - 6}' y='32' text-anchor='end'>{biggest}</text>",
            f"<line class='grid' x1='{left}' y1='{24 + plot_h}' x2='{width - 8}' y2='{24 + plot_h}'/>"]
    every = max(1, len(bins) // 12)
    for i, steps in enumerate(bins):
        count = counts.get(steps, 0)
        x = left + i * width_each
        h = plot_h * count / biggest
        if count:
            body.append(f"<rect class='bar' data-steps='{steps}' data-count='{count}' x='{x + 1}' "
                        f"y='{24 + plot_h - h:.1f}' width='{width_each - 2}' height='{h:.1f}' "
                        f"fill='{colour}'>"
                        f"<title>{steps} steps: {count} successful episodes</title></rect>")
        if i % every == 0:
            body.append(f"<text class='tick' x='{x + width_each / 2:.1f}' y='{24 + plot_h + 14}' "
                        f"text-anchor='middle'>{steps}</text>")
    body.append(f"<text class='tick' x='{left + len(bins) * width_each / 2:.1f}' y='{height - 4}' "
                "text-anchor='middle'>steps</text>")
    return _svg(width, height, title, body, "histogram")


def learning_curve_svg(points: Iterable[CurvePoint | Sequence[Any] | Mapping[str, Any]], *,
                       title: str = "Success rate by iteration", x_label: str = "iteration",
                       colours: Mapping[str, str] | None = None,
                       tick_names: Mapping[int, str] | None = None,
                       panels: Mapping[str, str] | None = None) -> str:
    """The learning curve as an inline SVG element, for an HTML page; the same points, colours,
    `tick_names` and `panels` as `write_learning_curve` takes, drawn the same way (lines with their
    confidence bands, a point with a whisker for a label measured once, labelled bars when all
    points share one iteration). With `panels`, one SVG per label on the same x axis, side by side
    under `title` in a ``<div class='curve-panels'>``."""
    curves = _curves(curve_points(points))
    colours = run_colours(curves, colours)
    iterations = sorted({p.iteration for curve in curves.values() for p in curve})
    axis = _Axis(x_label, iterations, dict(tick_names or {}))
    if panels:
        charts = "".join(_svg_lines({label: curve}, colours, axis, panels.get(label, label), width=420)
                         for label, curve in curves.items())
        return (f"<div class='curve-panels' role='group' aria-label='{_e(title)}'>"
                f"<p class='heading'><b>{_e(title)}</b></p><div class='charts'>{charts}</div></div>")
    if len(iterations) == 1:
        return _svg_bars(curves, colours, axis, title)
    return _svg_lines(curves, colours, axis, title)


@dataclass(frozen=True)
class _Axis:
    """The x axis of an SVG learning curve: its name, the iterations on it and their tick names."""

    label: str
    iterations: list[int]
    names: dict[int, str]

    def name(self, iteration: int) -> str:
        return self.names.get(iteration, str(iteration))


_TOP, _LEFT, _PLOT_H = 40, 48, 220


def _y(rate: float) -> float:
    return _TOP + _PLOT_H * (1 - rate)


def _whisker(cx: float, point: CurvePoint) -> str:
    return (f"<path class='ci' d='M{cx:.1f} {_y(point.low):.1f}V{_y(point.high):.1f}M{cx - 4:.1f} "
            f"{_y(point.low):.1f}H{cx + 4:.1f}M{cx - 4:.1f} {_y(point.high):.1f}H{cx + 4:.1f}' "
            "stroke='#222' fill='none'/>")


def _tooltip(label: str, point: CurvePoint, axis: _Axis) -> str:
    return (f"<title>{_e(label)}, {_e(axis.label)} {_e(axis.name(point.iteration))}: {point.rate:.1%} "
            f"[{100 * point.low:.1f}-{100 * point.high:.1f}]</title>")


def _svg_frame(title: str, plot_w: int) -> list[str]:
    """The heading and the y axis's grid lines and ticks."""
    body = [f"<text class='heading' x='0' y='14'>{_e(title)}</text>"]
    for tick in (0, 25, 50, 75, 100):
        body.append(f"<line class='grid' x1='{_LEFT}' y1='{_y(tick / 100):.1f}' x2='{_LEFT + plot_w}' "
                    f"y2='{_y(tick / 100):.1f}'/><text class='tick' x='{_LEFT - 6}' "
                    f"y='{_y(tick / 100) + 4:.1f}' text-anchor='end'>{tick}%</text>")
    return body


def _svg_bars(curves: dict[str, list[CurvePoint]], colours: Mapping[str, str], axis: _Axis,
              title: str) -> str:
    """One evaluated version: a labelled bar per label, no line through one point."""
    plot_w = 560
    width, height = _LEFT + plot_w + 24, _TOP + _PLOT_H + 40
    body = _svg_frame(title, plot_w)
    slot = plot_w / len(curves)
    bar = min(56.0, 0.6 * slot)
    for i, (label, (point,)) in enumerate(curves.items()):
        cx, colour = _LEFT + slot * (i + 0.5), colours[label]
        top_y = min(_y(point.rate), _y(0) - 1)  # a 0 % bar stays visible as a line
        body.append(f"<rect class='bar' data-label='{_e(label)}' data-iteration='{point.iteration}' "
                    f"x='{cx - bar / 2:.1f}' y='{top_y:.1f}' width='{bar:.1f}' "
                    f"height='{_y(0) - top_y:.1f}' fill='{colour}'>{_tooltip(label, point, axis)}</rect>"
                    f"{_whisker(cx, point)}"
                    f"<text class='value' x='{cx:.1f}' y='{_y(point.high) - 6:.1f}' text-anchor='middle'>"
                    f"{point.rate:.1%}</text>"
                    f"<text class='tick' data-label='{_e(label)}' x='{cx:.1f}' y='{_TOP + _PLOT_H + 16}' "
                    f"text-anchor='middle'>{_e(_short(label, max(4, int(slot / 7))))}</text>")
    body.append(f"<text class='tick axis' x='{_LEFT + plot_w / 2}' y='{height - 4}' text-anchor='middle'>"
                f"{_e(axis.label)} {_e(axis.name(axis.iterations[0]))}</text>")
    return _svg(width, height, title, body, "learning-curve")


def _svg_lines(curves: dict[str, list[CurvePoint]], colours: Mapping[str, str], axis: _Axis, title: str,
               width: int = 632) -> str:
    """Lines with their bands over `axis`'s iterations; a label measured once is a point with a whisker."""
    plot_w = width - _LEFT - 24
    height = _TOP + _PLOT_H + 40
    first, last = axis.iterations[0] - 0.5, axis.iterations[-1] + 0.5

    def x(iteration: float) -> float:
        return _LEFT + plot_w * (iteration - first) / (last - first)

    body = _svg_frame(title, plot_w) + _legend(list(curves), _LEFT, 32, colours)
    for iteration in _iteration_ticks(axis.iterations):
        body.append(f"<text class='tick' x='{x(iteration):.1f}' y='{_TOP + _PLOT_H + 16}' "
                    f"text-anchor='middle'>{_e(axis.name(iteration))}</text>")
    body.append(f"<text class='tick axis' x='{_LEFT + plot_w / 2}' y='{height - 4}' text-anchor='middle'>"
                f"{_e(axis.label)}</text>")
    for label, curve in curves.items():
        colour = colours[label]
        if len(curve) > 1:
            band = [f"{x(p.iteration):.1f},{_y(p.high):.1f}" for p in curve]
            band += [f"{x(p.iteration):.1f},{_y(p.low):.1f}" for p in reversed(curve)]
            line = " ".join(f"{x(p.iteration):.1f},{_y(p.rate):.1f}" for p in curve)
            body.append(f"<polygon class='band' points='{' '.join(band)}' fill='{colour}' "
                        f"fill-opacity='0.15'/><polyline class='curve' data-label='{_e(label)}' "
                        f"points='{line}' fill='none' stroke='{colour}' stroke-width='2'/>")
        else:  # measured once: its interval as a whisker
            body.append(_whisker(x(curve[0].iteration), curve[0]))
        for p in curve:
            body.append(f"<circle class='point' data-label='{_e(label)}' data-iteration='{p.iteration}' "
                        f"cx='{x(p.iteration):.1f}' cy='{_y(p.rate):.1f}' r='3.5' fill='{colour}'>"
                        f"{_tooltip(label, p, axis)}</circle>")
    return _svg(width, height, title, body, "learning-curve")


# ------------------------------------------------------------------------------------- the page
