"""GPU check of the training path: Qwen3-VL-shaped models trained and served by the toolkit's own code.

One prepared script for a CUDA machine without internet. For each model shape it

1. builds a checkpoint from a config (random weights, bf16, ``attn_implementation="sdpa"``): the
   tokenizer and image-only processor come from `webgym_rl.tiny.build_tiny_model` (a byte-level BPE
   trained on the spot), the model from the numbers in `QWEN3_VL_8B` / `QWEN3_VL_2B` below;
2. writes a synthetic trajectory dataset with the rollout's own `TrajectoryWriter`: 1280x720 PNG
   screenshots, prompts made by `webgym_rollout.agent.protocol.build_messages` (the ``memory`` variant, 4 full
   image rounds), replies by `format_response`; the first 4 steps of each episode are marked
   ``same_as_next`` (dropped by the sample selection), so every training sample shows 5 screenshots:
   4 earlier rounds and the current page;
3. trains with `webgym_rl.train.Trainer`, the class ``webgym-rl train`` and the loop's resident
   trainer both run, taking the same steps as `webgym_rl.train.train` (load_trajectories,
   build_samples, check, loader, fit), gradient checkpointing on, the published recipe's dtype
   (bfloat16 weights, bf16 mixed precision); LoRA on the 8B shape, all weights on the 2B shape.
   One warm-up optimizer step, then ``--steps`` timed ones. The 2B run then writes a full
   checkpoint (`Trainer.save`: weights, optimizer, processor); the LoRA run writes its servable
   weights (`Trainer.save_servable`: the adapter merged into the base weights, as the loop does);
4. serves that checkpoint with `webgym_rl.policy_server.create_app` on the GPU (its ASGI app
   driven in-process through ``httpx.ASGITransport``, no socket) and asks it for ``--replies`` chat
   completions with the rollout's own request: `build_messages` + `inline_images` of a 1280x720
   observation, ``temperature`` 1.0, ``logprobs``, ``max_tokens``.

It prints, per shape: samples/s, tokens/s, peak GPU memory (``torch.cuda.max_memory_allocated``), the
model FLOPs utilisation and the latency per reply, and exits 1 when any step failed (each failure
is reported with its phase; the other shapes still run), 0 otherwise. ``--json PATH`` (``-`` for
stdout) writes every figure as JSON; to a file it is written again after every phase of every shape
(atomically: a temporary file renamed over it), with ``finished`` false and ``last_phase`` saying how
far the run got, so a run killed or crashed mid-way still leaves every figure it had.

Made for one run whose output comes back as its last 12,000 characters: the Hub's, transformers'
and datasets' progress bars are off (about 1,100 "Loading weights" redraws at 8B would push
everything else out; ``TRANSFORMERS_VERBOSITY`` is ``error`` unless set), the start logs the package
versions found (and where transformers was imported from), CUDA, the driver and the GPU, and the
scratch folder with its free space, and the check stops there, before building anything, when that
folder cannot hold the largest shape's files (about 33 GiB at 8B: the checkpoint and the merged
servable copy). The 2B's served model is released before the 8B starts (the server's service drops
its policy; a weak reference shows it gone), and the memory still allocated when each shape starts
is logged and reported (``memory_at_start_gib``).

Without CUDA (or with ``--tiny``) the same steps run on tiny shapes of the same architecture
(`TINY_8B`, `TINY_2B`), which is what the test suite does on CPU (tests/test_gpu_check.py), so the
script cannot rot. On the CPU the memory figure is the process's peak resident memory instead.

Model FLOPs utilisation (MFU): model FLOPs of the timed steps / their wall time / ``--peak-flops``
(default 989e12, the dense bf16 peak of an H100 SXM or an H200). Model FLOPs count the work the
model needs, not what gradient checkpointing recomputes (that would be hardware FLOPs utilisation).
With N the language model's weights without the token embedding and the output projection, N_h
the output projection's (``lm_head``, counted also when tied), T a sample's tokens (image tokens
included), T_o the positions the output projection runs on (the trainer computes logits at the
labelled positions alone, `webgym_rl.objectives.logit_positions`: about 177 of 8.7k at 8B; every
position of the padded batch for a model that cannot), L the layers, d = heads x head dim, and for
the vision tower N_v its block weights, N_m its mergers' weights, P a sample's patches (4 per image
token), P_i one image's patches, L_v, d_v its layers and width; per sample, as in PaLM (Chowdhery
et al. 2022, appendix B: attention counted over the whole sequence, no causal halving)::

    full fine-tune:  6 N T + 6 N_h T_o + 12 L d T^2  +  6 N_v P + 6 N_m P/4 + 12 L_v d_v sum_i P_i^2
    LoRA:            4 N T + 4 N_h T_o + 12 L d T^2 + 6 N_lora T  +  2 N_v P + 2 N_m P/4
                     + 4 L_v d_v sum_i P_i^2

``mfu`` counts attention over the whole sequence, as PaLM does. The causal count, ``mfu_causal`` (the
language model's attention term's ``T^2`` replaced by ``T (T + 1) / 2``: only the keys at or before
each query), is reported beside it; at 8.7k tokens at 8B it is about a sixth lower (attention is
about a third of the whole-sequence count there, and the causal count halves it). The timed loop is the
trainer's own, so it includes preparing the samples on the CPU (the collator: prompt rendering,
image processing, tokenising) between the GPU's steps; ``collate_s`` says how much of it that was.

LoRA: the frozen linear layers run forward (2) and pass gradients to their inputs (2) but compute
no weight gradients; attention has no weights, so its backward costs twice its forward either way;
the vision tower has no LoRA module and nothing upstream needs its gradient, so it only runs
forward. Token and patch counts are those the trainer's collator produced for the timed steps.
Text tokens come from the tiny BPE tokenizer (about half as many characters a token as Qwen's), so
text makes up more of T than with the real tokenizer; image tokens, most of T, are exact.

On the GPU machine (Python 3.12, PyTorch 2.11, transformers 5.17, accelerate 1.15, peft, pyarrow,
pandas, xxhash, httpx, click, rich, jinja2, pyyaml, tensorboard there; nothing can be fetched),
bring the project's other dependencies on the training and serving path as wheels: 11 wheels,
3.8 MiB together by ``pip download`` for CPython 3.12 on manylinux x86-64
(``benchmarks/gpu_wheels.sh`` downloads exactly these into ``.whl/``)::

    datasets 5.2.0 (0.58 MiB)     dill 0.4.1 (0.11)             multiprocess 0.70.19 (py312, 0.14)
    pydantic 2.14.4 (0.47)        pydantic-core 2.50.5 (cp312 manylinux2014, 2.16)
    annotated-types 0.8.0 (0.01)  typing-inspection 0.4.5 (0.01)  typing-extensions 4.16.0 (0.04)
    fastapi 0.165.0 (0.15)        starlette 1.10.0 (0.08)       opentelemetry-api 1.45.3 (0.06)

No uvicorn: the server's app runs in-process. The image's transformers (5.17) is older than the
project asks for (>= 5.20); the check passed with it on CPU (tiny shapes, bf16 and fp32, with
huggingface-hub 1.33 and accelerate 1.15 as there). Should it fail on the GPU for that reason,
``gpu_wheels.sh --project-versions`` adds transformers 5.25.0, huggingface-hub 2.4.0, httpx2,
httpcore2, truststore, kernels, tomlkit, click, peft 0.21.2 and accelerate 1.16.0 (18 MiB more).
Then, from the repository root there (the call carrying ``.whl``), ``benchmarks/gpu_run.sh`` installs
the wheels into ``/tmp/site`` and stops (exit 3, before the check) when pip fails or a wheel's
package is not where pip was told to put it, then runs this script with ``--json
$OUT/gpu_check.json`` and the arguments it is given (none: ``--require-cuda``), its whole log also
going to ``$OUT/gpu_check.log``::

    bash benchmarks/gpu_run.sh

Work files (the 8B's checkpoint and its merged servable copy, 16 GiB each; the 2B's checkpoint and
its full training checkpoint with the optimizer, about 16 GiB together) go to ``--work-dir``, else to
``/dev/shm`` when it has room for the largest shape, else the system's temporary folder, and are
removed as each shape finishes. The room needed is counted from the shapes' weights (the models
built on the ``meta`` device: no memory, no time).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import io
import json
import math
import os
import random
import resource
import shutil
import sys
import tempfile
import time
import traceback
import weakref
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# No internet on the GPU machine, and none wanted in the test suite: the Hub clients fail fast.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
# No progress bars: the run's output comes back as its last 12,000 characters (set before the Hub
# client, transformers and datasets are imported: they read these once).
os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
os.environ["HF_DATASETS_DISABLE_PROGRESS_BARS"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

__all__ = ["FIGURES", "QWEN3_VL_2B", "QWEN3_VL_8B", "TINY_2B", "TINY_8B", "Shape", "main"]

H100_BF16_DENSE_FLOPS = 989e12
"""Dense bf16 tensor-core peak of an H100 SXM (989.4 TFLOP/s; an H200 has the same chip)."""

FIGURES = ("samples_per_s", "tokens_per_s", "peak_memory_gib", "mfu", "mfu_causal", "latency_s_per_reply")
"""The figures every shape reports (the test checks each)."""

# Modules the training and serving path imports, with the wheel that brings each.
_NEEDED = {"torch": "torch", "transformers": "transformers", "accelerate": "accelerate", "peft": "peft",
           "tokenizers": "tokenizers", "safetensors": "safetensors", "PIL": "pillow", "numpy": "numpy",
           "pyarrow": "pyarrow", "datasets": "datasets", "dill": "dill", "multiprocess": "multiprocess",
           "pydantic": "pydantic", "fastapi": "fastapi", "starlette": "starlette", "httpx": "httpx",
           "click": "click", "yaml": "pyyaml", "jinja2": "jinja2", "rich": "rich", "tqdm": "tqdm",
           "xxhash": "xxhash", "tensorboard": "tensorboard"}


@dataclass(frozen=True)
class Shape:
    """The numbers of a Qwen3-VL ``config.json`` that size the model (and its processor's pixel range)."""

    name: str
    hidden_size: int
    intermediate_size: int
    num_layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab_size: int | None
    """Rows of the embedding and lm_head; None: the tokenizer's size rounded up to 128 (tiny shapes)."""
    tie_word_embeddings: bool
    rope_theta: float
    mrope_section: tuple[int, int, int]
    vision_depth: int
    vision_hidden: int
    vision_intermediate: int
    vision_heads: int
    deepstack_indexes: tuple[int, ...]
    vision_positions: int
    min_pixels: int
    max_pixels: int
    patch_size: int = 16
    merge_size: int = 2


# Qwen/Qwen3-VL-8B-Instruct and Qwen/Qwen3-VL-2B-Instruct, from their published config.json and
# preprocessor_config.json as we know them (not downloaded here: this script runs without
# internet, and these numbers were written from knowledge of those files; check them against the
# Hub files when one is at hand). Text: hidden_size, intermediate_size, num_hidden_layers,
# num_attention_heads, num_key_value_heads, head_dim 128, vocab_size 151936, rope_theta 5e6,
# mrope_section [24, 20, 20] interleaved, tie_word_embeddings (false for 8B, true for 2B). Vision:
# depth, hidden_size, intermediate_size, num_heads 16, patch_size 16, spatial_merge_size 2,
# temporal_patch_size 2, num_position_embeddings 2304, deepstack_visual_indexes, out_hidden_size =
# the text hidden size. Processor: shortest_edge 65536, longest_edge 16777216 pixels, mean/std 0.5.
# A 1280x720 screenshot becomes 1280x704 pixels: 80 x 44 patches, 880 image tokens.
QWEN3_VL_8B = Shape(
    name="qwen3-vl-8b", hidden_size=4096, intermediate_size=12288, num_layers=36, heads=32, kv_heads=8,
    head_dim=128, vocab_size=151936, tie_word_embeddings=False, rope_theta=5_000_000.0,
    mrope_section=(24, 20, 20), vision_depth=27, vision_hidden=1152, vision_intermediate=4304,
    vision_heads=16, deepstack_indexes=(8, 16, 24), vision_positions=2304,
    min_pixels=65536, max_pixels=16777216)
QWEN3_VL_2B = Shape(
    name="qwen3-vl-2b", hidden_size=2048, intermediate_size=6144, num_layers=28, heads=16, kv_heads=8,
    head_dim=128, vocab_size=151936, tie_word_embeddings=True, rope_theta=5_000_000.0,
    mrope_section=(24, 20, 20), vision_depth=24, vision_hidden=1024, vision_intermediate=4096,
    vision_heads=16, deepstack_indexes=(5, 11, 17), vision_positions=2304,
    min_pixels=65536, max_pixels=16777216)
# The same architecture at CPU sizes (the test suite's run). The vocabulary is padded past the
# tokenizer's, as Qwen's is, so ids with no token are possible here too. 9216 pixels at most: a
# 1280x720 screenshot becomes 128x64 pixels, 8 image tokens.
TINY_8B = Shape(
    name="tiny-8b-like", hidden_size=64, intermediate_size=128, num_layers=2, heads=4, kv_heads=2,
    head_dim=16, vocab_size=None, tie_word_embeddings=False, rope_theta=5_000_000.0,
    mrope_section=(2, 3, 3), vision_depth=2, vision_hidden=32, vision_intermediate=64, vision_heads=2,
    deepstack_indexes=(0,), vision_positions=256, min_pixels=1024, max_pixels=9216)
TINY_2B = Shape(**{**asdict(TINY_8B), "name": "tiny-2b-like", "tie_word_embeddings": True})

# Which shape gets which training: the "LoRA on the 8B shape, a full fine-tune on the 2B".
_RUNS = {"2b": (QWEN3_VL_2B, TINY_2B, False), "8b": (QWEN3_VL_8B, TINY_8B, True)}

CONTEXT_STEPS = 4
"""Steps at the start of each episode that fill the memory prompt's 4 full rounds (not trained on)."""


class CheckFailed(RuntimeError):
    """A step of the check failed; the message says which and why."""


def _log(message: str) -> None:
    print(f"[gpu_check {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------------- environment

def preflight() -> dict[str, str]:
    """Import every module the path needs; raise `CheckFailed` listing the missing wheels. Returns
    the versions found."""
    import importlib
    import importlib.metadata

    versions, missing = {}, []
    for module, wheel in _NEEDED.items():
        try:
            imported = importlib.import_module(module)
        except Exception as exc:  # an import can fail in many ways (missing, ABI, a missing dep)
            missing.append(f"{module} (wheel {wheel}): {type(exc).__name__}: {exc}")
            continue
        try:
            versions[wheel] = importlib.metadata.version(wheel)
        except importlib.metadata.PackageNotFoundError:
            versions[wheel] = str(getattr(imported, "__version__", "?"))
    if missing:
        raise CheckFailed("cannot import: " + "; ".join(missing) + ". Bring the wheels the docstring "
                          "lists (benchmarks/gpu_wheels.sh) and install them as it says")
    return versions


def _device_info(device: str) -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {"device": device, "torch": torch.__version__, "cuda": torch.version.cuda}
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        info.update(name=props.name, memory_gib=round(props.total_memory / 2**30, 1),
                    multiprocessors=props.multi_processor_count,
                    bf16=torch.cuda.is_bf16_supported())
    return info


def _reset_peak(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()


def _peak_gib(device: str) -> float:
    """Peak GPU memory allocated since the last reset; on the CPU, the process's peak resident memory."""
    import torch

    if device == "cuda":
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() / 2**30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


def _free(device: str) -> None:
    import torch

    gc.collect()
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def _released(ref: weakref.ref, what: str) -> bool:
    """Whether the object `ref` points to has been garbage collected (logged when it has not)."""
    gc.collect()
    if ref() is None:
        return True
    holders = [type(o).__name__ for o in gc.get_referrers(ref())][:8]
    _log(f"WARNING: {what} is still referenced (by {', '.join(holders) or 'nothing found'}): its memory "
         "stays allocated")
    return False


def _memory_allocated_gib(device: str) -> float:
    """GPU memory held by tensors now (0 on the CPU)."""
    import torch

    if device == "cuda":
        torch.cuda.synchronize()
        return torch.cuda.memory_allocated() / 2**30
    return 0.0


def quiet_progress_bars() -> list[str]:
    """Turn off the progress bars of the Hub client, transformers and datasets (besides the
    environment variables set at import). Returns the libraries switched off."""
    switched = []
    for module, function in (("huggingface_hub.utils", "disable_progress_bars"),
                             ("transformers.utils.logging", "disable_progress_bar"),
                             ("datasets", "disable_progress_bars")):
        try:
            import importlib

            getattr(importlib.import_module(module), function)()
            switched.append(module.split(".")[0])
        except Exception as exc:  # a missing library is reported by the preflight
            _log(f"could not turn off {module}'s progress bars: {type(exc).__name__}: {exc}")
    return switched


def environment(device: str) -> dict[str, Any]:
    """What the run found: Python, the training path's package versions (and where transformers
    was imported from: the image's or the carried wheels'), CUDA, cuDNN, the driver and the GPU."""
    import importlib.metadata
    import platform

    import torch

    found: dict[str, Any] = {"python": platform.python_version()}
    for name in ("torch", "transformers", "accelerate", "peft", "datasets", "tokenizers", "huggingface-hub",
                 "safetensors", "fastapi", "pydantic"):
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    try:
        import transformers

        found["transformers_from"] = str(Path(transformers.__file__).parent.parent)
    except Exception as exc:  # reported, not fatal: the preflight names what is missing
        found["transformers_from"] = f"{type(exc).__name__}: {exc}"
    found["cuda"] = torch.version.cuda
    found["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        free, total = torch.cuda.mem_get_info()
        found["gpu"] = f"{props.name}, {total / 2**30:.1f} GiB ({free / 2**30:.1f} free)"
        found["driver"] = _driver_version()
    return found


def _driver_version() -> str | None:
    """The NVIDIA driver's version from nvidia-smi (None without it)."""
    import subprocess

    if shutil.which("nvidia-smi") is None:
        return None
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout.strip() else None


def _work_root(requested: str | None, device: str, need_gib: float) -> Path:
    """A new folder for the run's files: under `requested`; else under /dev/shm on CUDA when it has
    `need_gib` free; else in the system's temporary folder."""
    if requested:
        Path(requested).mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix="gpu-check-", dir=requested))
    shm = Path("/dev/shm")
    if device == "cuda" and shm.is_dir() and free_gib(shm) >= need_gib:
        return Path(tempfile.mkdtemp(prefix="gpu-check-", dir=shm))
    return Path(tempfile.mkdtemp(prefix="gpu-check-"))


def free_gib(folder: Path) -> float:
    """Free space in the file system of `folder`, in GiB."""
    return shutil.disk_usage(folder).free / 2**30


def check_scratch(folder: Path, need_gib: float, what: str) -> float:
    """Raise `CheckFailed` when `folder` has less than `need_gib` free; returns the free GiB."""
    free = free_gib(folder)
    if free < need_gib:
        raise CheckFailed(f"the scratch folder {folder} has {free:.1f} GiB free, {what} needs about "
                          f"{need_gib:.1f} GiB: stopping before building anything. Pass --work-dir on "
                          f"a disk with room (or --shapes without the largest shape)")
    return free


def scratch_need_gib(weights: int, *, lora: bool, dtype: str) -> float:
    """Disk the work files of a shape with `weights` weights take at their largest: a LoRA run holds
    the checkpoint and its merged servable copy (2 copies of the weights); a full fine-tune the
    checkpoint and a training checkpoint of weights and the optimizer's two moments (4 copies, the
    moments in the weights' dtype). Plus 1 GiB for the dataset, the tokenizer and the adapter."""
    copies = 2 if lora else 4
    return copies * weights * (2 if dtype == "bfloat16" else 4) / 2**30 + 1.0


def meta_param_count(shape: Shape, source: Path) -> int:
    """Weights of `shape`'s model, counted on the ``meta`` device (no memory, no time)."""
    import torch
    from transformers import AutoModelForImageTextToText

    from webgym_rl.modeling import load_processor

    processor = load_processor(source, min_pixels=shape.min_pixels, max_pixels=shape.max_pixels)
    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(qwen3_vl_config(shape, processor.tokenizer))
    return count_params(model).total


class Reporter:
    """The report and its file: `write()` replaces the file atomically (a temporary file in the same
    folder, renamed over it), so a reader (or a kill) never finds half a report."""

    def __init__(self, path: str | None):
        self.path = Path(path) if path and path != "-" else None
        self.report: dict[str, Any] = {"ok": False, "finished": False, "last_phase": "start", "runs": [],
                                       "errors": []}

    def write(self, phase: str | None = None) -> None:
        if phase is not None:
            self.report["last_phase"] = phase
        if self.path is None:
            return
        text = json.dumps(self.report, indent=1, default=str) + "\n"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=self.path.parent)
        try:
            with os.fdopen(handle, "w") as stream:
                stream.write(text)
            os.replace(temporary, self.path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise


# ------------------------------------------------------------------------------------ checkpoints

def tokenizer_source(out: Path) -> Path:
    """A tiny Qwen3-VL checkpoint whose tokenizer and image-only processor the shapes share
    (Qwen's normalisation: mean and std 0.5)."""
    from webgym_rl.tiny import TinyModelSettings, build_tiny_model

    return build_tiny_model(out, settings=TinyModelSettings(family="qwen3_vl", image_mean=0.5, image_std=0.5))


def qwen3_vl_config(shape: Shape, tokenizer: Any) -> Any:
    """A `Qwen3VLConfig` of `shape` with the special-token ids of `tokenizer`."""
    from transformers import Qwen3VLConfig

    ids = {name: tokenizer.convert_tokens_to_ids(token) for name, token in (
        ("image_token_id", "<|image_pad|>"), ("video_token_id", "<|video_pad|>"),
        ("vision_start_token_id", "<|vision_start|>"), ("vision_end_token_id", "<|vision_end|>"))}
    vocab = shape.vocab_size or 128 * math.ceil((len(tokenizer) + 1) / 128)
    if vocab < len(tokenizer):
        raise CheckFailed(f"{shape.name}: vocab_size {vocab} is smaller than the tokenizer's "
                          f"{len(tokenizer)}")
    if 2 * sum(shape.mrope_section) != shape.head_dim:
        raise CheckFailed(f"{shape.name}: mrope_section {shape.mrope_section} must sum to head_dim / 2")
    text = dict(
        vocab_size=vocab, hidden_size=shape.hidden_size, intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.num_layers, num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads, head_dim=shape.head_dim, hidden_act="silu",
        rms_norm_eps=1e-6, attention_bias=False, max_position_embeddings=262144,
        rope_parameters={"rope_type": "default", "rope_theta": shape.rope_theta,
                         "mrope_section": list(shape.mrope_section), "mrope_interleaved": True},
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"), bos_token_id=None,
        tie_word_embeddings=shape.tie_word_embeddings)
    vision = dict(
        depth=shape.vision_depth, hidden_size=shape.vision_hidden,
        intermediate_size=shape.vision_intermediate, num_heads=shape.vision_heads,
        patch_size=shape.patch_size, spatial_merge_size=shape.merge_size, temporal_patch_size=2,
        in_channels=3, hidden_act="gelu_pytorch_tanh", out_hidden_size=shape.hidden_size,
        num_position_embeddings=shape.vision_positions,
        deepstack_visual_indexes=list(shape.deepstack_indexes))
    return Qwen3VLConfig(text_config=text, vision_config=vision,
                         tie_word_embeddings=shape.tie_word_embeddings, **ids)


@dataclass(frozen=True)
class ParamCounts:
    """Weights of a model by the part of it that uses them (unique tensors; tied ones once)."""

    total: int
    lm: int
    """Language-model weights applied to every token: decoder layers and final norm."""
    embedding: int
    """The token embedding (a lookup, not counted in FLOPs)."""
    vision_blocks: int
    """Vision tower weights applied to every patch (patch embedding, blocks)."""
    vision_mergers: int
    """Vision mergers (the final one and the deepstack ones), applied to every 2x2 patch group."""
    head: int = 0
    """The output projection (lm_head, also when tied to the embedding), applied at the positions
    whose logits are computed."""


def count_params(model: Any) -> ParamCounts:
    lm = embedding = blocks = mergers = 0
    for name, param in model.named_parameters():
        n = param.numel()
        if "visual." in name:
            if "merger" in name:
                mergers += n
            elif "pos_embed" not in name:  # position embedding: a lookup
                blocks += n
        elif "embed_tokens" in name:
            embedding += n
        elif "lm_head" not in name:
            lm += n
    head = model.get_output_embeddings().weight.numel()  # lm_head's matmul runs also when tied
    total = sum(p.numel() for p in model.parameters())
    return ParamCounts(total=total, lm=lm, embedding=embedding, vision_blocks=blocks, vision_mergers=mergers,
                       head=head)


def build_checkpoint(out: Path, shape: Shape, source: Path, *, device: str, dtype: str,
                     seed: int = 0) -> ParamCounts:
    """Write a random `shape` checkpoint (model, processor, generation config) to `out`."""
    import torch
    from transformers import AutoModelForImageTextToText, GenerationConfig

    from webgym_rl.modeling import load_processor

    processor = load_processor(source, min_pixels=shape.min_pixels, max_pixels=shape.max_pixels)
    config = qwen3_vl_config(shape, processor.tokenizer)
    torch.manual_seed(seed)
    with torch.device(device):  # initialised where it runs: seconds for 8B on a GPU, not minutes
        model = AutoModelForImageTextToText.from_config(config, dtype=getattr(torch, dtype),
                                                        attn_implementation="sdpa")
    # The model's vocabulary (151936 rows for Qwen3-VL) is larger than the tiny tokenizer's: ids
    # without a token are never produced by a trained model, but a random one samples them all the
    # time, and the policy server cannot decode them (see benchmarks/README.md). Suppress them.
    tokenless = list(range(len(processor.tokenizer), config.text_config.vocab_size))
    model.generation_config = GenerationConfig(
        eos_token_id=config.text_config.eos_token_id, pad_token_id=config.text_config.pad_token_id,
        do_sample=False, max_new_tokens=64, suppress_tokens=tokenless or None)
    counts = count_params(model)
    model.save_pretrained(out)
    processor.save_pretrained(out)
    del model
    _free(device)
    return counts


# ---------------------------------------------------------------------------------------- dataset

def screenshot(seed: int, size: tuple[int, int] = (1280, 720)) -> bytes:
    """A PNG of a made-up web page: header bar, boxes and lines of text, all from `seed`."""
    from PIL import Image, ImageDraw

    rng = random.Random(seed)
    image = Image.new("RGB", size, (255, 255, 255))
    draw = ImageDraw.Draw(image)
    width, height = size
    draw.rectangle((0, 0, width, 56), fill=tuple(rng.randrange(40, 200) for _ in range(3)))
    draw.text((24, 20), f"Example store {seed % 997}", fill=(255, 255, 255))
    for _ in range(8):
        x, y = rng.randrange(0, width - 200), rng.randrange(70, height - 80)
        draw.rectangle((x, y, x + rng.randrange(80, 200), y + rng.randrange(24, 80)),
                       outline=(120, 120, 120), fill=tuple(rng.randrange(180, 256) for _ in range(3)))
        draw.text((x + 8, y + 6), f"Item {rng.randrange(1000)}  ${rng.randrange(5, 500)}", fill=(0, 0, 0))
    for line in range(12):
        draw.text((40, 80 + 48 * line), " ".join(rng.choice(("search", "flight", "price", "Monday",
                                                             "Berlin", "cart", "filter", "sort"))
                                                  for _ in range(10)), fill=(30, 30, 30))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def _episode(index: int, kept_steps: int, size: tuple[int, int]) -> Any:
    from webgym_data.schema import FactGroup, Task
    from webgym_rollout.actions import parse_arguments
    from webgym_rollout.agent.protocol import AgentSettings, Observation, build_messages, format_response
    from webgym_rollout.trajectory.contract import Episode, EpisodeStatus, Latency, Step, TokenUsage, Verdict

    task_id = f"gpu-check-{index}"
    instruction = f"Find the price of the cheapest flight from Paris to Berlin on day {index + 1}."
    settings = AgentSettings(variant="memory", full_rounds=CONTEXT_STEPS)
    steps: list[Step] = []
    for i in range(CONTEXT_STEPS + kept_steps):
        shot = screenshot(1000 * index + i, size)
        url, title = f"http://127.0.0.1:8400/{task_id}/{i}", f"Flights, page {i}"
        observation = Observation(instruction=instruction, screenshot=shot, viewport=size, step=i, url=url,
                                  title=title, history=tuple(steps))
        messages = build_messages(observation, settings)
        coordinate = [100 + 37 * i, 200 + 11 * (index % 50)]  # on the 0-1000 grid
        action = parse_arguments({"action": "left_click", "coordinate": coordinate})
        memory = f"Cheapest so far ${120 + i} (flight UA {12 + i}); {i} pages checked."
        response = format_response(action, variant="memory", memory=memory,
                                   progress=f"Checked {i} result pages of the search.",
                                   intention="Open the next page of results to compare prices.")
        context = i < CONTEXT_STEPS  # marked same_as_next: the selection drops it, it only fills the context
        steps.append(Step(index=i, screenshot=shot, messages=json.dumps(messages), response=response,
                          action=action.to_json(), memory=memory, url=url, title=title,
                          same_as_next=context, finish_reason="stop",
                          usage=TokenUsage(prompt_tokens=5000, completion_tokens=120),
                          latency=Latency(policy_s=1.0, execute_s=0.1, screenshot_s=0.05)))
    task = Task(task_id=task_id, task_name=instruction, website="127.0.0.1", benchmark_name="synthetic",
                start_url=f"http://127.0.0.1:8400/{task_id}", domain="travel", subdomain="flights",
                evaluator_reference=(FactGroup(id="g0", description="price", facts=("the price is given",)),))
    return Episode(task=task, episode_id=f"{task_id}-it0-a0", iteration=0, attempt=0, split="train",
                   instruction=instruction, policy_model="gpu-check", judge_model="rule", reward=1.0,
                   status=EpisodeStatus.OK, verdicts=[Verdict("g0", True, "synthetic")], duration_s=10.0,
                   judge_s=0.1, steps=steps)


def write_dataset(out: Path, *, episodes: int, kept_steps: int, size: tuple[int, int] = (1280, 720)) -> Path:
    """A rollout folder of `episodes` successful episodes, written by `TrajectoryWriter`."""
    from webgym_rollout.trajectory.writer import TrajectoryWriter

    with TrajectoryWriter(out) as writer:
        for index in range(episodes):
            writer.add(_episode(index, kept_steps, size))
    return out


def observation_request(size: tuple[int, int] = (1280, 720), *, steps: int = 6, max_tokens: int = 64,
                        seed: int = 0) -> dict[str, Any]:
    """The chat request the rollout's policy client sends at step `steps` of an episode (memory
    variant, 4 full rounds, the older steps as summaries): messages with inline screenshots."""
    from webgym_rollout.agent.protocol import (
        AgentSettings,
        Observation,
        build_messages,
        inline_images,
        observation_images,
    )

    episode = _episode(99, max(0, steps - CONTEXT_STEPS), size)
    # The request shows every earlier step as one that changed the page.
    rounds = tuple(replace(s, same_as_next=False) for s in episode.steps)
    observation = Observation(instruction=episode.instruction, screenshot=screenshot(424242, size),
                              viewport=size, step=len(rounds), url="http://127.0.0.1:8400/now",
                              title="Flights", history=rounds)
    settings = AgentSettings(variant="memory", full_rounds=CONTEXT_STEPS)
    messages = inline_images(build_messages(observation, settings), observation_images(observation))
    return {"messages": messages, "temperature": 1.0, "top_p": 1.0, "max_tokens": max_tokens,
            "logprobs": True, "seed": seed}


# --------------------------------------------------------------------------------------- training

@dataclass
class _Counted:
    """What the collator produced for one batch."""

    samples: int
    tokens: int
    tokens_sq: int
    patches: int
    patches_sq: int
    images: int
    seconds: float = 0.0
    """Wall time the collator took for the batch (CPU work inside the timed loop)."""
    logit_rows: int | None = None
    """Rows the output projection runs on (samples x positions); None: `tokens`."""


class CountingCollator:
    """Wraps the trainer's collator and records each batch's tokens and patches, so FLOPs are
    counted from exactly what the model was fed."""

    def __init__(self, inner: Any, merge_size: int, logit_positions: Any = None):
        self.inner = inner
        self.merge_size = merge_size
        self.logit_positions = logit_positions
        """The trainer's `logit_positions` (labels -> the positions it computes logits at, or None)."""
        self.batches: list[_Counted] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def __call__(self, samples: Sequence[Any]) -> Any:
        started = time.perf_counter()
        batch = self.inner(samples)
        seconds = time.perf_counter() - started
        lengths = [int(n) for n in batch["attention_mask"].sum(dim=1).tolist()]
        grids = batch.get("image_grid_thw")
        per_image = [int(t * h * w) for t, h, w in grids.tolist()] if grids is not None else []
        labels = batch["labels"]
        positions = self.logit_positions(labels) if self.logit_positions is not None else None
        rows = labels.shape[0] * (len(positions) if positions is not None else labels.shape[1])
        self.batches.append(_Counted(samples=len(samples), tokens=sum(lengths),
                                     tokens_sq=sum(n * n for n in lengths), patches=sum(per_image),
                                     patches_sq=sum(p * p for p in per_image), images=len(per_image),
                                     seconds=seconds, logit_rows=rows))
        return batch

    def take(self, samples_seen: int) -> _Counted:
        """Totals of the first batches recorded since the last `take` that hold `samples_seen` samples
        (the loader may collate one batch ahead that is never trained on)."""
        total = _Counted(0, 0, 0, 0, 0, 0, 0.0, 0)
        for counted in self.batches:
            if total.samples >= samples_seen:
                break
            for name in total.__dataclass_fields__:
                setattr(total, name, getattr(total, name) + getattr(counted, name))
        self.batches = []
        if total.samples != samples_seen:
            raise CheckFailed(f"the collator saw {total.samples} samples, the trainer reports "
                              f"{samples_seen}: the trainer no longer collates through Trainer.collator")
        return total


def model_flops(shape: Shape, counts: ParamCounts, fed: _Counted, *, lora: bool, lora_params: int,
                causal: bool = False) -> float:
    """Model FLOPs of training on `fed` (the formulas of the module docstring); `causal`: the language
    model's attention counted over the keys at or before each query (``T (T + 1) / 2`` pairs a
    sample, not ``T^2``). The vision tower's attention is bidirectional either way."""
    d_attn, d_vis = shape.heads * shape.head_dim, shape.vision_hidden
    merged = fed.patches / shape.merge_size**2
    pairs = (fed.tokens_sq + fed.tokens) / 2 if causal else fed.tokens_sq
    attention = 12 * shape.num_layers * d_attn * pairs
    vision_attention = 12 * shape.vision_depth * d_vis * fed.patches_sq
    rows = fed.tokens if fed.logit_rows is None else fed.logit_rows
    if not lora:
        return (6 * counts.lm * fed.tokens + 6 * counts.head * rows + attention
                + 6 * counts.vision_blocks * fed.patches + 6 * counts.vision_mergers * merged
                + vision_attention)
    return (4 * counts.lm * fed.tokens + 4 * counts.head * rows + attention + 6 * lora_params * fed.tokens
            + 2 * counts.vision_blocks * fed.patches + 2 * counts.vision_mergers * merged
            + vision_attention / 3)


@dataclass
class TrainFigures:
    mode: str
    steps: int
    samples: int
    tokens: int
    patches: int
    images: int
    logit_rows: int
    """Rows the output projection ran on in the timed steps (the labelled positions: see `tokens`)."""
    loop_s: float
    warmup_s: float
    samples_per_s: float
    tokens_per_s: float
    model_flops: float
    tflops_per_s: float
    mfu: float
    """Attention counted over the whole sequence (PaLM's count)."""
    mfu_causal: float
    """Attention counted over the causal half (about 16 % lower than `mfu` at 8.7k tokens)."""
    collate_s: float
    """Of `loop_s`, the collator's CPU time preparing the timed steps' samples."""
    peak_memory_gib: float
    trainable_params: int
    losses: list[float]
    attn_implementation: str
    save_s: float
    checkpoint: str
    model_freed: bool
    """The trained model was garbage once the trainer was ended (nothing kept it on the device)."""


def train_shape(shape: Shape, model_dir: Path, data: Path, out: Path, counts: ParamCounts, *, lora: bool,
                steps: int, batch_size: int, dtype: str, device: str, peak_flops: float,
                lora_targets: Sequence[str], seed: int = 0) -> TrainFigures:
    """One warm-up step and `steps` timed optimizer steps of the toolkit's trainer on `data`."""
    from webgym_rl.samples import build_samples, load_trajectories
    from webgym_rl.settings import OptimizationSettings
    from webgym_rl.train import EpochOrder, FitPosition, Trainer

    _reset_peak(device)
    training = OptimizationSettings(objective="filtered_bc", lora=lora,
                                    lora_target_modules=list(lora_targets), learning_rate=1e-5,
                                    lr_scheduler="constant", per_device_batch_size=batch_size,
                                    max_steps=1 + steps, model_dtype=dtype, gradient_checkpointing=True,
                                    log_every=1 + steps)
    sources = load_trajectories([str(data)], cache_dir=str(out.parent / "datasets-cache"))
    samples = build_samples(sources, training.objective, training.samples)
    trainer = Trainer(model=str(model_dir), model_revision=None, training=training, out=out, seed=seed,
                      total_steps=1 + steps)
    counting = None
    try:
        net = trainer.accelerator.unwrap_model(trainer.model)
        model_ref = weakref.ref(net)
        trainable = sum(p.numel() for p in net.parameters() if p.requires_grad)
        attn = str(getattr(net.config, "_attn_implementation", "?"))
        counting = trainer.collator = CountingCollator(trainer.collator, shape.merge_size,
                                                       trainer.logit_positions)
        trainer.check(samples[0])
        counting.batches = []
        order = EpochOrder(samples.weights, seed)
        loader = trainer.loader(samples, order)
        position = FitPosition()
        warm = trainer.fit(loader, order, until=1, position=position)
        counting.take(warm.samples_seen)
        timed = trainer.fit(loader, order, until=1 + steps, position=position)
        fed = counting.take(timed.samples_seen)
        peak = _peak_gib(device)
        flops = model_flops(shape, counts, fed, lora=lora, lora_params=trainable if lora else 0)
        causal_flops = model_flops(shape, counts, fed, lora=lora, lora_params=trainable if lora else 0,
                                   causal=True)
        started = time.perf_counter()
        state = {"step": trainer.step, "gpu_check": shape.name}
        if lora:  # what the loop serves after a LoRA round: the adapter merged into the base weights
            checkpoint = trainer.save_servable(out / "servable", state)
        else:  # what `webgym-rl train` leaves: weights, optimizer, schedule, processor, state
            checkpoint = trainer.save(out / f"checkpoint-{trainer.step:06d}", state)
        save_s = time.perf_counter() - started
        losses = [float(entry["loss"]) for entry in warm.log_history + timed.log_history]
    finally:
        trainer.end()
        trainer.accelerator.free_memory()
        if counting is not None:  # the loader and the collator outlive this block: cut their way back
            counting.logit_positions = None
        del trainer
        net = None
        _free(device)
    model_freed = _released(model_ref, f"{shape.name}: the trained model")
    if not all(math.isfinite(loss) for loss in losses):
        raise CheckFailed(f"{shape.name}: a training loss is not finite: {losses}")
    return TrainFigures(
        mode="lora" if lora else "full", steps=timed.steps, samples=fed.samples, tokens=fed.tokens,
        patches=fed.patches, images=fed.images, logit_rows=fed.logit_rows, loop_s=timed.loop_seconds,
        warmup_s=warm.loop_seconds,
        samples_per_s=fed.samples / timed.loop_seconds, tokens_per_s=fed.tokens / timed.loop_seconds,
        model_flops=flops, tflops_per_s=flops / timed.loop_seconds / 1e12,
        mfu=flops / timed.loop_seconds / peak_flops,
        mfu_causal=causal_flops / timed.loop_seconds / peak_flops,
        collate_s=fed.seconds, peak_memory_gib=peak, trainable_params=trainable,
        losses=losses, attn_implementation=attn, save_s=save_s, checkpoint=str(checkpoint),
        model_freed=model_freed)


# ------------------------------------------------------------------------------------- generation

@dataclass
class GenerateFigures:
    checkpoint: str
    replies: int
    load_s: float
    first_reply_s: float
    latency_s_per_reply: float
    latency_s_max: float
    prompt_tokens: int
    completion_tokens_per_reply: float
    decode_tokens_per_s: float
    peak_memory_gib: float
    fingerprint: str
    sample_reply: str
    model_freed: bool
    """The served model was garbage once the app was closed (it does not add to the next shape's
    peak)."""
    memory_after_gib: float
    """GPU memory still allocated after the app was closed and the model released."""


async def _ask(app: Any, port: int, request: dict[str, Any], replies: int) -> tuple[list[float], list[dict]]:
    import httpx

    transport = httpx.ASGITransport(app=app)
    latencies, bodies = [], []
    async with httpx.AsyncClient(transport=transport, base_url=f"http://127.0.0.1:{port}",
                                 timeout=600) as client:
        health = await client.get("/health")
        if health.status_code != 200:
            raise CheckFailed(f"GET /health answered {health.status_code}: {health.text[:300]}")
        for index in range(replies + 1):  # the first is the cold one, reported apart
            started = time.perf_counter()
            response = await client.post("/v1/chat/completions", json={**request, "seed": index})
            latencies.append(time.perf_counter() - started)
            if response.status_code != 200:
                raise CheckFailed(f"POST /v1/chat/completions answered {response.status_code}: "
                                  f"{response.text[:500]}")
            bodies.append(response.json())
    return latencies, bodies


def generate(checkpoint: Path, *, device: str, dtype: str, replies: int, max_tokens: int,
             size: tuple[int, int] = (1280, 720)) -> GenerateFigures:
    """Serve `checkpoint` with the policy server's app on `device` in `dtype` and time `replies` chat
    replies."""
    from webgym_rl.policy_server import PolicyServerSettings, create_app

    _reset_peak(device)
    port = 8500  # nothing binds it: the app runs in-process; the caller check wants its Host
    settings = PolicyServerSettings(model=str(checkpoint), served_model_name="policy", port=port,
                                    device=device, dtype=dtype,
                                    max_new_tokens=max_tokens)
    started = time.perf_counter()
    app = create_app(settings)
    load_s = time.perf_counter() - started
    model_ref = weakref.ref(app.state.service.policy.model)
    try:
        request = {"model": "policy", **observation_request(size, max_tokens=max_tokens)}
        latencies, bodies = asyncio.run(_ask(app, port, request, replies))
    finally:
        # The service is referenced from more than the app (the routes' closures, the framework's
        # caches of them): drop its model here, so nothing can keep it on the GPU for the next shape.
        service = app.state.service
        service.close()
        service.policy = None
        del app, service
    peak = _peak_gib(device)
    _free(device)
    model_freed = _released(model_ref, f"{checkpoint.name}: the served model")
    memory_after = _memory_allocated_gib(device)
    timed, timed_bodies = latencies[1:], bodies[1:]
    completion = [body["usage"]["completion_tokens"] for body in timed_bodies]
    for body in bodies:
        choice = body["choices"][0]
        content = (choice.get("logprobs") or {}).get("content")
        if content is None or len(content) != body["usage"]["completion_tokens"]:
            raise CheckFailed(f"a reply's logprobs do not match its {body['usage']['completion_tokens']} "
                              f"tokens: {str(choice)[:300]}")
    return GenerateFigures(
        checkpoint=str(checkpoint), replies=len(timed), load_s=load_s, first_reply_s=latencies[0],
        latency_s_per_reply=sum(timed) / len(timed), latency_s_max=max(timed),
        prompt_tokens=int(bodies[0]["usage"]["prompt_tokens"]),
        completion_tokens_per_reply=sum(completion) / len(completion),
        decode_tokens_per_s=sum(completion) / sum(timed), peak_memory_gib=peak,
        fingerprint=str(bodies[-1].get("system_fingerprint")),
        sample_reply=bodies[-1]["choices"][0]["message"]["content"][:80], model_freed=model_freed,
        memory_after_gib=memory_after)


# ------------------------------------------------------------------------------------------- main

@dataclass
class RunReport:
    shape: str
    mode: str
    config: dict[str, Any]
    params: dict[str, int] = field(default_factory=dict)
    memory_at_start_gib: float | None = None
    """GPU memory allocated when the shape started (what an earlier shape left; 0 on the CPU)."""
    scratch_free_gib: float | None = None
    build_s: float | None = None
    data: dict[str, Any] = field(default_factory=dict)
    train: dict[str, Any] | None = None
    generate: dict[str, Any] | None = None
    errors: list[dict[str, str]] = field(default_factory=list)

    def figures(self) -> dict[str, float | None]:
        train, gen = self.train or {}, self.generate or {}
        return {"samples_per_s": train.get("samples_per_s"), "tokens_per_s": train.get("tokens_per_s"),
                "peak_memory_gib": max([x for x in (train.get("peak_memory_gib"), gen.get("peak_memory_gib"))
                                        if x is not None], default=None),
                "mfu": train.get("mfu"), "mfu_causal": train.get("mfu_causal"),
                "latency_s_per_reply": gen.get("latency_s_per_reply")}


def _phase(report: RunReport, phase: str, action: Any) -> Any:
    """Run `action()`; a failure is recorded on `report` (with its phase) and None returned."""
    try:
        return action()
    except Exception as exc:  # every failure is reported, then the next phase or shape runs
        detail = "".join(traceback.format_exception(exc)[-6:])
        report.errors.append({"phase": phase, "error": f"{type(exc).__name__}: {exc}", "traceback": detail})
        _log(f"{report.shape}: {phase} FAILED: {type(exc).__name__}: {exc}\n{detail}")
        return None


def run_shape(key: str, *, tiny: bool, device: str, root: Path, source: Path, args: argparse.Namespace,
              saved: Any = None) -> RunReport:
    """Build, train and serve one shape; `saved(report, phase)` is called after each phase (and
    before the first), the report written so far in hand."""
    big, small, lora = _RUNS[key]
    shape = small if tiny else big
    report = RunReport(shape=shape.name, mode="lora" if lora else "full", config=asdict(shape))

    def save(phase: str) -> None:
        if saved is not None:
            saved(report, f"{shape.name}: {phase}")

    work = root / shape.name
    work.mkdir(parents=True, exist_ok=True)
    try:
        _free(device)
        _reset_peak(device)
        report.memory_at_start_gib = _memory_allocated_gib(device)
        report.scratch_free_gib = free_gib(root)
        if report.memory_at_start_gib > 0.5:
            _log(f"WARNING: {shape.name}: {report.memory_at_start_gib:.2f} GiB of GPU memory still allocated "
                 "from before: the peaks below include it")
        _log(f"{shape.name}: building the checkpoint on {device} ({report.memory_at_start_gib:.2f} GiB "
             f"allocated, {report.scratch_free_gib:.1f} GiB free in {root})")
        save("start")
        started = time.perf_counter()
        counts = _phase(report, "build", lambda: build_checkpoint(
            work / "model", shape, source, device=device, dtype=args.model_dtype))
        report.build_s = time.perf_counter() - started
        if counts is not None:
            report.params = asdict(counts)
        save("build")
        if counts is None:
            return report
        _log(f"{shape.name}: {counts.total / 1e9:.3f}B weights ({report.build_s:.1f} s); writing the dataset")
        data = _phase(report, "dataset", lambda: write_dataset(work / "data", episodes=args.episodes,
                                                               kept_steps=args.kept_steps))
        if data is not None:
            report.data = {"episodes": args.episodes, "samples": args.episodes * args.kept_steps,
                           "images_per_sample": CONTEXT_STEPS + 1, "screenshot": "1280x720",
                           "bytes": sum(p.stat().st_size for p in data.rglob("*.parquet"))}
        save("dataset")
        if data is None:
            return report
        _log(f"{shape.name}: training ({report.mode}, {args.steps} timed steps)")
        trained = _phase(report, "train", lambda: train_shape(
            shape, work / "model", data, work / "train", counts, lora=lora, steps=args.steps,
            batch_size=args.batch_size, dtype=args.model_dtype, device=device, peak_flops=args.peak_flops,
            lora_targets=args.lora_target_modules))
        if trained is not None:
            report.train = asdict(trained)
            _log(f"{shape.name}: {_train_line(trained)}")
        save("train")
        # A failed training still serves the untrained checkpoint: the serving path gets checked.
        served = Path(trained.checkpoint) if trained is not None else work / "model"
        _log(f"{shape.name}: generating with the policy server from {served.name}")
        generated = _phase(report, "generate", lambda: generate(
            served, device=device, dtype=args.model_dtype, replies=args.replies, max_tokens=args.max_tokens))
        if generated is not None:
            report.generate = asdict(generated)
            _log(f"{shape.name}: {_generate_line(generated)}")
        save("generate")
    finally:
        _free(device)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return report


def _train_line(t: TrainFigures) -> str:
    each = max(t.samples, 1)
    return (f"train {t.mode}: {t.steps} steps, {t.samples} samples ({t.images / each:.0f} images, "
            f"{t.tokens / each:.0f} tokens each, logits at {t.logit_rows / each:.0f}) in {t.loop_s:.2f} s "
            f"(warm-up {t.warmup_s:.2f} s): "
            f"{t.samples_per_s:.3f} samples/s, {t.tokens_per_s:.0f} tokens/s, {t.tflops_per_s:.1f} TFLOP/s, "
            f"MFU {t.mfu:.3f} (attention over the whole sequence; causal count {t.mfu_causal:.3f}; the "
            f"timed loop includes preparing the samples on the CPU: {t.collate_s:.2f} s of it), "
            f"peak {t.peak_memory_gib:.2f} GiB, attention {t.attn_implementation}, save {t.save_s:.1f} s")


def _generate_line(g: GenerateFigures) -> str:
    return (f"generate: {g.replies} replies of {g.completion_tokens_per_reply:.0f} tokens after a "
            f"{g.prompt_tokens}-token prompt: {g.latency_s_per_reply:.2f} s/reply "
            f"(max {g.latency_s_max:.2f}, first {g.first_reply_s:.2f}), "
            f"{g.decode_tokens_per_s:.1f} tokens/s, load {g.load_s:.1f} s, peak {g.peak_memory_gib:.2f} GiB, "
            f"{g.fingerprint}; model released: {'yes' if g.model_freed else 'NO'}, "
            f"{g.memory_after_gib:.2f} GiB still allocated")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default="2b,8b", help="comma-separated, run in this order: 2b (full "
                        "fine-tune), 8b (LoRA)")
    parser.add_argument("--tiny", action="store_true", help="tiny shapes of the same architecture "
                        "(automatic without CUDA)")
    parser.add_argument("--require-cuda", action="store_true", help="fail instead of falling back to tiny "
                        "shapes on the CPU when CUDA is not available")
    parser.add_argument("--steps", type=int, default=4, help="timed optimizer steps (after one warm-up step)")
    parser.add_argument("--batch-size", type=int, default=1,
                        help="samples per step (the published recipe: 1)")
    parser.add_argument("--episodes", type=int, default=2, help="episodes in the synthetic dataset")
    parser.add_argument("--kept-steps", type=int, default=3, help="trained steps per episode (each after "
                        f"{CONTEXT_STEPS} context steps, so its prompt has {CONTEXT_STEPS + 1} screenshots)")
    parser.add_argument("--model-dtype", choices=("bfloat16", "float32"), default=None,
                        help="weights dtype, training and serving (default: bfloat16 on CUDA, as the "
                        "published recipe; float32 on CPU)")
    parser.add_argument("--lora-target-modules", default="q_proj,k_proj,v_proj,o_proj",
                        help="modules LoRA wraps (comma-separated)")
    parser.add_argument("--replies", type=int, default=3, help="timed replies (after one cold reply)")
    parser.add_argument("--max-tokens", type=int, default=None, help="max_tokens of each reply (default: "
                        "64 on CUDA, 8 on CPU)")
    parser.add_argument("--peak-flops", type=float, default=H100_BF16_DENSE_FLOPS,
                        help="the device's dense bf16 peak in FLOP/s, for the MFU (default: H100/H200)")
    parser.add_argument("--work-dir", default=None, help="folder for checkpoints and data (default: /dev/shm "
                        "on CUDA when it has room, else the system's temporary folder)")
    parser.add_argument("--keep", action="store_true", help="keep the work files")
    parser.add_argument("--json", default=None, metavar="PATH", help="write the report as JSON ('-': stdout)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the check; returns the exit status (0: every step passed, 1: a step failed)."""
    args = _parser().parse_args(argv)
    args.lora_target_modules = [m.strip() for m in args.lora_target_modules.split(",") if m.strip()]
    keys = [k.strip() for k in args.shapes.split(",") if k.strip()]
    unknown = [k for k in keys if k not in _RUNS]
    if unknown or not keys:
        _parser().error(f"--shapes: unknown {unknown or 'none given'}; choose from {', '.join(_RUNS)}")
    for name in ("steps", "batch_size", "episodes", "kept_steps", "replies"):
        if getattr(args, name) < 1:
            _parser().error(f"--{name.replace('_', '-')}: must be >= 1, got {getattr(args, name)}")
    reporter = Reporter(args.json)
    report = reporter.report
    out = sys.stderr if args.json == "-" else sys.stdout
    try:
        report["versions"] = preflight()
        report["progress_bars_off"] = quiet_progress_bars()
        import torch

        cuda = torch.cuda.is_available()
        device = "cuda" if cuda else "cpu"
        report["environment"] = environment(device)
        _log("found: " + ", ".join(f"{k} {v}" for k, v in report["environment"].items()))
        if args.require_cuda and not cuda:
            raise CheckFailed("--require-cuda: torch.cuda.is_available() is False "
                              f"(torch {torch.__version__}, built for CUDA {torch.version.cuda})")
        tiny = args.tiny or not cuda
        args.model_dtype = args.model_dtype or ("bfloat16" if cuda else "float32")
        args.max_tokens = args.max_tokens or (64 if cuda else 8)
        report.update(device=_device_info(device), tiny=tiny, peak_flops=args.peak_flops,
                      settings={k: v for k, v in vars(args).items() if k != "json"})
        _log(f"{'tiny shapes' if tiny else 'full shapes'} on {device}: {', '.join(keys)}")
        # The tokenizer (a few hundred KiB) first, in the system's temporary folder: the shapes' weights,
        # counted with it, say how much room the scratch folder needs.
        source_root = Path(tempfile.mkdtemp(prefix="gpu-check-tokenizer-"))
        root = None
        try:
            source = tokenizer_source(source_root / "tokenizer-source")
            needs = {}
            for key in keys:
                big, small, lora = _RUNS[key]
                shape = small if tiny else big
                needs[shape.name] = scratch_need_gib(meta_param_count(shape, source), lora=lora,
                                                     dtype=args.model_dtype)
            largest = max(needs, key=needs.get)
            root = _work_root(args.work_dir, device, need_gib=needs[largest])
            report["work_dir"] = str(root)
            report["scratch"] = {"folder": str(root), "free_gib": round(free_gib(root), 1),
                                 "need_gib": {k: round(v, 1) for k, v in needs.items()}}
            _log(f"scratch folder {root}: {free_gib(root):.1f} GiB free; needs about "
                 + ", ".join(f"{v:.1f} GiB for {k}" for k, v in needs.items()))
            reporter.write("setup")
            check_scratch(root, needs[largest], f"{largest} (its checkpoint and the copy it writes)")
            for index, key in enumerate(keys):
                def saved(run: RunReport, phase: str, index: int = index) -> None:
                    runs = report["runs"]
                    entry = {**asdict(run), "figures": run.figures()}
                    runs[index:index + 1] = [entry]
                    reporter.write(phase)

                run = run_shape(key, tiny=tiny, device=device, root=root, source=source, args=args,
                                saved=saved)
                saved(run, f"{run.shape}: done")
        finally:
            if not args.keep:
                shutil.rmtree(source_root, ignore_errors=True)
                if root is not None:
                    shutil.rmtree(root, ignore_errors=True)
    except Exception as exc:  # the environment itself is broken: say what, exit non-zero
        report["errors"].append({"phase": "setup", "error": f"{type(exc).__name__}: {exc}",
                                 "traceback": "".join(traceback.format_exception(exc)[-6:])})
        _log(f"setup FAILED: {type(exc).__name__}: {exc}")
    failed = bool(report["errors"]) or any(run["errors"] for run in report["runs"])
    missing = [(run["shape"], name) for run in report["runs"]
               for name, value in run["figures"].items() if value is None or not math.isfinite(value)]
    report["ok"] = not failed and not missing and bool(report["runs"])
    report["finished"] = True
    for run in report["runs"]:
        f = run["figures"]
        shown = ", ".join(f"{name} {value:.4g}" if value is not None else f"{name} -"
                          for name, value in f.items())
        status = "ok" if not run["errors"] else "FAILED in " + ", ".join(e["phase"] for e in run["errors"])
        print(f"{run['shape']} ({run['mode']}): {shown}  [{status}]", file=out)
    print(f"gpu_check: {'PASSED' if report['ok'] else 'FAILED'}", file=out)
    reporter.write("finished")
    if args.json == "-":
        print(json.dumps(report, indent=1, default=str))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
