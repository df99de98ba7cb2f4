"""``webgym-rl export``: trajectory steps as a conversational dataset for TRL's SFTTrainer.

The rows are the samples ``webgym-rl train --objective filtered_bc`` trains on with the same
`SampleSelection` (`webgym_rl.samples.build_samples`: steps of successful, trainable episodes of the
last K iterations, no-ops dropped), one row per step:

- ``messages``: the chat the policy was sent at that step, rebuilt from ``Step.messages`` by the
  trainer's own code (`StepSamples`, `expand_messages`), followed by the reply it wrote as the
  assistant turn. Every ``content`` is a list of parts, ``{"type": "text", "text": ...}`` or
  ``{"type": "image", "text": None}`` (a message sent as a plain string becomes one text part, which
  a Qwen-VL chat template renders the same);
- ``images``: one `datasets.Image` per image part, in order (PNG of the pixels the trainer decodes;
  TRL's `prepare_multimodal_messages` puts them in place). A step of a text observation mode without
  a screenshot in its prompt has none;
- ``source``, ``episode_id``, ``step``, ``iteration``, ``task_id``, ``reward``: where it came from;
  ``weight``: filtered_bc's recency weight of the step (SFTTrainer does not read it).

The folder holds ``data/train-NNNNN-of-NNNNN.parquet`` and a dataset card (``README.md`` from
``cards/sft_card.md``) whose ``configs:`` block lists the shards, so ``datasets.load_dataset(OUT,
split="train")`` reads it, images as PIL images, and ``webgym-rollout push``-style uploads to the
Hub work unchanged. Unless told not to, the first row is read back and passed through TRL's own
`prepare_multimodal_messages`, as SFTTrainer's collator does (TRL: ``pip install 'webgym[interop]'``).

Errors: `ExportError` (a `TrainingDataError`) names the source, row and step of a prompt that cannot
be written, or the folder that holds an earlier export; the selection's own errors
(`NoTrainingDataError`, `MissingColumnError`) name the source.
"""

from __future__ import annotations

import io
import logging
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from webgym_core.cards import render_card, size_category
from webgym_core.errors import SettingsError
from webgym_core.files import TMP_PREFIX, write_atomic
from webgym_core.settings import SettingsCommand, load_settings, settings_options
from webgym_rl.errors import ExportError, TrainingDataError, WebgymRLError
from webgym_rl.samples import Objective, Sample, StepSamples, build_samples, load_trajectories
from webgym_rl.settings import ExportCommandSettings
from webgym_rollout.trajectory.contract import EpisodeColumn

__all__ = ["ExportError", "ExportResult", "check_with_trl", "export_command", "export_sft", "sft_features",
           "sft_row"]

log = logging.getLogger(__name__)

CARD = "sft_card.md"
"""The dataset card template (`webgym_core.cards.CARDS_DIR`)."""
_ROLES = ("system", "user", "assistant")
_PROVENANCE = ("source", "episode_id", "step", "iteration", "task_id", "reward", "weight")


def sft_features() -> Any:
    """The `datasets.Features` of an exported row."""
    from datasets import Features, Image, List, Value  # optional: datasets

    part = {"type": Value("string"), "text": Value("string")}
    return Features({
        "messages": List({"role": Value("string"), "content": List(part)}),
        "images": List(Image()),
        "source": Value("string"), "episode_id": Value("string"), "step": Value("int32"),
        "iteration": Value("int32"), "task_id": Value("string"), "reward": Value("float64"),
        "weight": Value("float64"),
    })


def _png(image: Any) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def _parts(content: Any, where: str, role: str) -> tuple[list[dict[str, Any]], list[Any]]:
    """A message's content as TRL's parts, and the images of its image parts in order."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}], []
    if not isinstance(content, list):
        raise ExportError(f"{where}: a {role} message's content is {type(content).__name__}, expected text "
                          "or a list of parts")
    parts: list[dict[str, Any]] = []
    images: list[Any] = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            parts.append({"type": "text", "text": part["text"]})
        elif kind == "image" and "image" in part:
            parts.append({"type": "image", "text": None})
            images.append(part["image"])
        else:
            shown = kind if kind is not None else type(part).__name__
            raise ExportError(f"{where}: a {role} message has a part of type {shown!r}; only text parts and "
                              "the screenshots' image parts can be exported")
    return parts, images


def sft_row(sample: Sample, where: str = "") -> dict[str, Any]:
    """One `Sample` as ``{"messages", "images"}`` in TRL's conversational vision format: its prompt
    messages with the reply as the last, assistant, turn; images as PNG ``{"bytes", "path"}``, one
    per image part in order. Raises `ExportError` (naming `where`, else the sample's episode and
    step) for a message it cannot write."""
    where = where or sample.where
    messages: list[dict[str, Any]] = []
    images: list[dict[str, Any]] = []
    for message in sample.messages:
        role = message.get("role") if isinstance(message, dict) else None
        if role not in _ROLES:
            raise ExportError(f"{where}: a message has role {role!r}; expected one of {', '.join(_ROLES)}")
        parts, found = _parts(message.get("content"), where, role)
        messages.append({"role": role, "content": parts})
        images.extend({"bytes": _png(image), "path": None} for image in found)
    messages.append({"role": "assistant", "content": [{"type": "text", "text": sample.response}]})
    return {"messages": messages, "images": images}


@dataclass
class ExportResult:
    """What `export_sft` wrote."""

    out: Path
    rows: int = 0
    images: int = 0
    text_only: int = 0
    """Rows without an image (a text observation mode's steps)."""
    episodes: int = 0
    shards: list[Path] = field(default_factory=list)
    card: Path | None = None
    counts: dict[str, Any] = field(default_factory=dict)
    """The selection's `SampleCounts` (what was read, kept and skipped)."""


def _episode_facts(samples: StepSamples) -> list[dict[str, tuple[str, float]]]:
    """Per source: episode id -> (task id, reward), read from three Arrow columns."""
    facts = []
    for source in samples.sources:
        table = source.dataset.with_format("arrow")[:]
        names = (EpisodeColumn.EPISODE_ID, EpisodeColumn.TASK_ID, EpisodeColumn.REWARD)
        columns = (table.column(name).to_pylist() for name in names)
        facts.append({e: (t, r) for e, t, r in zip(*columns, strict=True)})
    return facts


def _clear(out: Path, overwrite: bool) -> None:
    earlier = sorted((out / "data").glob("train-*.parquet")) if (out / "data").is_dir() else []
    card = out / "README.md"
    if (earlier or card.exists()) and not overwrite:
        raise ExportError(f"{out} already holds an export ({len(earlier)} shards"
                          f"{', README.md' if card.exists() else ''}); pass --overwrite to replace it")
    for path in earlier:  # the card too: until the new one is written, no card lists shards that are gone
        path.unlink()
    card.unlink(missing_ok=True)
    (out / "data").mkdir(parents=True, exist_ok=True)


def _write_shard(rows: list[dict[str, Any]], path: Path) -> None:
    import datasets  # optional: datasets

    tmp = path.with_name(f"{TMP_PREFIX}{path.name}.{os.getpid()}")
    quiet = datasets.are_progress_bars_disabled()
    datasets.disable_progress_bars()  # one bar per shard would break the command's own
    try:
        datasets.Dataset.from_list(rows, features=sft_features()).to_parquet(str(tmp))
    finally:
        if not quiet:
            datasets.enable_progress_bars()
    os.replace(tmp, path)


def _trl_preparation() -> Callable[..., Any]:
    """TRL's `prepare_multimodal_messages`, or an ImportError naming the extra."""
    try:
        from trl.data_utils import prepare_multimodal_messages  # optional: interop
    except ImportError as exc:
        raise ImportError("checking the export with TRL needs TRL: pip install 'webgym[interop]' "
                          "(or pass --no-check-with-trl)") from exc
    return prepare_multimodal_messages


def check_with_trl(shard: Path) -> None:
    """Read the first row of `shard` and pass it through TRL's `prepare_multimodal_messages`, as
    SFTTrainer's vision collator does; raises `ExportError` if TRL refuses it, ImportError (naming
    the extra) without TRL."""
    import pyarrow.parquet as pq  # optional: pyarrow
    from datasets import Dataset  # optional: datasets

    prepare_multimodal_messages = _trl_preparation()
    row = Dataset(pq.read_table(shard).slice(0, 1))[0]
    try:
        prepared = prepare_multimodal_messages(row["messages"], images=row["images"])
    except (ValueError, KeyError, TypeError) as exc:
        raise ExportError(f"{shard} row 0: TRL's prepare_multimodal_messages refused it: {exc}") from exc
    placed = sum(1 for message in prepared for part in message["content"]
                 if part.get("type") == "image" and part.get("image") is not None)
    if placed != len(row["images"]):
        raise ExportError(f"{shard} row 0: TRL placed {placed} of its {len(row['images'])} images")


def _write_card(result: ExportResult, samples: StepSamples, settings: ExportCommandSettings) -> Path:
    selection = settings.samples
    configs = ["- config_name: default", "  data_files:", "  - split: train", "    path:",
               *(f"    - data/{path.name}" for path in result.shards)]
    values = {
        "pretty_name": "WebGym steps for SFT",
        "size_category": size_category(result.rows),
        "configs_yaml": "\n".join(configs),
        "written_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "n_rows": result.rows,
        "n_text_only": result.text_only,
        "n_images": result.images,
        "n_episodes": result.episodes,
        "sources": ", ".join(f"`{s.id}` ({s.version})" for s in samples.sources),
        "selection": (f"filtered_bc: reward >= {selection.success_threshold:g}, last "
                      f"{selection.last_k_iterations or 'all'} iterations, no-ops "
                      f"{'dropped' if selection.drop_same_as_next else 'kept'}"),
        "n_shards": len(result.shards),
        "repo_hint": str(result.out),
    }
    path = result.out / "README.md"
    write_atomic(path, render_card(CARD, values))
    return path


def export_sft(settings: ExportCommandSettings, *,
               progress: Callable[[int, int], None] | None = None) -> ExportResult:
    """Write the steps filtered_bc would train on as a conversational SFT dataset in `settings.out`
    (see the module docstring). `progress(done, total)` is called after each row. Without TRL and
    `settings.check_with_trl`, raises the ImportError before anything is read or written."""
    if settings.check_with_trl:
        _trl_preparation()
    sources = load_trajectories(settings.data, cache_dir=settings.cache_dir)
    samples = build_samples(sources, Objective.FILTERED_BC, settings.samples)
    out = settings.out_dir
    _clear(out, settings.overwrite)
    facts = _episode_facts(samples)
    total = len(samples)
    n_shards = math.ceil(total / settings.shard_rows)
    result = ExportResult(out=out, counts=samples.counts.as_dict())
    episodes: set[tuple[int, str]] = set()
    rows: list[dict[str, Any]] = []
    log.info("exporting %d steps of %s to %s", total, ", ".join(s.id for s in sources), out)
    for index in range(total):
        where = samples.origin(index)
        try:
            sample = samples[index]
        except (TrainingDataError, ValueError) as exc:  # a bad messages JSON, a missing screenshot
            raise ExportError(f"{where}: {exc}") from exc
        row = sft_row(sample, f"{where} (episode {sample.episode_id})")
        source = samples.source_of(index)
        task_id, reward = facts[source][sample.episode_id]
        row.update(source=samples.sources[source].id, episode_id=sample.episode_id, step=sample.step,
                   iteration=samples.iterations[index], task_id=task_id, reward=reward,
                   weight=samples.weights[index])
        rows.append(row)
        episodes.add((source, sample.episode_id))
        result.images += len(row["images"])
        result.text_only += not row["images"]
        if len(rows) == settings.shard_rows or index == total - 1:
            path = out / "data" / f"train-{len(result.shards):05d}-of-{n_shards:05d}.parquet"
            _write_shard(rows, path)
            result.shards.append(path)
            log.info("wrote %s (%d rows, %d of %d)", path, len(rows), index + 1, total)
            rows = []
        if progress is not None:
            progress(index + 1, total)
    result.rows, result.episodes = total, len(episodes)
    result.card = _write_card(result, samples, settings)
    if settings.check_with_trl:
        check_with_trl(result.shards[0])
    return result


# ---------------------------------------------------------------------------------------------
# CLI: one option per setting, its help taken from the field's docstring (webgym_core.settings).


@click.command("export", cls=SettingsCommand, context_settings={"help_option_names": ["-h", "--help"]})
@settings_options(ExportCommandSettings)
def export_command(config: str | None, **flags: Any) -> None:
    """Write trajectory steps as a conversational dataset for TRL's SFTTrainer.

    The rows are the steps `webgym-rl train --objective filtered_bc` trains on with the same
    selection flags: each is the chat the policy was sent at that step (`messages`, images as
    `{"type": "image"}` parts) with the reply it wrote as the assistant turn, and its screenshots
    as an `images` column of datasets.Image. OUT gets data/train-*.parquet and a dataset card;
    `datasets.load_dataset(OUT, split="train")` reads it.

    \b
    Example:
      webgym-rl export --data out/trajectories/iter-0000 out/trajectories/iter-0001 \\
          --out out/sft --success-threshold 1 --last-k-iterations 0
    """
    bars: list[Any] = []

    def advance(done: int, total: int) -> None:
        if not bars:  # shown once the steps are selected and the folder accepted
            bars.append(click.progressbar(length=total, label="exporting steps").__enter__())
        bars[0].update(done - bars[0].pos)

    try:
        settings = load_settings(ExportCommandSettings, config, flags)
        result = export_sft(settings, progress=advance)
    except (SettingsError, WebgymRLError, ImportError) as exc:
        raise click.ClickException(str(exc)) from exc
    finally:
        for bar in bars:
            bar.__exit__(None, None, None)
    click.echo(f"{result.rows} steps of {result.episodes} episodes ({result.images} images, "
               f"{result.text_only} steps without one) in {len(result.shards)} shards: {result.out}")

