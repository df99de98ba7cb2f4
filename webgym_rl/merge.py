"""LoRA adapter checkpoints, and ``webgym-rl merge``: fold one into its base model's weights.

``webgym-rl train --lora`` saves adapters only; the CPU policy server and the sync loop's next
iteration load ordinary checkpoints. `merge_adapter(adapter_dir, out_dir)` writes one (the loop
calls it after each LoRA training phase). `is_adapter` tells an adapter folder, `adapter_base`
names the model it adapts, `apply_adapter` puts it on that model (trainable, for a trainer that
trains the adapter on).

Errors: `MergeError` (`webgym_rl.errors`): not an adapter, a base model that does not load, an
adapter whose weights do not fit the base model; the message names the folder.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from pathlib import Path

import click

from webgym_rl.errors import MergeError
from webgym_rl.modeling import ModelingError, load_model

__all__ = ["ADAPTER_CONFIG", "adapter_base", "apply_adapter", "is_adapter", "merge_adapter",
           "merge_command", "merged_state_dict"]

logger = logging.getLogger(__name__)

ADAPTER_CONFIG = "adapter_config.json"
# Files a merged checkpoint does not carry over from the adapter folder: the adapter itself and
# peft's own README. Folders (the optimizer state of the adapter's parameters) are left out too.
_ADAPTER_ONLY = ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin", "README.md")


def is_adapter(path: str | Path) -> bool:
    """Is `path` a LoRA adapter checkpoint folder (one with an ``adapter_config.json``)?"""
    return (Path(path) / ADAPTER_CONFIG).is_file()


def _adapter_config(adapter_dir: Path) -> Path:
    """The adapter_config.json of `adapter_dir`; refuses a folder that is not an adapter."""
    if not is_adapter(adapter_dir):
        raise MergeError(f"{adapter_dir} has no {ADAPTER_CONFIG}: not a LoRA adapter checkpoint")
    return adapter_dir / ADAPTER_CONFIG


def adapter_base(adapter_dir: str | Path) -> tuple[str, str | None]:
    """The base model the LoRA adapter in `adapter_dir` adapts (``base_model_name_or_path`` of its
    adapter_config.json) and the Hub revision its training started from (from its
    ``trainer_state.json``; None when it does not say)."""
    adapter_dir = Path(adapter_dir)
    config_file = _adapter_config(adapter_dir)
    base = json.loads(config_file.read_text()).get("base_model_name_or_path") or ""
    if not base:
        raise MergeError(f"{config_file} does not name its base model (base_model_name_or_path); "
                         "give the base model explicitly")
    trainer_state = adapter_dir / "trainer_state.json"
    revision = json.loads(trainer_state.read_text()).get("base_model_revision") \
        if trainer_state.is_file() else None
    return str(base), revision


def apply_adapter(model, adapter_dir: str | Path, *, trainable: bool = False):
    """`model` with the LoRA adapter of `adapter_dir` on it (a peft ``PeftModel``); `trainable`: the
    adapter's weights train on (the base model's stay frozen). Every weight of the adapter must fit
    a module of `model`: peft would only warn, and the result would silently be another model."""
    from peft import PeftModel  # optional: peft
    from peft.utils import get_peft_model_state_dict, load_peft_weights  # optional: peft

    base = getattr(model, "name_or_path", "") or type(model).__name__
    try:
        saved = load_peft_weights(str(adapter_dir), device="cpu")
        adapted = PeftModel.from_pretrained(model, str(adapter_dir), is_trainable=trainable)
    except (OSError, ValueError, RuntimeError) as exc:  # missing weights, shapes of another model
        raise MergeError(f"cannot apply the adapter {adapter_dir} to {base}: {exc}") from exc
    loaded = get_peft_model_state_dict(adapted)
    unused = sorted(k for k, v in saved.items() if k not in loaded or loaded[k].shape != v.shape)
    if unused:
        raise MergeError(f"cannot apply the adapter {adapter_dir} to {base}: {len(unused)} of its "
                         f"{len(saved)} weights match no module of the base model (first: {unused[0]})")
    return adapted


def merged_state_dict(adapted) -> dict:
    """The weights of the peft model `adapted` with its active LoRA adapters folded in, under the
    base model's own names (those of ``merge_and_unload().state_dict()``), without changing
    `adapted`: the adapter keeps training. Each wrapped weight becomes ``W + delta`` (a new tensor;
    peft's ``get_delta_weight`` applies the scale); every other tensor is the model's own (no copy:
    use the result before the next training step)."""
    import torch  # optional: torch
    from peft.tuners.lora import LoraLayer  # optional: peft

    base = adapted.get_base_model()
    deltas: dict[str, torch.Tensor] = {}
    for name, module in base.named_modules():
        if isinstance(module, LoraLayer):
            for adapter in module.active_adapters:
                if adapter in module.lora_A:
                    delta = module.get_delta_weight(adapter).detach()
                    key = f"{name}.weight"
                    deltas[key] = deltas[key] + delta if key in deltas else delta
    merged = {}
    with torch.no_grad():
        for key, value in base.state_dict().items():
            if ".lora_" in key:
                continue
            plain = key.replace(".base_layer.", ".")
            delta = deltas.get(plain)
            merged[plain] = value.detach() if delta is None else value.detach() + delta.to(value.dtype)
    return merged


def merge_adapter(adapter_dir: str | Path, out_dir: str | Path, *, base: str | Path | None = None,
                  revision: str | None = None) -> Path:
    """Fold the LoRA adapter in `adapter_dir` into its base model and write the result to `out_dir`.

    `base` defaults to the base model the adapter names (``base_model_name_or_path``); give it when
    that path has moved. The other files of `adapter_dir` (processor, ``trainer_state.json``) are
    copied along, so the result is a complete checkpoint. `out_dir` is replaced by renames, so it
    never holds a partly written checkpoint. Returns `out_dir`.
    """
    adapter_dir, out_dir = Path(adapter_dir), Path(out_dir)
    _adapter_config(adapter_dir)
    if base is None:
        base, recorded = adapter_base(adapter_dir)
        revision = revision if revision is not None else recorded  # the revision training started from
    try:
        model = load_model(base, revision=revision)
    except ModelingError as exc:
        raise MergeError(f"cannot load the base model of {adapter_dir}: {exc}") from exc
    adapted = apply_adapter(model, adapter_dir)
    merged = adapted.merge_and_unload()
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.merging-", dir=out_dir.parent))
    try:
        merged.save_pretrained(tmp)
        for path in adapter_dir.iterdir():
            if path.name in _ADAPTER_ONLY or path.is_dir():
                continue
            shutil.copy2(path, tmp / path.name)
        previous = tmp.with_name(tmp.name + "-previous")
        if out_dir.exists():
            os.replace(out_dir, previous)
        os.replace(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(previous, ignore_errors=True)
    logger.info("merged adapter %s into %s -> %s", adapter_dir, base, out_dir)
    return out_dir


@click.command("merge", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("adapter", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Folder for the merged checkpoint (replaced if it exists).")
@click.option("--base", default=None,
              help="Base model (folder or Hub id); default: the one named in adapter_config.json.")
@click.option("--revision", default=None, help="Revision of a Hub base model.")
def merge_command(adapter: Path, out: Path, base: str | None, revision: str | None) -> None:
    """Merge the LoRA adapter checkpoint ADAPTER into its base model's weights.

    ``webgym-rl train --lora`` saves adapters only; ``webgym-rl serve-policy``, vLLM without
    --enable-lora and a full fine-tune need an ordinary checkpoint (``train --lora --model ADAPTER``
    trains the adapter on as it is). ``webgym-rl loop`` merges by itself after each LoRA training
    phase.

    \b
    Example:
      webgym-rl merge out/ckpt/checkpoint-000200 --out out/merged
      webgym-rl merge out/ckpt/checkpoint-000200 --out out/merged --base Qwen/Qwen3-VL-8B-Instruct
      webgym-rl serve-policy --model out/merged
    """
    try:
        path = merge_adapter(adapter, out, base=base, revision=revision)
    except MergeError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"merged {adapter} into {base or 'its base model'}: {path}")
