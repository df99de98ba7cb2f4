"""``webgym-rl merge``: fold a LoRA adapter checkpoint into its base model's weights.

``webgym-rl train --lora`` saves adapters only; vLLM, the CPU policy server and the next RL
iteration's trainer load ordinary checkpoints. `merge_adapter(adapter_dir, out_dir)` writes one
(the loop calls it after each LoRA training phase).

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
from webgym_rollout.modeling import ModelingError, load_model

__all__ = ["ADAPTER_CONFIG", "merge_adapter", "merge_command"]

logger = logging.getLogger(__name__)

ADAPTER_CONFIG = "adapter_config.json"
# Files a merged checkpoint does not carry over from the adapter folder: the adapter itself and
# peft's own README. Folders (the optimizer state of the adapter's parameters) are left out too.
_ADAPTER_ONLY = ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin", "README.md")


def merge_adapter(adapter_dir: str | Path, out_dir: str | Path, *, base: str | Path | None = None,
                  revision: str | None = None) -> Path:
    """Fold the LoRA adapter in `adapter_dir` into its base model and write the result to `out_dir`.

    `base` defaults to the base model the adapter names (``base_model_name_or_path``); give it when
    that path has moved. The other files of `adapter_dir` (processor, ``trainer_state.json``) are
    copied along, so the result is a complete checkpoint. `out_dir` is replaced by renames, so it
    never holds a partly written checkpoint. Returns `out_dir`.
    """
    from peft import PeftModel
    from peft.utils import get_peft_model_state_dict, load_peft_weights

    adapter_dir, out_dir = Path(adapter_dir), Path(out_dir)
    config_file = adapter_dir / ADAPTER_CONFIG
    if not config_file.is_file():
        raise MergeError(f"{adapter_dir} has no {ADAPTER_CONFIG}: not a LoRA adapter checkpoint")
    if base is None:
        base = json.loads(config_file.read_text()).get("base_model_name_or_path") or ""
        if not base:
            raise MergeError(f"{config_file} does not name its base model; give it with --base")
        trainer_state = adapter_dir / "trainer_state.json"
        if revision is None and trainer_state.is_file():  # the revision training started from
            revision = json.loads(trainer_state.read_text()).get("base_model_revision")
    try:
        model = load_model(base, revision=revision)
    except ModelingError as exc:
        raise MergeError(f"cannot load the base model of {adapter_dir}: {exc}") from exc
    try:
        saved = load_peft_weights(str(adapter_dir), device="cpu")
        adapted = PeftModel.from_pretrained(model, str(adapter_dir))
    except (OSError, ValueError, RuntimeError) as exc:  # missing weights, shapes of another model
        raise MergeError(f"cannot apply the adapter {adapter_dir} to {base}: {exc}") from exc
    # peft only warns about adapter weights it found no module for; a merge without them would be a
    # silently different model.
    loaded = get_peft_model_state_dict(adapted)
    unused = sorted(k for k, v in saved.items() if k not in loaded or loaded[k].shape != v.shape)
    if unused:
        raise MergeError(f"cannot apply the adapter {adapter_dir} to {base}: {len(unused)} of its "
                              f"{len(saved)} weights match no module of the base model (first: {unused[0]})")
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

    ``webgym-rl train --lora`` saves adapters only; serving them (vLLM, ``webgym-rollout
    serve-policy``) or training on from them needs an ordinary checkpoint. ``webgym-rl loop`` merges
    by itself after each LoRA training phase.

    \b
    Example:
      webgym-rl merge out/ckpt/checkpoint-000200 --out out/merged
      webgym-rl merge out/ckpt/checkpoint-000200 --out out/merged --base Qwen/Qwen3-VL-8B-Instruct
      webgym-rollout serve-policy --model out/merged
    """
    try:
        path = merge_adapter(adapter, out, base=base, revision=revision)
    except MergeError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"merged {adapter} into {base or 'its base model'}: {path}")
