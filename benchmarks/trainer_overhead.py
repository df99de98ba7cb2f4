"""Trainer overhead: samples/s of `webgym_rl.train.train` against a bare PyTorch loop, side by side.

Both loops train the same tiny random Qwen-VL checkpoint on the same synthetic trajectory samples,
in the same order, with the same collator, batch size, learning rate and gradient clipping. The
bare loop is forward / loss / backward / clip / optimizer step / zero_grad and nothing else; the
trainer adds Accelerate (prepare, accumulate, its clipping wrapper, the scheduler), metrics to
TensorBoard, the progress bar and the data-position bookkeeping. Setup (loading data and model)
and the final checkpoint are outside both timings. Runs alternate (trainer, bare, trainer, bare,
...); the script prints best-of-N throughputs and the median of the back-to-back pair ratios,
both by wall time and by the process's CPU time (steadier when other jobs share the cores).
Target: trainer / bare >= 0.9.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/trainer_overhead.py [--steps 40] [--repeats 3]
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MAX_GRAD_NORM = 1.0  # both loops clip: the same math, so the difference is the trainer's machinery


def bare_loop(model_dir: Path, samples, *, steps: int, batch_size: int, lr: float,
              seed: int) -> tuple[float, float]:
    """(wall, CPU) samples/s of the plainest loop over the trainer's batches (same order)."""
    import torch

    from webgym_rl.collate import Collator
    from webgym_rl.modeling import load_model, load_processor
    from webgym_rl.objectives import ObjectiveBatch, filtered_bc
    from webgym_rl.settings import OptimizationSettings
    from webgym_rl.train import EpochOrder

    torch.manual_seed(seed)
    model = load_model(model_dir, dtype=torch.float32).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    order = EpochOrder(samples.weights, seed)
    loader = torch.utils.data.DataLoader(samples, batch_size=batch_size, sampler=order,
                                         collate_fn=Collator(load_processor(model_dir)))
    settings = OptimizationSettings(objective="filtered_bc")
    done, seen = 0, 0
    started, started_cpu = time.perf_counter(), time.process_time()
    while done < steps:
        for batch in loader:
            labels, advantages = batch.pop("labels"), batch.pop("advantages")
            batch.pop("behaviour_logprobs", None)  # filtered_bc does not read them
            objective = ObjectiveBatch(logits=model(**batch).logits, labels=labels, advantages=advantages)
            loss, _ = filtered_bc(objective, settings)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_GRAD_NORM)
            optimizer.step()
            optimizer.zero_grad()
            done, seen = done + 1, seen + labels.shape[0]
            if done >= steps:
                break
        order.epoch += 1
    return seen / (time.perf_counter() - started), seen / (time.process_time() - started_cpu)


def trainer_loop(model_dir: Path, data: Path, out: Path, *, steps: int, batch_size: int, lr: float,
                 seed: int) -> tuple[float, float]:
    """(wall, CPU) samples/s of the real training code path."""
    from webgym_rl.settings import OptimizationSettings, TrainCommandSettings
    from webgym_rl.train import train

    training = OptimizationSettings(objective="filtered_bc", max_steps=steps,
                                    per_device_batch_size=batch_size, learning_rate=lr,
                                    max_grad_norm=MAX_GRAD_NORM)
    result = train(TrainCommandSettings(model=str(model_dir), data=[str(data)], out=str(out), seed=seed,
                                        cache_dir=str(out.parent / "datasets-cache"), training=training))
    return result.samples_seen / result.loop_seconds, result.samples_seen / result.loop_cpu_seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=40, help="optimizer steps per timed run")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs of each loop (alternating)")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--family", choices=("qwen2_vl", "qwen3_vl"), default="qwen2_vl")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    from tests.webgym_rl.synthetic import standard_iteration
    from webgym_rl.samples import build_samples, load_trajectories
    from webgym_rl.tiny import build_tiny_model

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model_dir = build_tiny_model(root / "model", family=args.family)
        data = standard_iteration(root / "iter-0", tasks=8, attempts=2, num_steps=4)
        samples = build_samples(load_trajectories([data], cache_dir=root / "datasets-cache"), "filtered_bc")
        common = dict(steps=args.steps, batch_size=args.batch_size, lr=1e-4, seed=0)
        # One untimed run of each to warm caches (allocator, tokenizer, image processor).
        trainer_loop(model_dir, data, root / "warm", **{**common, "steps": 3})
        bare_loop(model_dir, samples, **{**common, "steps": 3})
        trainer, bare = [], []
        for repeat in range(args.repeats):
            trainer.append(trainer_loop(model_dir, data, root / f"run-{repeat}", **common))
            bare.append(bare_loop(model_dir, samples, **common))
        print(f"tiny {args.family}, {len(samples)} samples, batch {args.batch_size}, {args.steps} steps x "
              f"{args.repeats} alternating runs")
        for label, index in (("wall", 0), ("CPU", 1)):
            t = [run[index] for run in trainer]
            b = [run[index] for run in bare]
            paired = [x / y for x, y in zip(t, b, strict=True)]
            for name, runs in (("webgym-rl train", t), ("bare PyTorch   ", b)):
                print(f"  {label:4s} {name}: best {max(runs):6.1f} samples/s "
                      f"(runs {', '.join(f'{x:.0f}' for x in runs)})")
            # Best-of-N and the median of back-to-back pairs both resist a busy shared machine.
            print(f"  {label:4s} ratio trainer/bare: best-of-{args.repeats} {max(t) / max(b):.3f}, "
                  f"median of pairs {statistics.median(paired):.3f}  (target >= 0.9)")

if __name__ == "__main__":
    main()
