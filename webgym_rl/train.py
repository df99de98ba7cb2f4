"""``webgym-rl train``: fine-tune a Qwen-VL policy on trajectory datasets with a visible Accelerate loop.

Reading order: the settings (`webgym_rl.settings`: `OptimizationSettings`, how to train: objective,
sample selection, grpo's knobs, LoRA, optimizer, schedule, batch, precision, logging;
`TrainCommandSettings`, what to train: the model, the data and the output folder, plus one
`OptimizationSettings`, which the loop holds too), `train` (checks the inputs, then one
``accelerator.prepare(...)`` and a plain loop), `train_command` (the CLI, its flags made from the
settings by `webgym_core.settings`).
Distribution (DDP, FSDP, DeepSpeed) and mixed precision come from ``accelerate launch`` / the
Accelerate config, never from this module.

Checkpoints go to ``OUT/checkpoint-NNNNNN/``: the model (or LoRA adapter) and the processor in
Hugging Face format, ``training_state/`` (optimizer, scheduler, RNG and model state, written by
``accelerator.save_state``), for a checkpoint taken between two ``--ppo-epochs`` passes over a batch
the proximal log-probabilities of that batch (``proximal-RANK.safetensors``), and
``trainer_state.json`` (step, data position, counts, sources, loss history, the settings; written
last, so its presence marks a complete checkpoint). The sample order
of an epoch is a pure function of (seed, epoch), so ``--resume`` replays exactly the batches an
uninterrupted run would have seen.

Exceptions (`webgym_rl.errors`)::

    TrainingError (RuntimeError)
     ├── TrainSettingsError   a bad setting (names the field; a ValueError too)
     └── ResumeError          --resume without a complete checkpoint in OUT, or one of another run
    (and, from the steps it runs: TrainingDataError, CollationError, MergeError for a starting
     adapter that does not fit its base model, and webgym_rl.modeling.ModelingError; the CLI
     turns each into one clear message)
"""

from __future__ import annotations

import copy
import inspect
import json
import logging
import math
import os
import shutil
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import click

from webgym_core.errors import SettingsError
from webgym_core.lazy import moved_names
from webgym_core.settings import SettingsCommand, load_settings, settings_options, settings_to_dict
from webgym_rl.errors import MergeError, ResumeError, TrainingError, TrainSettingsError, WebgymRLError
from webgym_rl.samples import Objective, build_samples, describe_sources, load_trajectories
from webgym_rl.settings import OptimizationSettings, TrainCommandSettings

__all__ = ["EpochOrder", "FitPosition", "FitResult", "ResumeError", "TrainResult", "TrainSettingsError",
           "Trainer", "TrainingError", "complete_checkpoints", "describe_on_policy", "make_accelerator",
           "steps_for", "train", "train_command"]

# Moved in 0.3.0 (renamed to say what each is); the old import paths go in the next release.
__getattr__ = moved_names(__name__, {"TrainSettings": "webgym_rl.settings:TrainCommandSettings",
                                     "TrainingSettings": "webgym_rl.settings:OptimizationSettings",
                                     "GRPOSettings": "webgym_rl.settings"})

log = logging.getLogger(__name__)

STATE_FILE = "trainer_state.json"
CHECKPOINT_PREFIX = "checkpoint-"

@dataclass
class TrainResult:
    """What a finished run produced."""

    checkpoint: Path
    """The final checkpoint folder."""
    steps: int
    """Optimizer steps done (in total, across resumes)."""
    log_history: list[dict[str, float]]
    """One entry per optimizer step: step, loss, lr, grad_norm."""
    counts: dict[str, Any]
    """`SampleCounts` of the objective, as a dict."""
    samples_seen: int
    """Samples this process trained on in this invocation."""
    loop_seconds: float
    """Wall time of the training loop in this invocation (without setup and the final save)."""
    loop_cpu_seconds: float
    """CPU time of this process (all threads) in the loop: steadier than wall time on a busy machine."""
    on_policy: dict[str, dict[str, float]] = field(default_factory=dict)
    """The on-policy check before the first update, per policy version (`Trainer.on_policy_check`)."""
    model: Any = None
    """The trained (unwrapped) model of this process."""


class EpochOrder:
    """Sample indices of one epoch, a pure function of (seed, epoch): resuming replays it exactly.

    With unequal weights, draws with replacement in proportion to them (recency weighting); else a
    permutation. Not named ``set_epoch`` on purpose: Accelerate's loaders would reset the epoch."""

    def __init__(self, weights: list[float], seed: int):
        import torch  # optional: torch

        self.weights = torch.tensor(weights, dtype=torch.float64)
        self.uniform = bool(torch.all(self.weights == self.weights[0]))
        self.seed = seed
        self.epoch = 0

    def __len__(self) -> int:
        return len(self.weights)

    def __iter__(self):
        import torch  # optional: torch

        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        if self.uniform:
            order = torch.randperm(len(self.weights), generator=generator)
        else:
            order = torch.multinomial(self.weights, len(self.weights), replacement=True, generator=generator)
        return iter(order.tolist())


def describe_on_policy(check: dict[str, dict[str, float]]) -> str:
    """One line of `Trainer.on_policy_check`'s result: per version, mean and max |difference|."""
    if not check:
        return "no sample with its sampled token ids and log-probabilities"
    return "; ".join(f"{version} mean {entry['mean_abs']:.2e} max {entry['max_abs']:.2e} over "
                     f"{int(entry['tokens'])} tokens of {int(entry['samples'])} samples"
                     for version, entry in check.items())


def complete_checkpoints(out: str | Path) -> list[Path]:
    """The complete checkpoints in trainer output folder `out` (those with their state file), oldest first."""
    found = [p for p in Path(out).glob(f"{CHECKPOINT_PREFIX}*") if (p / STATE_FILE).is_file()]
    return sorted(found, key=lambda p: int(p.name[len(CHECKPOINT_PREFIX):]))


def _starting_point(model: str, revision: str | None, training: OptimizationSettings
                    ) -> tuple[str, str | None, Path | None]:
    """The model `model` names: (base model, its Hub revision, the LoRA adapter to train on or None)."""
    from webgym_rl.merge import adapter_base, is_adapter  # lazy: imports transformers

    adapter = None
    if is_adapter(model):
        if not training.lora:
            raise TrainSettingsError(f"model: {model} is a LoRA adapter; train it on with --lora, or merge "
                                     "it into its base model first (webgym-rl merge) for a full fine-tune")
        adapter = Path(model)
        try:
            model, recorded = adapter_base(adapter)
        except MergeError as exc:
            raise TrainSettingsError(f"model: {exc}") from exc
        revision = revision if revision is not None else recorded
        _check_adapter_shape(training, adapter)
    if revision is None and not Path(model).exists():
        revision = "main"
    return model, revision, adapter


def _check_adapter_shape(t: OptimizationSettings, adapter: Path) -> None:
    """An adapter trains on with the rank, scale, dropout and modules it has: refuse settings that
    ask for others (they would be silently ignored)."""
    from webgym_rl.merge import ADAPTER_CONFIG  # lazy: imports transformers

    config = json.loads((adapter / ADAPTER_CONFIG).read_text())
    targets = config.get("target_modules")
    shape = {"lora_rank": (t.lora_rank, config.get("r")),
             "lora_alpha": (t.lora_alpha, config.get("lora_alpha")),
             "lora_dropout": (t.lora_dropout, config.get("lora_dropout")),
             "lora_target_modules": (sorted(t.lora_target_modules),
                                     sorted(targets) if isinstance(targets, list) else targets)}
    for name, (wanted, found) in shape.items():
        if wanted != found:
            raise TrainSettingsError(f"{name}: {wanted!r}, but the adapter {adapter} has {found!r}; an "
                                     "adapter trains on with its own shape: give the same value, or start "
                                     "from its merged checkpoint (webgym-rl merge)")


def _mixed_precision(setting: str) -> str | None:
    if setting != "auto":
        return setting
    if os.environ.get("ACCELERATE_MIXED_PRECISION"):
        return None  # accelerate launch / the Accelerate config decides
    import torch  # optional: torch

    return "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "no"


def _tracker_config(settings: Any) -> dict[str, Any]:
    return {k: (v if isinstance(v, int | float | str | bool) else json.dumps(v))
            for k, v in settings_to_dict(settings).items()}


def make_accelerator(training: OptimizationSettings, out: Path) -> Any:
    """The `Accelerator` of a training run: it owns devices, processes and precision (creating it
    trains nothing; ``accelerate launch`` and the Accelerate config decide the layout)."""
    from accelerate import Accelerator  # optional: accelerate
    from accelerate.utils import GradientAccumulationPlugin  # optional: accelerate

    # The trainer closes each optimizer step's group of micro-batches itself (`Trainer.fit` replays a
    # group for every PPO epoch), so the end of the data loader does not decide.
    return Accelerator(
        gradient_accumulation_plugin=GradientAccumulationPlugin(
            num_steps=training.gradient_accumulation_steps, sync_with_dataloader=False),
        mixed_precision=_mixed_precision(training.mixed_precision),
        log_with=None if training.log_with == "none" else training.log_with,
        project_dir=str(out), rng_types=[],
    )


def steps_for(samples: int, training: OptimizationSettings, num_processes: int = 1) -> int:
    """Optimizer steps one pass of `training` makes over `samples` samples: ``max_steps``, else
    ``epochs`` passes of per-process batches after sharding (at least one step), each batch
    ``ppo_epochs`` times."""
    if training.max_steps:
        return training.max_steps
    batches_per_epoch = math.ceil(math.ceil(samples / training.per_device_batch_size) / num_processes)
    steps_per_epoch = max(1, math.ceil(batches_per_epoch / training.gradient_accumulation_steps))
    return math.ceil(training.epochs * steps_per_epoch) * training.grpo.ppo_epochs


@dataclass
class FitPosition:
    """Where `Trainer.fit` stands in the data order (a checkpoint records it, so a resumed run
    skips what it has seen)."""

    epoch: int = 0
    """The epoch of the data order."""
    batches_in_epoch: int = 0
    """The micro-batches of the epoch whose passes are all done."""
    ppo_epoch: int = 0
    """The passes done over the next batch."""

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> FitPosition:
        """The position a checkpoint's trainer state records (``ppo_epoch`` is 0 in older ones)."""
        return cls(epoch=state["epoch"], batches_in_epoch=state["batches_in_epoch"],
                   ppo_epoch=state.get("ppo_epoch", 0))

    def passed(self, micro_batches: int, passes: int) -> bool:
        """Count one pass over the next batch (of `micro_batches`); True when that was its last of
        `passes`, and the position has moved past the batch."""
        self.ppo_epoch += 1
        if self.ppo_epoch < passes:
            return False
        self.batches_in_epoch += micro_batches
        self.ppo_epoch = 0
        return True


_POSITION_KEYS = ("epoch", "batches_in_epoch", "ppo_epoch")


def _one_step_per(accelerator: Any, micro_batches: int) -> None:
    """Make Accelerate's `accumulate` step the optimizer once per pass over a batch of
    `micro_batches` (the last batch of an epoch may be shorter than ``gradient_accumulation_steps``):
    the two public settings it decides by, set before each pass."""
    accelerator.gradient_accumulation_steps = micro_batches
    accelerator.step = 0  # accumulate() syncs at the group's last micro-batch


class _PendingLogs:
    """Per-step figures, kept as tensors until a log step (no device sync, ``.item()``, per step)."""

    def __init__(self, accelerator: Any, log_history: list[dict[str, float]], progress: Any):
        self.accelerator, self.log_history, self.progress = accelerator, log_history, progress
        self.pending: list[tuple[int, int, Any, float, Any, dict[str, Any]]] = []

    def add(self, step: int, epoch: int, loss: Any, lr: float, grad_norm: Any,
            metrics: dict[str, Any]) -> None:
        self.pending.append((step, epoch, loss, lr, grad_norm, metrics))

    def flush(self) -> None:
        """Log what is pending (history, trackers, progress bar)."""
        pending = self.pending
        if not pending:
            return
        entries = [{"step": step, "loss": float(loss_t), "lr": lr,
                    "grad_norm": float(norm_t) if norm_t is not None else float("nan")}
                   for step, _epoch, loss_t, lr, norm_t, _extra in pending]
        self.log_history.extend(entries)
        means = {f"train/{k}": float(sum(e[5][k] for e in pending)) / len(pending)
                 for k in pending[-1][5]}
        self.accelerator.log({"train/loss": sum(e["loss"] for e in entries) / len(entries),
                              "train/lr": entries[-1]["lr"],
                              "train/grad_norm": sum(e["grad_norm"] for e in entries) / len(entries),
                              "train/epoch": pending[-1][1], **means}, step=entries[-1]["step"])
        if self.progress is not None:
            self.progress.update(len(entries))
            self.progress.set_postfix(loss=f"{entries[-1]['loss']:.4f}")
        pending.clear()


@dataclass
class FitResult:
    """What one `Trainer.fit` call did."""

    steps: int
    """Optimizer steps of this call."""
    log_history: list[dict[str, float]]
    """One entry per optimizer step of this call: step (counted over the trainer's life), loss, lr,
    grad_norm."""
    samples_seen: int
    """Samples this process trained on in this call (each pass over a batch counts its samples)."""
    loop_seconds: float
    loop_cpu_seconds: float


class Trainer:
    """A policy, its optimizer, its learning-rate schedule and the Accelerate state, kept in memory.

    `fit` trains on a set of samples for a number of optimizer steps and may be called again on
    other samples without reloading anything: `train` calls it once; the loop's resident trainer
    (`webgym_rl.loop.resident`) once per round, so Adam's moments and the schedule run on across
    rounds as in one continuous run. `save` writes a full checkpoint (model or adapter, processor,
    optimizer, schedule, RNG: ``training_state/``, then ``trainer_state.json`` last); `load` restores
    one. `servable_state_dict` / `save_servable` give the weights a policy server loads (a LoRA
    adapter merged into its base model's weights).

    `total_steps` sizes the learning-rate schedule over the trainer's whole life (None: only a
    ``constant`` schedule, which needs no length).
    """

    def __init__(self, *, model: str, model_revision: str | None, training: OptimizationSettings, out: Path,
                 seed: int, total_steps: int | None, tracker_config: dict[str, Any] | None = None,
                 accelerator: Any = None):
        import torch  # optional: torch
        from accelerate.utils import set_seed  # optional: accelerate
        from transformers import get_scheduler  # optional: transformers

        from webgym_rl.collate import Collator  # optional: torch (collate imports it)
        from webgym_rl.modeling import (  # lazy: imports transformers
            load_model,
            load_processor,
            placeholder_token_ids,
        )
        from webgym_rl.objectives import NEEDS_PROXIMAL, OBJECTIVES  # optional: torch (objectives imports it)

        t = self.training = training
        self.out = Path(out)
        base, revision, adapter = _starting_point(model, model_revision, training)
        self.base_model, self.base_revision, self.start_adapter = base, revision, adapter
        if total_steps is None and t.lr_scheduler != "constant":
            raise TrainSettingsError(f"lr_scheduler: {t.lr_scheduler} needs the number of optimizer steps "
                                     "in advance: give --max-steps (per round), or use 'constant'")
        self.accelerator = accelerator = accelerator or make_accelerator(t, self.out)
        self.processor = load_processor(base, revision=revision, min_pixels=t.images.min_pixels,
                                        max_pixels=t.images.max_pixels)
        self.collator = Collator(self.processor)
        self._placeholders = torch.tensor(placeholder_token_ids(self.processor.tokenizer), dtype=torch.long)
        """Vision placeholder ids: no reply holds one, so the policy's distribution excludes them."""
        set_seed(seed)
        net = load_model(base, revision=revision, dtype=getattr(torch, t.model_dtype))
        net.train()
        self._logits_at_labels = "logits_to_keep" in inspect.signature(net.forward).parameters
        """The model computes logits at given positions (``logits_to_keep``): the trainer asks for
        those whose next token is labelled alone (`webgym_rl.objectives.logit_positions`)."""
        if t.gradient_checkpointing:
            net.config.use_cache = False
            if hasattr(net, "activation_checkpointing_enable"):  # transformers >= 5.2x
                net.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
            else:
                net.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if t.lora:
            from peft import LoraConfig, get_peft_model  # optional: peft

            from webgym_rl.merge import apply_adapter  # lazy: imports transformers

            if t.gradient_checkpointing:
                net.enable_input_require_grads()
            if adapter is not None:  # the same adapter trains on: the result still adapts `base`
                net = apply_adapter(net, adapter, trainable=True)
            else:
                net = get_peft_model(net, LoraConfig(
                    r=t.lora_rank, lora_alpha=t.lora_alpha, lora_dropout=t.lora_dropout,
                    target_modules=list(t.lora_target_modules)))
        self._reference = None
        """The frozen starting model grpo's KL penalty compares with (None: not needed, or a LoRA run
        without a starting adapter, whose reference is the model with its adapter switched off)."""
        if t.grpo.kl_coef > 0 and (not t.lora or adapter is not None):
            self._reference = copy.deepcopy(net).requires_grad_(False).eval().to(accelerator.device)
        optimizer = torch.optim.AdamW([p for p in net.parameters() if p.requires_grad],
                                      lr=t.learning_rate, weight_decay=t.weight_decay)
        # Accelerate steps a prepared scheduler once per process per optimizer step.
        n = accelerator.num_processes
        scheduler = get_scheduler(t.lr_scheduler, optimizer, num_warmup_steps=t.warmup_steps * n,
                                  num_training_steps=(total_steps or 1) * n)
        self.model, self.optimizer, self.scheduler = accelerator.prepare(net, optimizer, scheduler)
        self.objective = Objective(t.objective)
        self.loss = OBJECTIVES[self.objective]
        self.needs_proximal = self.objective in NEEDS_PROXIMAL
        self.needs_reference = t.grpo.kl_coef > 0
        self.passes = t.grpo.ppo_epochs
        """Passes (optimizer steps) over each batch."""
        self._proximal: list[Any] | None = None
        """The proximal log-probabilities of the batch being passed over, while passes remain (a
        checkpoint keeps them, so a resume in the middle of a batch's passes is exact)."""
        self.step = 0
        """Optimizer steps over the trainer's life."""
        self.log_history: list[dict[str, float]] = []
        if accelerator.is_main_process and t.log_with != "none":
            self.out.mkdir(parents=True, exist_ok=True)
        accelerator.init_trackers("logs", config=tracker_config or {})

    @property
    def is_main_process(self) -> bool:
        return self.accelerator.is_main_process

    @property
    def num_processes(self) -> int:
        return self.accelerator.num_processes

    def check(self, sample: Any) -> None:
        """Encode one sample now: one the processor rejects stops a run before its first step."""
        self.collator([sample])

    def on_policy_check(self, samples: Any, per_version: int = 32) -> dict[str, dict[str, float]]:
        """The on-policy check, as RL engines log it, before any update on `samples` (a
        `webgym_rl.samples.StepSamples`): for up to `per_version` samples of each policy version
        that carry their sampled token ids and log-probabilities (the first in `samples`' order), the
        absolute difference between the trainer's log-probability of each sampled token (at the
        sample's temperature, no gradient) and the rollout's. Returns ``{"v<N>": {"samples",
        "tokens", "mean_abs", "max_abs"}}``; every process computes the same.

        For the version the trainer holds, the two are the same policy, so the difference is
        numerical noise (below 1e-3 in float32; more in bf16); more means that the trainer does not
        score what the policy sampled (another prompt, other image tokens, a top-k/top-p cut, a bug).
        For older versions it also measures how far the weights have moved since."""
        import torch  # optional: torch

        from webgym_rl.collate import NOT_MODEL_INPUTS  # optional: torch (collate imports it)
        from webgym_rl.objectives import response_logprobs  # optional: torch (objectives imports it)

        chosen: dict[str, list[int]] = {}
        for index, (version, exact) in enumerate(zip(samples.policy_versions, samples.exact, strict=True)):
            picked = chosen.setdefault("unknown" if version is None else f"v{version}", [])
            if exact and len(picked) < per_version:
                picked.append(index)
        found: dict[str, dict[str, float]] = {}
        for version, indices in sorted(chosen.items()):
            if not indices:
                continue
            total, count, largest = 0.0, 0, 0.0
            for index in indices:
                micro = {k: v.to(self.accelerator.device) for k, v in self.collator([samples[index]]).items()}
                inputs = {k: v for k, v in micro.items() if k not in NOT_MODEL_INPUTS}
                positions = self.logit_positions(micro["labels"])
                with torch.no_grad(), self.accelerator.autocast():
                    logits = self.policy_logits(self.model, inputs, positions)
                logp, mask = response_logprobs(logits, micro["labels"], micro["temperatures"], positions)
                behaviour = micro["behaviour_logprobs"][:, 1:].to(logp.dtype)
                known = mask & ~torch.isnan(behaviour)
                diff = (logp - torch.nan_to_num(behaviour)).abs()[known]
                total += float(diff.sum())
                count += int(diff.numel())
                largest = max(largest, float(diff.max())) if diff.numel() else largest
            found[version] = {"samples": len(indices), "tokens": count,
                              "mean_abs": total / count if count else 0.0, "max_abs": largest}
        return found

    def loader(self, samples: Any, order: Any) -> Any:
        """A prepared DataLoader over `samples` (a map-style dataset of `Sample`) in `order` (a
        sampler; `EpochOrder` for recency-weighted epochs)."""
        import torch  # optional: torch

        loader = torch.utils.data.DataLoader(
            samples, batch_size=self.training.per_device_batch_size, sampler=order,
            collate_fn=self.collator)
        return self.accelerator.prepare_data_loader(loader)

    def fit(self, loader: Any, order: Any, *, until: int, position: FitPosition | None = None,
            save_every: int = 0, on_save: Callable[[], None] | None = None, progress: Any = None
            ) -> FitResult:
        """Train on `loader` (over sampler `order`) until the trainer has made `until` optimizer steps
        in all.

        A batch is the ``gradient_accumulation_steps`` consecutive micro-batches of one optimizer step
        (fewer at the end of an epoch); it gets ``ppo_epochs`` passes, one optimizer step each, the
        objective called the same way on every micro-batch (`webgym_rl.objectives.ObjectiveBatch`).
        The proximal log-probabilities (for the objectives that need them) are those of the batch's
        first pass, before its first update; the reference model's are computed per batch.

        `position` (a `FitPosition`, updated in place) is where in the data order to start: a
        resumed run skips what it has seen. `on_save()` is called every `save_every` optimizer steps
        before the last, with the log history up to date."""
        if isinstance(position, dict):  # before 0.3.0 the position was a dict, updated in place
            warnings.warn("Trainer.fit(position=dict) is deprecated: pass a FitPosition", DeprecationWarning,
                          stacklevel=2)
            given, position = position, FitPosition(**{k: position.get(k, 0) for k in _POSITION_KEYS})
            try:
                return self.fit(loader, order, until=until, position=position, save_every=save_every,
                                on_save=on_save, progress=progress)
            finally:
                given.update(asdict(position))
        position = position if position is not None else FitPosition()
        if position.ppo_epoch == 0:
            self._proximal = None
        elif self._proximal is None:
            raise ResumeError(f"the position is {position.ppo_epoch} passes into a batch, but the "
                              "checkpoint holds no proximal log-probabilities for it")
        first_step, samples_seen = self.step, 0
        pending = _PendingLogs(self.accelerator, self.log_history, progress)
        started, started_cpu = time.perf_counter(), time.process_time()
        for group in self._batches(loader, order, position, until):
            samples_seen += self._passes(group, position, until, pending, save_every, on_save)
        pending.flush()
        made = self.step - first_step
        return FitResult(steps=made, log_history=self.log_history[len(self.log_history) - made:],
                         samples_seen=samples_seen,
                         loop_seconds=time.perf_counter() - started,
                         loop_cpu_seconds=time.process_time() - started_cpu)

    def _batches(self, loader: Any, order: Any, position: FitPosition,
                 until: int) -> Iterator[list[dict[str, Any]]]:
        """The batches (each the micro-batches of one optimizer step) from `position` on, epoch after
        epoch, until the trainer has made `until` steps; moves `position` to the next epoch."""
        accumulation = self.training.gradient_accumulation_steps
        while self.step < until:
            if position.batches_in_epoch >= len(loader):
                position.epoch, position.batches_in_epoch = position.epoch + 1, 0
            order.epoch = position.epoch
            epoch_loader = (self.accelerator.skip_first_batches(loader, position.batches_in_epoch)
                            if position.batches_in_epoch else loader)
            group: list[dict[str, Any]] = []
            for micro in epoch_loader:
                group.append(dict(micro))
                if len(group) < min(accumulation, len(loader) - position.batches_in_epoch):
                    continue
                yield group
                group = []
                if self.step >= until:
                    return

    def _passes(self, group: list[dict[str, Any]], position: FitPosition, until: int, pending: _PendingLogs,
                save_every: int, on_save: Callable[[], None] | None) -> int:
        """The remaining passes over one batch (`group`: its micro-batches), one optimizer step each;
        returns the samples trained on."""
        n, samples_seen = len(group), 0
        reference = [self._reference_logprobs(micro) for micro in group] if self.needs_reference \
            else [None] * n
        normalisers = self._step_normalisers(group)
        proximal = self._proximal if position.ppo_epoch else [None] * n
        if len(proximal) != n:
            raise ResumeError(f"the checkpoint holds proximal log-probabilities of {len(proximal)} "
                              f"micro-batches, the batch it stopped in has {n}")
        while self.step < until:
            window_loss, window_metrics, grad_norm, seen = self._one_pass(group, proximal, reference,
                                                                          normalisers)
            samples_seen += seen
            self.step += 1
            done = position.passed(n, self.passes)
            self._proximal = None if done else proximal
            mean_loss = self.accelerator.reduce(window_loss / n, reduction="mean")
            pending.add(self.step, position.epoch, mean_loss, self.scheduler.get_last_lr()[0], grad_norm,
                        {k: v / n for k, v in window_metrics.items()})
            if self.step % self.training.log_every == 0:
                pending.flush()
            if save_every and on_save is not None and self.step % save_every == 0 and self.step < until:
                pending.flush()
                on_save()
            if done:
                break
        return samples_seen

    def _one_pass(self, group: list[dict[str, Any]], proximal: list[Any], reference: list[Any],
                  normalisers: tuple[float, float]) -> tuple[Any, dict[str, Any], Any, int]:
        """One pass over a batch: the objective on each micro-batch, gradients accumulated, one
        optimizer step at the last. Fills `proximal` on the first pass. Returns (summed loss, summed
        metrics, the gradient norm, samples)."""
        from webgym_rl.collate import NOT_MODEL_INPUTS  # optional: torch (collate imports it)
        from webgym_rl.objectives import ObjectiveBatch  # optional: torch (objectives imports it)

        t, accelerator = self.training, self.accelerator
        _one_step_per(accelerator, len(group))
        step_tokens, step_samples = normalisers
        window_loss, window_metrics, grad_norm, seen = 0.0, {}, None, 0
        for j, micro in enumerate(group):
            labels = micro["labels"]
            inputs = {k: v for k, v in micro.items() if k not in NOT_MODEL_INPUTS}
            positions = self.logit_positions(labels)
            with accelerator.accumulate(self.model):
                logits = self.policy_logits(self.model, inputs, positions)
                if self.needs_proximal and proximal[j] is None:
                    proximal[j] = self._logprobs(logits, labels, micro["temperatures"], positions)
                batch = ObjectiveBatch(
                    logits=logits, labels=labels, advantages=micro["advantages"],
                    behaviour_logprobs=micro["behaviour_logprobs"][:, 1:],
                    proximal_logprobs=proximal[j], reference_logprobs=reference[j],
                    temperatures=micro["temperatures"], step_tokens=step_tokens,
                    step_samples=step_samples, positions=positions)
                loss, metrics = self.loss(batch, t)
                accelerator.backward(loss)
                if accelerator.sync_gradients and t.max_grad_norm > 0:
                    grad_norm = accelerator.clip_grad_norm_(self.model.parameters(), t.max_grad_norm)
                self.optimizer.step()
                self.scheduler.step()
                self.optimizer.zero_grad()
            seen += labels.shape[0]
            window_loss += loss.detach().float()
            for key, value in metrics.items():
                window_metrics[key] = window_metrics.get(key, 0.0) + value
        if not accelerator.sync_gradients:  # accelerate's accounting is ours to keep right
            raise TrainingError(f"BUG: the optimizer did not step after a batch of {len(group)} "
                                "micro-batches")
        return window_loss, window_metrics, grad_norm, seen

    def logit_positions(self, labels: Any) -> Any:
        """The positions whose logits the objectives read (`webgym_rl.objectives.logit_positions`),
        or None (every position) when the model cannot compute logits at chosen positions."""
        from webgym_rl.objectives import logit_positions  # optional: torch (objectives imports it)

        return logit_positions(labels) if self._logits_at_labels else None

    def policy_logits(self, model: Any, inputs: dict[str, Any], positions: Any = None) -> Any:
        """`model`'s logits of `inputs` as the policy's: the vision placeholder tokens, which the
        policy server never samples (`webgym_rl.modeling.VISION_PLACEHOLDERS`), at -inf. At
        `positions` alone (``(B, K, V)``, see `logit_positions`) when given, else everywhere."""
        logits = (model(**inputs).logits if positions is None
                  else model(**inputs, logits_to_keep=positions).logits)
        if not len(self._placeholders):
            return logits
        # In place: a copy would double the largest tensor of a step (batch x length x vocabulary).
        # Autograd allows it (the output projection's backward needs its input, not its output)
        # and would refuse it loudly were the logits saved for a backward.
        return logits.index_fill_(-1, self._placeholders.to(logits.device), float("-inf"))

    @staticmethod
    def _logprobs(logits: Any, labels: Any, temperatures: Any = None, positions: Any = None) -> Any:
        """The response tokens' log-probabilities under `logits`, detached (`response_logprobs`)."""
        import torch  # optional: torch

        from webgym_rl.objectives import response_logprobs  # optional: torch (objectives imports it)

        with torch.no_grad():
            return response_logprobs(logits.detach(), labels, temperatures, positions)[0]

    def _step_normalisers(self, group: list[dict[str, Any]]) -> tuple[float, float]:
        """(response tokens, samples) of the optimizer step whose micro-batches are `group`, summed
        over every process, each divided by the micro-batches times the processes (what gradient
        accumulation and the data-parallel mean divide a loss by): the objectives' normalisers."""
        import torch  # optional: torch

        tokens = sum(int((micro["labels"][:, 1:] != -100).sum()) for micro in group)
        samples = sum(micro["labels"].shape[0] for micro in group)
        local = torch.tensor([float(tokens), float(samples)], device=self.accelerator.device)
        tokens, samples = self.accelerator.reduce(local, reduction="sum").tolist()
        divisor = len(group) * self.accelerator.num_processes
        return tokens / divisor, samples / divisor

    def _reference_logprobs(self, micro: dict[str, Any]) -> Any:
        """The reference (starting) model's log-probabilities of `micro`'s response tokens."""
        import torch  # optional: torch

        from webgym_rl.collate import NOT_MODEL_INPUTS  # optional: torch (collate imports it)

        inputs = {k: v for k, v in micro.items() if k not in NOT_MODEL_INPUTS}
        model = self.accelerator.unwrap_model(self.model)
        positions = self.logit_positions(micro["labels"])
        with torch.no_grad(), self.accelerator.autocast():
            if self._reference is not None:
                logits = self.policy_logits(self._reference, inputs, positions)
            else:  # a LoRA run from a fresh adapter: the model without its adapter is the start
                with model.disable_adapter():
                    logits = self.policy_logits(model, inputs, positions)
        return self._logprobs(logits, micro["labels"], micro["temperatures"], positions)

    def save(self, folder: Path, state: dict[str, Any]) -> Path:
        """A full checkpoint in `folder`: ``training_state/`` (optimizer, schedule, RNG, model),
        the model (or adapter) and processor in Hugging Face format, and `state` as
        ``trainer_state.json``, written last (its presence marks a complete checkpoint). Every
        process must call it."""
        accelerator = self.accelerator
        accelerator.save_state(str(folder / "training_state"))
        self._save_model(folder)
        if self._proximal is not None:  # stopped between two passes over a batch: each rank its own
            from safetensors.torch import save_file  # optional: safetensors

            save_file({str(j): p.contiguous().cpu() for j, p in enumerate(self._proximal)},
                      str(folder / f"proximal-{accelerator.process_index}.safetensors"))
        if accelerator.is_main_process:
            (folder / STATE_FILE).write_text(json.dumps(state, indent=1))
        accelerator.wait_for_everyone()
        log.info("saved checkpoint %s", folder)
        return folder

    def _save_model(self, folder: Path) -> None:
        accelerator = self.accelerator
        state_dict = accelerator.get_state_dict(self.model)
        accelerator.unwrap_model(self.model).save_pretrained(
            folder, is_main_process=accelerator.is_main_process, save_function=accelerator.save,
            state_dict=state_dict)
        if accelerator.is_main_process:
            self.processor.save_pretrained(folder)

    def load(self, folder: Path) -> dict[str, Any]:
        """Restore the checkpoint `save` wrote to `folder`; returns its state (``trainer_state.json``).
        Every process must call it."""
        state = json.loads((folder / STATE_FILE).read_text())
        if state.get("num_processes") not in (None, self.num_processes):
            # The saved data position counts per-process batches: it means nothing on another layout.
            raise ResumeError(f"{folder} was written by {state.get('num_processes')} processes, this run "
                              f"has {self.num_processes}")
        self.accelerator.load_state(str(folder / "training_state"))
        self._proximal = None
        proximal = folder / f"proximal-{self.accelerator.process_index}.safetensors"
        if proximal.is_file():
            from safetensors.torch import load_file  # optional: safetensors

            tensors = load_file(str(proximal), device=str(self.accelerator.device))
            self._proximal = [tensors[str(j)] for j in range(len(tensors))]
        self.step = int(state["step"])
        self.log_history = list(state.get("log_history", []))
        return state

    def servable_state_dict(self) -> dict[str, Any] | None:
        """The weights a policy server loads, on the main process (None on the others; every process
        must call it): the model's own, or for LoRA the adapter folded into its base model's weights
        (the adapter itself is left as it is: training goes on)."""
        accelerator = self.accelerator
        if self.training.lora:
            from webgym_rl.merge import merged_state_dict  # lazy: imports transformers

            return merged_state_dict(accelerator.unwrap_model(self.model)) if accelerator.is_main_process \
                else None
        # The tensors themselves, not copies (16 GB for an 8B model): a caller uses them before the
        # next step changes them.
        state_dict = accelerator.get_state_dict(self.model)
        return {k: v.detach() for k, v in state_dict.items()} if accelerator.is_main_process else None

    def save_servable(self, folder: Path, state: dict[str, Any]) -> Path:
        """Write the weights `servable_state_dict` gives, the processor and `state` (as
        ``trainer_state.json``) to `folder`, atomically (a temporary folder renamed into place).
        Every process must call it."""
        weights = self.servable_state_dict()
        if self.accelerator.is_main_process:
            tmp = folder.with_name(f".{folder.name}.tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            model = self.accelerator.unwrap_model(self.model)
            base = model.get_base_model() if self.training.lora else model
            base.save_pretrained(tmp, state_dict=weights)
            self.processor.save_pretrained(tmp)
            (tmp / STATE_FILE).write_text(json.dumps(state, indent=1))
            if folder.exists():
                shutil.rmtree(folder)
            os.replace(tmp, folder)
        self.accelerator.wait_for_everyone()
        return folder

    def end(self) -> None:
        self.accelerator.end_training()


def train(settings: TrainCommandSettings) -> TrainResult:
    """Check inputs, then train. Every bad input stops here, before the first step."""
    from tqdm.auto import tqdm  # optional: tqdm

    t = settings.training
    out = settings.out_dir
    resume_from = None
    if settings.resume:
        complete = complete_checkpoints(out)
        if not complete:
            raise ResumeError(f"--resume: no complete checkpoint "
                              f"({CHECKPOINT_PREFIX}N/{STATE_FILE}) in {out}")
        resume_from = complete[-1]
    _starting_point(settings.model, settings.model_revision, t)  # a bad --model stops before Accelerate

    # Inputs, all checked before any model is built. The main process fills the datasets cache
    # first; the others then read it instead of racing to write it.
    accelerator = make_accelerator(t, out)
    with accelerator.main_process_first():
        sources = load_trajectories(settings.data, cache_dir=settings.cache_dir)
    samples = build_samples(sources, t.objective, t.samples)
    objective_name = Objective(t.objective).value
    if resume_from is not None:
        saved = json.loads((resume_from / STATE_FILE).read_text())
        now = {"objective": objective_name, "data": describe_sources(sources)}
        for key, value in now.items():
            if saved.get(key) != value:
                raise ResumeError(f"--resume: {resume_from} was trained with {key} {saved.get(key)!r}, this "
                                  f"run has {value!r}; an exact resume needs the same {key} (to start a new "
                                  f"run from that checkpoint, pass it as --model)")
    total_steps = steps_for(len(samples), t, accelerator.num_processes)
    trainer = Trainer(model=settings.model, model_revision=settings.model_revision, training=t, out=out,
                      seed=settings.seed, total_steps=total_steps, tracker_config=_tracker_config(settings),
                      accelerator=accelerator)
    trainer.check(samples[0])  # a sample the processor rejects stops the run now, not at step 1000
    on_policy = trainer.on_policy_check(samples)
    if trainer.is_main_process:
        log.info("%s", samples.counts.summary())
        log.info("on-policy check: %s", describe_on_policy(on_policy))
    order = EpochOrder(samples.weights, settings.seed)
    loader = trainer.loader(samples, order)

    state: dict[str, Any] = {
        "step": 0, "epoch": 0, "batches_in_epoch": 0, "ppo_epoch": 0, "log_history": [],
        "base_model": trainer.base_model, "base_model_revision": trainer.base_revision,
        "start_adapter": str(trainer.start_adapter) if trainer.start_adapter else None,
        "objective": objective_name, "data": describe_sources(sources), "counts": samples.counts.as_dict(),
        "on_policy": on_policy, "num_processes": trainer.num_processes,
        "settings": settings_to_dict(settings),
    }
    position = FitPosition()
    if resume_from is not None:
        position = FitPosition.from_state(trainer.load(resume_from))
        state["resumed_from"] = str(resume_from)
        if trainer.is_main_process:
            log.info("resuming from %s at step %d (epoch %d, batch %d)", resume_from, trainer.step,
                     position.epoch, position.batches_in_epoch)

    def snapshot() -> dict[str, Any]:
        return {**state, **asdict(position), "step": trainer.step, "log_history": trainer.log_history}

    def checkpoint() -> None:
        trainer.save(out / f"{CHECKPOINT_PREFIX}{trainer.step:06d}", snapshot())

    progress = tqdm(total=total_steps, initial=trainer.step, desc=f"train {objective_name}",
                    disable=not trainer.accelerator.is_local_main_process)
    fitted = trainer.fit(loader, order, until=total_steps, position=position,
                         save_every=t.save_every, on_save=checkpoint, progress=progress)
    progress.close()
    final = trainer.save(out / f"{CHECKPOINT_PREFIX}{trainer.step:06d}", snapshot())
    trainer.end()
    return TrainResult(checkpoint=final, steps=trainer.step, log_history=trainer.log_history,
                       counts=state["counts"], samples_seen=fitted.samples_seen,
                       loop_seconds=fitted.loop_seconds, loop_cpu_seconds=fitted.loop_cpu_seconds,
                       on_policy=on_policy, model=trainer.accelerator.unwrap_model(trainer.model))


# ---------------------------------------------------------------------------------------------
# CLI: one option per setting, its help taken from the field's docstring (webgym_core.settings).


@click.command("train", cls=SettingsCommand, context_settings={"help_option_names": ["-h", "--help"]})
@settings_options(TrainCommandSettings)
def train_command(config: str | None, **flags: Any) -> None:
    """Fine-tune a Qwen-VL policy on trajectory datasets (filtered_bc, reinforce or grpo).

    Reads every kept step of the trajectories as (prompt the policy saw, response it gave), trains
    with Accelerate and writes Hugging Face checkpoints to OUT/checkpoint-NNNNNN. Run it under
    `accelerate launch` for several GPUs (DDP/FSDP/DeepSpeed from the Accelerate config).

    \b
    Example:
      webgym-rl tiny-model out/tiny-qwen2vl
      webgym-rl train --model out/tiny-qwen2vl --objective filtered_bc \\
          --data out/trajectories/iter-0000 out/trajectories/iter-0001 \\
          --out out/checkpoints/run1 --max-steps 20
      accelerate launch "$(which webgym-rl)" train --config train.yaml --lora --resume
    """
    from webgym_rl.modeling import ModelingError  # lazy: imports transformers

    try:
        settings = load_settings(TrainCommandSettings, config, flags)
        result = train(settings)
    except (SettingsError, WebgymRLError, ModelingError) as exc:
        raise click.ClickException(str(exc)) from exc
    counts = result.counts
    click.echo(f"{counts['objective']}: {counts['trajectories_read']} trajectories read, "
               f"{counts['trajectories_kept']} kept, {counts['steps_kept']} steps; "
               f"trained {result.steps} steps; checkpoint {result.checkpoint}")
    click.echo(f"on-policy check (trainer vs rollout log-probabilities of the sampled tokens, before "
               f"training): {describe_on_policy(result.on_policy)}")
