"""The training settings of webgym_rl, read by the trainer (`webgym_rl.train`), the objectives
(`webgym_rl.objectives`) and the loop (`webgym_rl.loop`), which import this module and not each
other for them:

- `OptimizationSettings`: how the weights are optimised (the objective, the samples, LoRA, the
  optimizer, the schedule, the batch, precision, logging), with grpo's knobs (`GRPOSettings`);
- `TrainCommandSettings`: the ``webgym-rl train`` command: the model, the data and the output
  folder, plus one `OptimizationSettings`;
- `ExportCommandSettings`: the ``webgym-rl export`` command: the data, the output folder and the
  steps kept (filtered_bc's `SampleSelection`, the trainer's own).

(Before 0.3.0 these were ``webgym_rl.train.TrainingSettings`` and ``webgym_rl.train.TrainSettings``;
the old names still import, with a DeprecationWarning, for one release. The loop's resident trainer
process has settings of its own: `webgym_rl.loop.settings.ResidentTrainerSettings`.)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from webgym_core.settings import flat
from webgym_rl.errors import TrainSettingsError
from webgym_rl.pixels import ImageSettings
from webgym_rl.samples import Objective, SampleSelection

__all__ = ["ExportCommandSettings", "GRPOSettings", "LossAggregation", "MixedPrecision", "ModelDtype",
           "OptimizationSettings", "Scheduler", "TrainCommandSettings"]

Scheduler = Literal["constant", "linear", "cosine"]
ModelDtype = Literal["float32", "bfloat16"]
MixedPrecision = Literal["auto", "no", "bf16", "fp16"]
LossAggregation = Literal["token-mean", "sequence-mean"]


def _check_choice(name: str, value: Any, allowed: Any) -> None:
    """Refuse a value outside `allowed` (a Literal or an Enum), naming the field."""
    allowed = [m.value for m in allowed] if isinstance(allowed, type) else list(get_args(allowed))
    if value not in allowed:
        raise TrainSettingsError(f"{name}: {value!r} is unknown; choose one of "
                                 f"{', '.join(repr(a) for a in allowed)}")


@dataclass(frozen=True)
class GRPOSettings:
    """The knobs of ``--objective grpo`` (its exact form: `webgym_rl.objectives`)."""

    clip_low: float = 0.2
    """grpo: PPO clipping below: the ratio to the proximal policy is clipped to
    [1 - clip_low, 1 + clip_high]."""
    clip_high: float = 0.28
    """grpo: PPO clipping above (DAPO's clip-higher: wider than clip_low, so unlikely tokens of good
    replies can still rise)."""
    behaviour_cap: float = 5.0
    """grpo: decoupled PPO: tokens whose behaviour weight pi_prox / mu (proximal over the policy that
    rolled them out) exceeds this are masked out (AsyncWebRL: 5); 0 = no mask."""
    ppo_epochs: int = 1
    """grpo: passes over each batch (one optimizer step each; --max-steps counts them all); the
    proximal log-probabilities are computed once per batch, in its first pass."""
    kl_coef: float = 0.0
    """grpo: weight of the KL penalty to the starting (reference) model; 0 = off. The reference is a
    frozen copy of the starting weights (a LoRA run from a fresh adapter: the model with its adapter
    switched off, no copy)."""
    loss_aggregation: LossAggregation = "token-mean"
    """grpo: per-step normaliser: token-mean (all response tokens of the batch weigh alike; DAPO) or
    sequence-mean (each step's tokens averaged first, then the steps; the GRPO paper)."""

    def __post_init__(self) -> None:
        _check_choice("loss_aggregation", self.loss_aggregation, LossAggregation)
        if not 0 < self.clip_low < 1:
            raise TrainSettingsError(f"clip_low: must be in (0, 1), got {self.clip_low}")
        if not self.clip_high > 0:
            raise TrainSettingsError(f"clip_high: must be > 0, got {self.clip_high}")
        if not (self.behaviour_cap == 0 or self.behaviour_cap >= 1):
            raise TrainSettingsError(f"behaviour_cap: must be 0 (no mask) or >= 1 (an on-policy token has "
                                     f"weight 1), got {self.behaviour_cap}")
        if self.ppo_epochs < 1:
            raise TrainSettingsError(f"ppo_epochs: must be >= 1, got {self.ppo_epochs}")
        if not self.kl_coef >= 0:
            raise TrainSettingsError(f"kl_coef: must be >= 0, got {self.kl_coef}")


@dataclass(frozen=True)
class OptimizationSettings:
    """How the weights are optimised: the objective, which samples, LoRA, the optimizer, the
    schedule, the batch, precision and logging (the hyperparameters). `TrainCommandSettings` holds
    one; so does the loop's `LoopSettings`, and the resident trainer is built from it."""

    objective: Objective = Objective.FILTERED_BC
    """Training objective: which samples are kept and which loss trains on them."""
    samples: SampleSelection = flat(SampleSelection)
    importance_clip: float = 2.0
    """reinforce: truncate the importance weight of off-policy samples (trained model over the policy
    that rolled them out, from the stored log-probabilities) at this value; 0 = no weights."""
    grpo: GRPOSettings = flat(GRPOSettings)
    lora: bool = False
    """Train a LoRA adapter (peft) instead of all weights."""
    lora_rank: int = 16
    """LoRA rank."""
    lora_alpha: int = 32
    """LoRA scaling numerator (scale = alpha / rank)."""
    lora_dropout: float = 0.0
    """Dropout on the LoRA path."""
    lora_target_modules: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])
    """Module names LoRA wraps (the language model's attention projections by default)."""
    learning_rate: float = 1e-5
    """Peak learning rate of AdamW."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    lr_scheduler: Scheduler = "constant"
    """Learning-rate schedule after warm-up: constant, linear or cosine."""
    warmup_steps: int = 0
    """Optimizer steps of linear warm-up."""
    per_device_batch_size: int = 1
    """Samples per forward pass on each process."""
    gradient_accumulation_steps: int = 1
    """Forward passes per optimizer step."""
    max_steps: int = 0
    """Optimizer steps to train for (0 = use --epochs)."""
    epochs: float = 1.0
    """Passes over the samples when --max-steps is 0."""
    max_grad_norm: float = 1.0
    """Clip the gradient norm to this (0 = no clipping)."""
    model_dtype: ModelDtype = "float32"
    """Dtype the weights are loaded and updated in: float32 (mixed precision keeps fp32 master
    weights) or bfloat16 (half the memory; pure-bf16 updates)."""
    mixed_precision: MixedPrecision = "auto"
    """no, bf16 or fp16; auto = what accelerate launch says, else bf16 where the GPU supports it."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass (less memory, more compute)."""
    images: ImageSettings = flat(ImageSettings)
    save_every: int = 0
    """Write a checkpoint every N optimizer steps (0 = only at the end)."""
    log_every: int = 10
    """Send metrics (means over the last N steps) to the trackers every N optimizer steps."""
    log_with: str = "tensorboard"
    """Accelerate tracker: tensorboard (offline, under OUT/logs), wandb, ... or none."""

    def __post_init__(self) -> None:
        _check_choice("objective", self.objective, Objective)
        _check_choice("lr_scheduler", self.lr_scheduler, Scheduler)
        _check_choice("model_dtype", self.model_dtype, ModelDtype)
        _check_choice("mixed_precision", self.mixed_precision, MixedPrecision)
        for name in ("per_device_batch_size", "gradient_accumulation_steps", "log_every", "lora_rank"):
            if getattr(self, name) < 1:
                raise TrainSettingsError(f"{name}: must be >= 1, got {getattr(self, name)}")
        for name in ("warmup_steps", "save_every", "max_steps", "max_grad_norm", "weight_decay",
                     "importance_clip"):
            if getattr(self, name) < 0:
                raise TrainSettingsError(f"{name}: must be >= 0, got {getattr(self, name)}")
        if not self.learning_rate > 0:
            raise TrainSettingsError(f"learning_rate: must be > 0, got {self.learning_rate}")
        if self.max_steps == 0 and not self.epochs > 0:
            raise TrainSettingsError(f"epochs: must be > 0 when max_steps is 0, got {self.epochs}")
        if Objective(self.objective) is not Objective.GRPO:
            for name, default in (("ppo_epochs", 1), ("kl_coef", 0.0)):
                if getattr(self.grpo, name) != default:
                    raise TrainSettingsError(f"{name}: applies to --objective grpo only (the objective is "
                                             f"{Objective(self.objective).value})")


@dataclass(frozen=True)
class TrainCommandSettings:
    """The ``webgym-rl train`` command: what `train` trains (model, data, output) and how
    (`training`). Filled from defaults, then a YAML file, then CLI flags
    (`webgym_core.settings.load_settings`)."""

    model: str = ""
    """Starting checkpoint: a local folder or a Hub model id (any Qwen2-VL / Qwen2.5-VL / Qwen3-VL),
    or a LoRA adapter folder (with --lora: that adapter trains on, on the base model its
    adapter_config.json names, so the result is again an adapter of that base model)."""
    model_revision: str | None = None
    """Hub revision of --model, or of its base model when --model is an adapter folder (branch, tag
    or commit); "main" when the model is a Hub id."""
    data: list[str] = field(default_factory=list)
    """Trajectory sources: rollout folders or Hub dataset ids (id or id@revision)."""
    out: str = ""
    """Output folder: checkpoints and TensorBoard logs."""
    resume: bool = False
    """Continue from the newest complete checkpoint in --out (same data order and optimizer state)."""
    seed: int = 0
    """Seed for the data order and the RNGs."""
    cache_dir: str | None = None
    """datasets cache folder for the trajectory shards (default: the HF cache)."""
    training: OptimizationSettings = flat(OptimizationSettings)

    def __post_init__(self) -> None:
        if not self.model:
            raise TrainSettingsError("model: is required (a checkpoint folder or Hub model id)")
        if not self.out:
            raise TrainSettingsError("out: is required (the folder checkpoints go to)")
        if not self.data:
            raise TrainSettingsError("data: is required (one or more trajectory folders or Hub dataset ids)")

    @property
    def out_dir(self) -> Path:
        return Path(self.out)


# SampleSelection's fields that only the policy-gradient objectives read (export selects filtered_bc's).
_POLICY_GRADIENT_ONLY = ("normalize_advantage", "advantage_clip", "policy_gradient_no_ops")


@dataclass(frozen=True)
class ExportCommandSettings:
    """The ``webgym-rl export`` command: which trajectory steps (filtered_bc's selection, the one
    ``webgym-rl train --objective filtered_bc`` trains on) go to which folder, as a conversational
    dataset for TRL's SFTTrainer (`webgym_rl.export`)."""

    data: list[str] = field(default_factory=list)
    """Trajectory sources: rollout folders or Hub dataset ids (id or id@revision)."""
    out: str = ""
    """Output folder: data/train-*.parquet and README.md (load it with datasets.load_dataset(OUT))."""
    cache_dir: str | None = None
    """datasets cache folder for the trajectory shards (default: the HF cache)."""
    samples: SampleSelection = flat(SampleSelection)
    shard_rows: int = 1000
    """Rows per parquet shard of the export."""
    overwrite: bool = False
    """Replace an earlier export in --out (its shards and card); without it such a folder is refused."""
    check_with_trl: bool = True
    """Read the first row back through TRL's own message preparation, as SFTTrainer will (needs the
    interop extra; --no-check-with-trl skips it)."""

    def __post_init__(self) -> None:
        if not self.data:
            raise TrainSettingsError("data: is required (one or more trajectory folders or Hub dataset ids)")
        if not self.out:
            raise TrainSettingsError("out: is required (the folder the dataset goes to)")
        if self.shard_rows < 1:
            raise TrainSettingsError(f"shard_rows: must be >= 1, got {self.shard_rows}")
        default = SampleSelection()
        for name in _POLICY_GRADIENT_ONLY:
            if getattr(self.samples, name) != getattr(default, name):
                raise TrainSettingsError(f"{name}: applies to the policy-gradient objectives only (export "
                                         "keeps the steps filtered_bc imitates)")

    @property
    def out_dir(self) -> Path:
        return Path(self.out)
