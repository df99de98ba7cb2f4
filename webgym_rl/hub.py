"""``webgym-rl push``: upload a training checkpoint and its model card to the Hugging Face Hub.

The card is `cards/model_card.md` (a `string.Template`) filled from the checkpoint's
``trainer_state.json`` (base model, training data ids and versions, objective, steps, counts) and
the success rates measured by an evaluation, passed as ``--success-rate NAME=RATE``. The upload is
one commit: the model (or LoRA adapter), the processor, ``trainer_state.json`` and ``README.md``;
the optimizer state under ``training_state/`` stays local unless ``--include-training-state``.

Exceptions (`webgym_rl.errors`)::

    PushError (ValueError)      a folder that is not a complete checkpoint, a bad success rate
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from webgym_core.cards import CARDS_DIR, render_card
from webgym_core.cli import hub_push_options
from webgym_rl.errors import PushError

__all__ = ["PushError", "PushSettings", "push_checkpoint", "push_command", "render_model_card"]

log = logging.getLogger(__name__)

MODEL_CARD = CARDS_DIR / "model_card.md"
STATE_FILE = "trainer_state.json"
_PROCESSOR_FILES = ("preprocessor_config.json", "processor_config.json")


@dataclass
class PushSettings:
    """What `push_checkpoint` uploads and where."""

    checkpoint: Path
    """A checkpoint folder written by ``webgym-rl train`` (OUT/checkpoint-NNNNNN)."""
    repo_id: str
    """Target model repository, e.g. ``my-org/webgym-qwen3vl-8b``."""
    success_rates: dict[str, float] = field(default_factory=dict)
    """Measured success rates by evaluation set (e.g. ``{"test": 0.429}``), shown on the card."""
    base_model: str | None = None
    """Hub id of the base model for the card (default: the one in trainer_state.json)."""
    private: bool = False
    """Create the repository as private."""
    branch: str | None = None
    """Branch to commit to, created when missing (default: main); the CLI spells it --revision."""
    include_training_state: bool = False
    """Also upload training_state/ (optimizer, scheduler, RNG states) so others can resume."""
    commit_message: str | None = None
    """Commit message (default: "webgym-rl checkpoint, step N")."""
    token: str | None = None
    """Hub token (default: the logged-in one / HF_TOKEN)."""


def _read_state(checkpoint: Path | str) -> dict[str, Any]:
    checkpoint = Path(checkpoint)
    state_file = checkpoint / STATE_FILE
    if not state_file.is_file():
        raise PushError(f"{checkpoint} has no {STATE_FILE}: not a complete webgym-rl checkpoint")
    if not any((checkpoint / name).is_file() for name in ("config.json", "adapter_config.json")):
        raise PushError(f"{checkpoint} has neither config.json nor adapter_config.json: no model to push")
    if not any((checkpoint / name).is_file() for name in _PROCESSOR_FILES):
        raise PushError(f"{checkpoint} has no {' or '.join(_PROCESSOR_FILES)}: the checkpoint lacks its "
                        "processor, so the pushed model could not be used")
    try:
        return json.loads(state_file.read_text())
    except json.JSONDecodeError as exc:
        raise PushError(f"{state_file}: not valid JSON ({exc})") from exc


def _looks_like_hub_id(value: str) -> bool:
    return value.count("/") == 1 and not value.startswith((".", "/")) and not Path(value).exists()


def render_model_card(settings: PushSettings, state: dict[str, Any] | None = None) -> str:
    """The README.md for `settings.checkpoint`, from `cards/model_card.md`."""
    state = state if state is not None else _read_state(settings.checkpoint)
    train = state.get("settings", {})
    base = settings.base_model or state.get("base_model", "")
    # A LoRA run's checkpoint is the adapter itself, unless it was merged (`webgym-rl merge`, the loop).
    is_adapter = bool(train.get("lora")) and (Path(settings.checkpoint) / "adapter_config.json").is_file()
    if train.get("lora"):
        training_kind = f"LoRA rank {train.get('lora_rank')}, alpha {train.get('lora_alpha')}"
        training_kind += "" if is_adapter else ", merged into the weights"
    else:
        training_kind = "full fine-tuning"
    data = state.get("data", [])
    hub_datasets = [d["id"] for d in data if _looks_like_hub_id(d["id"])]
    front = ["license: other", "pipeline_tag: image-text-to-text",
             f"library_name: {'peft' if is_adapter else 'transformers'}",
             "tags:", "- web-agents", "- webgym", f"- {state.get('objective', '')}"]
    if _looks_like_hub_id(base):
        front.append(f"base_model: {base}")
    if hub_datasets:
        front += ["datasets:", *(f"- {d}" for d in hub_datasets)]
    revision = state.get("base_model_revision")
    base_line = f"`{base}`" + (f" (revision `{revision}`)" if revision else "")
    if settings.success_rates:
        rows = ["| evaluation | success rate |", "|---|---|"]
        rows += [f"| {name} | {rate:.1%} |" for name, rate in sorted(settings.success_rates.items())]
        results = "\n".join(rows)
    else:
        results = "No evaluation figures were given to `webgym-rl push` for this checkpoint."
    counts = state.get("counts", {})
    counts_line = (f"Samples ({counts.get('objective', state.get('objective'))}): "
                   f"{counts.get('trajectories_read', '?')} trajectories read, "
                   f"{counts.get('trajectories_kept', '?')} kept, {counts.get('steps_kept', '?')} steps kept "
                   f"({counts.get('same_as_next_dropped', 0)} no-op steps dropped), "
                   f"iterations {counts.get('iterations_kept', [])}.")
    values = {
        "front_matter": "\n".join(front),
        "title": settings.repo_id.split("/")[-1],
        "repo_id": settings.repo_id,
        "base_model_line": base_line,
        "objective": state.get("objective", ""),
        "training_kind": training_kind,
        "results_table": results,
        "data_table": "\n".join(f"| `{d['id']}` | `{d['version']}` | {d['rows']} |" for d in data),
        "counts_line": counts_line,
        "steps": str(state.get("step", "")),
        "num_processes": str(state.get("num_processes", "")),
        "batch": f"{train.get('per_device_batch_size')} x {train.get('gradient_accumulation_steps')}",
        "learning_rate": f"{train.get('learning_rate')}",
        "lr_scheduler": str(train.get("lr_scheduler")),
        "warmup_steps": str(train.get("warmup_steps")),
        "last_k": str(train.get("last_k_iterations")),
        "adapter_note": f" (a LoRA adapter on `{base}`)" if is_adapter else "",
    }
    return render_card(MODEL_CARD.name, values)


def push_checkpoint(settings: PushSettings, api: Any = None) -> Any:
    """Create the repository if needed and upload the checkpoint and its card in one commit."""
    from huggingface_hub import CommitOperationAdd, HfApi  # optional: huggingface_hub

    checkpoint = Path(settings.checkpoint)
    state = _read_state(checkpoint)
    for name, rate in settings.success_rates.items():
        if not 0.0 <= rate <= 1.0:
            raise PushError(f"success rate '{name}' = {rate} is not in [0, 1]")
    card = render_model_card(settings, state)
    files = sorted(p for p in checkpoint.rglob("*") if p.is_file())
    if not settings.include_training_state:
        files = [p for p in files if p.relative_to(checkpoint).parts[0] != "training_state"]
    operations = [CommitOperationAdd(path_in_repo=p.relative_to(checkpoint).as_posix(),
                                     path_or_fileobj=str(p))
                  for p in files if p.name != "README.md"]
    operations.append(CommitOperationAdd(path_in_repo="README.md", path_or_fileobj=card.encode("utf-8")))
    api = api if api is not None else HfApi(token=settings.token)
    api.create_repo(settings.repo_id, repo_type="model", private=settings.private, exist_ok=True)
    if settings.branch and settings.branch != "main":
        api.create_branch(settings.repo_id, repo_type="model", branch=settings.branch, exist_ok=True)
    message = settings.commit_message or f"webgym-rl checkpoint, step {state.get('step')}"
    commit = api.create_commit(repo_id=settings.repo_id, repo_type="model", operations=operations,
                               commit_message=message, revision=settings.branch)
    log.info("pushed %s (%d files) to %s", checkpoint, len(operations), settings.repo_id)
    return commit


def _parse_rates(values: tuple[str, ...]) -> dict[str, float]:
    rates = {}
    for value in values:
        name, sep, rate = value.partition("=")
        try:
            if not sep or not name:
                raise ValueError
            rates[name] = float(rate)
        except ValueError:
            raise click.BadParameter(f"'{value}': expected NAME=RATE, e.g. test=0.43",
                                     param_hint="--success-rate") from None
    return rates


@click.command("push", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("checkpoint", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("repo_id")
@click.option("--success-rate", "success_rates", multiple=True, metavar="NAME=RATE",
              help="A measured success rate for the card, e.g. test=0.429 (repeatable).")
@click.option("--base-model", default=None, help="Hub id of the base model for the card "
              "(default: the one the checkpoint's trainer_state.json names).")
@click.option("--include-training-state", is_flag=True,
              help="Also upload training_state/ (optimizer, scheduler, RNG) so others can resume.")
@hub_push_options
def push_command(checkpoint: Path, repo_id: str, success_rates: tuple[str, ...], base_model: str | None,
                 include_training_state: bool, revision: str | None, token: str | None,
                 commit_message: str | None, private: bool) -> None:
    """Upload CHECKPOINT (from webgym-rl train) to the Hub model repo REPO_ID, with a model card.

    \b
    Example:
      webgym-rl push out/checkpoints/run1/checkpoint-000200 my-org/webgym-agent \\
          --success-rate test=0.429 --success-rate train=0.61
    """
    settings = PushSettings(checkpoint=checkpoint, repo_id=repo_id, success_rates=_parse_rates(success_rates),
                            base_model=base_model, private=private, branch=revision,
                            include_training_state=include_training_state, commit_message=commit_message,
                            token=token)
    try:
        commit = push_checkpoint(settings)
    except PushError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"pushed {checkpoint} to {repo_id}: {getattr(commit, 'commit_url', commit)}")
