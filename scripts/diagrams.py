"""The documentation's diagrams, drawn with matplotlib when the site is built (no network, none checked in).

    .venv/bin/mkdocs build --strict                 # mkdocs.yml names this file under `hooks:`
    .venv/bin/python scripts/diagrams.py --out /tmp/diagrams          # the SVGs, to look at
    .venv/bin/python scripts/diagrams.py --out /tmp/diagrams --png    # and PNGs beside them

Four figures, each a function that returns a matplotlib Figure: the loop's two schedules as timelines
(guides/loop.md), the cluster layout (guides/scaling.md), the egress path (guides/security.md) and the
data path from a seed task to a training sample (index.md). As an mkdocs hook, `on_files` adds each one
to the site as ``assets/diagrams/NAME.svg``, so a page links it like any other image and the strict
build fails on a broken link or a diagram that cannot be drawn.
"""

from __future__ import annotations

import io
import random
from collections.abc import Callable
from pathlib import Path

import click
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.patches import FancyBboxPatch

FOLDER = "assets/diagrams"
INK, MUTED = "#1f2937", "#6b7280"
FILL = {"process": "#e0e7ff", "data": "#fef3c7", "guard": "#dcfce7", "refused": "#fee2e2",
        "machine": "#f9fafb", "gpu": "#ede9fe"}
SCALE = 0.8
VERSION_COLOURS = ["#93c5fd", "#fcd34d", "#86efac", "#f9a8d4", "#c4b5fd", "#fdba74"]


def _canvas(width: float, height: float) -> tuple[plt.Figure, plt.Axes]:
    """A figure whose data coordinates are inches, with no axes drawn."""
    figure = plt.figure(figsize=(width, height))
    axes = figure.add_axes((0, 0, 1, 1))
    axes.set_xlim(0, width)
    axes.set_ylim(0, height)
    axes.axis("off")
    return figure, axes


def _box(axes: plt.Axes, x: float, y: float, w: float, h: float, text: str, kind: str = "process",
         size: float = 9, weight: str = "normal") -> tuple[float, float, float, float]:
    """A rounded box with centred text; returns (x, y, w, h) for arrows."""
    axes.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.02,rounding_size=0.08",
                                  facecolor=FILL[kind], edgecolor=INK, linewidth=0.9))
    axes.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=size, color=INK,
              fontweight=weight, linespacing=1.3)
    return x, y, w, h


def _machine(axes: plt.Axes, x: float, y: float, w: float, h: float, title: str,
             kind: str = "machine") -> None:
    """A machine's outline with its name at the top left."""
    axes.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.02,rounding_size=0.12",
                                  facecolor=FILL[kind], edgecolor=MUTED, linewidth=1.0, linestyle="--"))
    axes.text(x + 0.12, y + h - 0.12, title, ha="left", va="top", fontsize=9, color=MUTED, fontweight="bold")


def _arrow(axes: plt.Axes, start: tuple[float, float], end: tuple[float, float], label: str = "",
           colour: str = INK, style: str = "-|>", offset: tuple[float, float] = (0, 0.1)) -> None:
    """An arrow from start to end, its label beside the middle."""
    axes.annotate("", xy=end, xytext=start,
                  arrowprops={"arrowstyle": style, "color": colour, "linewidth": 1.1,
                              "shrinkA": 2, "shrinkB": 2})
    if label:
        middle = ((start[0] + end[0]) / 2 + offset[0], (start[1] + end[1]) / 2 + offset[1])
        axes.text(*middle, label, ha="center", va="bottom", fontsize=7.5, color=colour)


def _right(box: tuple[float, float, float, float]) -> tuple[float, float]:
    return box[0] + box[2], box[1] + box[3] / 2


def _left(box: tuple[float, float, float, float]) -> tuple[float, float]:
    return box[0], box[1] + box[3] / 2


def _bottom(box: tuple[float, float, float, float]) -> tuple[float, float]:
    return box[0] + box[2] / 2, box[1]


def _top(box: tuple[float, float, float, float]) -> tuple[float, float]:
    return box[0] + box[2] / 2, box[1] + box[3]


def _lane_axes(axes: plt.Axes, lanes: list[str], title: str, end: float) -> None:
    axes.set_yticks(range(len(lanes)), lanes, fontsize=8.5)
    axes.set_ylim(-0.6, len(lanes) - 0.4)
    axes.invert_yaxis()
    axes.set_xlim(0, end)
    axes.set_xticks([])
    axes.set_title(title, loc="left", fontsize=10, color=INK)
    for side in ("top", "right"):
        axes.spines[side].set_visible(False)


def _segment(axes: plt.Axes, lane: int, start: float, length: float, text: str, colour: str) -> None:
    axes.broken_barh([(start, length)], (lane - 0.32, 0.64), facecolors=colour, edgecolor=INK, linewidth=0.6)
    if text:
        axes.text(start + length / 2, lane, text, ha="center", va="center", fontsize=7.5, color=INK)


def _publish(axes: plt.Axes, at: float, version: int, lanes: int) -> None:
    axes.axvline(at, color=MUTED, linestyle=":", linewidth=1)
    axes.text(at, -0.5, f"v{version}", ha="center", va="bottom", fontsize=7.5, color=MUTED)


def _colour(version: int) -> str:
    return VERSION_COLOURS[version % len(VERSION_COLOURS)]


def _sync_timeline(axes: plt.Axes, slots: int, end: float) -> None:
    lanes = [f"episode slot {slot + 1}" for slot in range(slots)] + ["trainer"]
    _lane_axes(axes, lanes, "--schedule sync: roll out a batch, train, evaluate, in turns "
               "(slots wait for the batch's slowest episode)", end)
    draw, start, version = random.Random(3), 0.2, 0
    while start < end - 4:
        finished = []
        for slot in range(slots):
            at = start
            for _ in range(2):
                length = draw.choice([0.8, 1.0, 1.3, 1.7, 2.6])
                _segment(axes, slot, at, length, f"v{version}", _colour(version))
                at += length + 0.05
            finished.append(at)
        train = max(finished)
        _segment(axes, slots, train, 1.6, f"train -> v{version + 1}", "#e5e7eb")
        version += 1
        _publish(axes, train + 1.6, version, len(lanes))
        for slot in range(slots):
            _segment(axes, slot, train + 1.6, 0.9, f"eval v{version}", "#fecaca")
        start = train + 2.6


def _async_episodes(lanes: int, end: float) -> list[tuple[int, float, float]]:
    """(slot, start, length) of episodes that keep each browser slot busy until `end`."""
    draw = random.Random(7)
    episodes = []
    for slot in range(lanes):
        at = 0.2 + 0.15 * slot
        while at < end - 0.3:
            length = min(draw.choice([0.8, 1.0, 1.3, 1.7, 2.6]), end - at)
            episodes.append((slot, at, length))
            at += length + 0.05
    return episodes


def _async_timeline(axes: plt.Axes, slots: int, end: float) -> None:
    lanes = [f"episode slot {slot + 1}" for slot in range(slots)] + ["trainer"]
    _lane_axes(axes, lanes, "--schedule async: roll out and train at once (the colour is the "
               "version an episode started under)", end)
    publishes = [4.2, 7.9, 11.6, 15.3, 19.0]
    for slot, start, length in _async_episodes(slots, end):
        version = sum(start >= at for at in publishes)
        _segment(axes, slot, start, length, f"v{version}", _colour(version))
    previous = 2.4
    for version, at in enumerate(publishes, start=1):
        _segment(axes, slots, previous, at - previous, f"train -> v{version}", "#e5e7eb")
        _publish(axes, at, version, len(lanes))
        previous = at


def loop_schedules() -> plt.Figure:
    """The loop's two schedules on one time axis (schematic durations, the same episode lengths)."""
    figure, (sync, asynchronous) = plt.subplots(2, 1, figsize=(10, 6.0))
    _sync_timeline(sync, slots=4, end=22)
    _async_timeline(asynchronous, slots=4, end=22)
    asynchronous.set_xlabel("time (schematic); dotted lines: a new version published",
                            fontsize=8.5, color=MUTED)
    figure.text(0.01, 0.005, "async admits a new episode only while those begun stay within "
                "(trainer version + --max-staleness + 1) x batch + --overprovision; staler episodes "
                "are left out of training", fontsize=7.5, color=MUTED)
    figure.tight_layout(h_pad=1.8, rect=(0, 0.025, 1, 1))
    return figure


def _head_node(axes: plt.Axes) -> dict[str, tuple[float, float, float, float]]:
    _machine(axes, 0.2, 0.3, 4.3, 4.6, "GPU machine (Ray head)", kind="gpu")
    return {
        "loop": _box(axes, 0.45, 3.5, 3.8, 0.75, "webgym-rl loop\n(driver: runner, sampler, judges)"),
        "vllm": _box(axes, 0.45, 2.35, 1.8, 0.8, "vLLM\npolicy :8000"),
        "trainer": _box(axes, 2.45, 2.35, 1.8, 0.8, "trainer\n(accelerate launch)"),
        "ray": _box(axes, 0.45, 0.6, 3.8, 0.75, "Ray head :6379\n(places browsers, restarts them)",
                    kind="guard"),
    }


def _browser_node(axes: plt.Axes, y: float, name: str) -> dict[str, tuple[float, float, float, float]]:
    _machine(axes, 6.0, y, 5.6, 2.15, f"{name} (Ray worker, resource 'browser')")
    return {
        "server": _box(axes, 6.2, y + 0.95, 2.5, 0.8, "browser server :8300\n(fleet actor, token)"),
        "chromium": _box(axes, 8.95, y + 0.95, 2.45, 0.8, "8 Chromium\n+ egress proxy"),
        "sites": _box(axes, 8.95, y + 0.12, 2.45, 0.62, "MiniWoB site 127.0.0.1:8400", kind="data", size=8),
    }


def cluster_layout() -> plt.Figure:
    """Where the processes of a scaled-out run live and who calls whom."""
    figure, axes = _canvas(11.9, 5.3)
    head = _head_node(axes)
    nodes = [_browser_node(axes, 2.75, "browser node 1"), _browser_node(axes, 0.3, "browser node 2")]
    for node in nodes:
        _arrow(axes, _right(head["loop"]), _left(node["server"]), "")
        _arrow(axes, _right(node["server"]), _left(node["chromium"]))
        _arrow(axes, _bottom(node["chromium"]), _top(node["sites"]))
        _arrow(axes, _right(head["ray"]), (6.0, node["sites"][1] + 0.3), colour=MUTED, style="-")
    axes.text(5.2, 4.45, "HTTP: open page,\nact, screenshot", ha="center", fontsize=7.5)
    axes.text(5.2, 0.2, "Ray: placement,\nrestarts", ha="center", fontsize=7.5, color=MUTED)
    _arrow(axes, (1.35, 3.5), (1.35, 3.15))
    axes.text(1.45, 3.27, "screenshot -> reply", fontsize=7.5, va="center")
    _arrow(axes, (3.35, 3.15), (3.35, 3.5), "", style="<|-")
    axes.text(3.45, 3.27, "episodes", fontsize=7.5, va="center")
    _arrow(axes, _left(head["trainer"]), _right(head["vllm"]))
    axes.text(2.35, 2.2, "publish", ha="center", va="top", fontsize=7.5)
    return figure


def _egress_refused(axes: plt.Axes) -> list[tuple[float, float, float, float]]:
    return [
        _box(axes, 8.4, 3.55, 3.3, 0.55, "127.0.0.1:8300 browser API", kind="refused", size=8),
        _box(axes, 8.4, 2.85, 3.3, 0.55, "169.254.169.254 metadata", kind="refused", size=8),
        _box(axes, 8.4, 2.15, 3.3, 0.55, "10.0.0.5 (private network)", kind="refused", size=8),
    ]


def egress_path() -> plt.Figure:
    """What a page's request passes through before it leaves the browser server."""
    figure, axes = _canvas(11.9, 4.6)
    _machine(axes, 0.15, 0.2, 7.75, 4.2, "browser server (binds 127.0.0.1; other addresses need --token)")
    page = _box(axes, 0.4, 2.55, 1.8, 1.1, "page\n(untrusted)", kind="refused")
    guard = _box(axes, 2.65, 2.55, 2.2, 1.1, "request interception\nhttp(s) only, no\nforbidden address")
    proxy = _box(axes, 5.3, 2.1, 2.35, 2.0, "egress proxy\nresolves names itself,\nrefuses loopback,\n"
                 "private, link-local\nunless host:port\nis allowlisted", kind="guard", size=8.5)
    workers = _box(axes, 0.4, 0.55, 4.45, 1.05, "popups, workers, WebSockets, beacons,\nprefetches "
                   "(not seen by interception)", size=8)
    _arrow(axes, _right(page), _left(guard))
    axes.text(2.42, 3.25, "load", fontsize=7.5, ha="center")
    _arrow(axes, _right(guard), (5.3, 3.1))
    _arrow(axes, _right(workers), (5.3, 2.3))
    axes.text(5.15, 1.35, "every\nconnection", fontsize=7.5, ha="left", va="center")
    allowed = [_box(axes, 8.4, 0.35, 3.3, 0.55, "internet sites (public addresses)", kind="data", size=8),
               _box(axes, 8.4, 1.05, 3.3, 0.55, "--allow-hosts 127.0.0.1:8400", kind="data", size=8)]
    for target in allowed:
        _arrow(axes, _right(proxy), _left(target), colour="#15803d")
    for target in _egress_refused(axes):
        _arrow(axes, _right(proxy), _left(target), colour="#b91c1c", style="-[")
    axes.text(10.05, 4.2, "refused", ha="center", fontsize=8.5, color="#b91c1c", fontweight="bold")
    axes.text(10.05, 1.68, "allowed", ha="center", fontsize=8.5, color="#15803d", fontweight="bold")
    return figure


def _data_row(axes: plt.Axes, y: float, items: list[tuple[str, str]],
              leftwards: bool = False) -> list[tuple[float, float, float, float]]:
    """Boxes side by side, joined by arrows that point right (or left)."""
    boxes, x = [], 0.3
    for text, kind in items:
        boxes.append(_box(axes, x, y, 2.05, 0.95, text, kind=kind, size=8.5))
        x += 2.35
    for left, right in zip(boxes, boxes[1:], strict=False):
        if leftwards:
            _arrow(axes, _left(right), _right(left))
        else:
            _arrow(axes, _right(left), _left(right))
    return boxes


def data_path() -> plt.Figure:
    """From a seed benchmark's task to the sample a trainer sees."""
    figure, axes = _canvas(11.9, 3.2)
    top = _data_row(axes, 1.95, [("seed sets\n(10 benchmarks)", "data"),
                                 ("importers\n(one per seed set)", "process"),
                                 ("webgym-data build\ndedupe, taxonomy,\ndecompose, split", "process"),
                                 ("task set\nparquet + card", "data"),
                                 ("sampler\n(which tasks a run plays)", "process")])
    bottom = _data_row(axes, 0.3, [("training sample\ntokens, labels,\nimages", "data"),
                                   ("objective\nfiltered BC, GRPO, ...", "process"),
                                   ("judge\nrubric, site truth,\nMiniWoB reward", "process"),
                                   ("trajectory\none record per step", "data"),
                                   ("rollout\nWebEnv, browser server,\npolicy", "process")], leftwards=True)
    _arrow(axes, _bottom(top[-1]), _top(bottom[-1]))
    return figure


DIAGRAMS: dict[str, Callable[[], plt.Figure]] = {
    "loop-schedules": loop_schedules,
    "cluster-layout": cluster_layout,
    "egress-path": egress_path,
    "data-path": data_path,
}


def render(name: str, fmt: str = "svg") -> bytes:
    """One diagram's image, as bytes (no date or random ids in an SVG, so a rebuild is identical)."""
    figure = DIAGRAMS[name]()
    figure.set_size_inches(figure.get_size_inches() * SCALE)  # the same drawing, its text larger on the page
    buffer = io.BytesIO()
    with plt.rc_context({"svg.hashsalt": name, "svg.fonttype": "path"}):
        figure.savefig(buffer, format=fmt, metadata={"Date": None} if fmt == "svg" else None, dpi=110)
    plt.close(figure)
    return buffer.getvalue()


def on_files(files, config):
    """mkdocs hook: add every diagram to the site as assets/diagrams/NAME.svg."""
    from mkdocs.structure.files import File

    for name in DIAGRAMS:
        files.append(File.generated(config, f"{FOLDER}/{name}.svg", content=render(name)))
    return files


@click.command(help=__doc__)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Folder for NAME.svg (made if missing).")
@click.option("--png", is_flag=True, help="Write NAME.png beside each SVG.")
def main(out: Path, png: bool) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name in DIAGRAMS:
        for fmt in ["svg", "png"] if png else ["svg"]:
            (out / f"{name}.{fmt}").write_bytes(render(name, fmt))
            click.echo(out / f"{name}.{fmt}")


if __name__ == "__main__":
    main()
