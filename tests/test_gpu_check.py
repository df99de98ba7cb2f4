"""benchmarks/gpu_check.py: the GPU check of the training path, run at tiny shapes so it cannot rot.

The script runs as a program (a subprocess, as on the GPU machine): tiny Qwen3-VL shapes on the
CPU, the toolkit's trainer (a full fine-tune and LoRA) and policy server, one timed step and one
timed reply each. On a CUDA machine the `gpu` test runs the same tiny shapes on the GPU.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SCRIPT = REPO_ROOT / "benchmarks" / "gpu_check.py"
QUICK = ["--tiny", "--steps", "1", "--replies", "1", "--max-tokens", "8", "--episodes", "1",
         "--kept-steps", "2"]


@functools.cache
def _load_script():
    """The script as a module (its dataclasses need it in sys.modules while it loads)."""
    spec = importlib.util.spec_from_file_location("benchmarks_gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _run(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    report = tmp_path / "report.json"
    work = tmp_path / "work"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    command = [sys.executable, str(SCRIPT), *QUICK, "--work-dir", str(work), "--json", str(report), *args]
    done = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert report.is_file(), done.stderr[-3000:]
    assert not any(work.iterdir()), "the work files were left behind"
    return done, json.loads(report.read_text())


def _check_passing(done: subprocess.CompletedProcess, report: dict) -> None:
    assert done.returncode == 0, done.stderr[-3000:]
    assert report["ok"] is True and report["errors"] == []
    assert [(run["shape"], run["mode"]) for run in report["runs"]] == [("tiny-2b-like", "full"),
                                                                       ("tiny-8b-like", "lora")]
    script = _load_script()
    for run in report["runs"]:
        assert run["errors"] == []
        for name in script.FIGURES:
            value = run["figures"][name]
            assert value is not None and math.isfinite(value) and value > 0, (run["shape"], name, value)
        train, generate = run["train"], run["generate"]
        # Every trained sample shows the memory prompt's 4 full rounds plus the current screenshot.
        assert train["steps"] == 1 and train["samples"] == 1 and train["images"] == 5
        assert train["tokens"] > train["patches"] / 4  # the image tokens and the text
        assert len(train["losses"]) == 2 and all(math.isfinite(x) for x in train["losses"])
        assert train["attn_implementation"] == "sdpa"
        assert generate["replies"] == 1 and 1 <= generate["completion_tokens_per_reply"] <= 8
        assert generate["fingerprint"] == "v0"
        assert f"{run['shape']} ({run['mode']}):" in done.stdout
    lora, full = report["runs"][1]["train"], report["runs"][0]["train"]
    assert 0 < lora["trainable_params"] < report["runs"][1]["params"]["total"]
    assert full["trainable_params"] == report["runs"][0]["params"]["total"]
    assert "gpu_check: PASSED" in done.stdout


def test_tiny_shapes_train_and_serve_and_report_every_figure(tmp_path):
    done, report = _run(tmp_path)
    assert report["device"]["device"] in ("cpu", "cuda") and report["tiny"] is True
    _check_passing(done, report)


def test_a_failed_step_exits_non_zero_names_its_phase_and_the_rest_still_runs(tmp_path):
    # LoRA on modules the model does not have: peft refuses, the training of the 8B shape fails.
    done, report = _run(tmp_path, "--shapes", "8b", "--lora-target-modules", "no_such_module")
    assert done.returncode == 1
    assert report["ok"] is False
    (run,) = report["runs"]
    assert [error["phase"] for error in run["errors"]] == ["train"]
    assert "no_such_module" in run["errors"][0]["error"]
    assert run["figures"]["samples_per_s"] is None
    # The untrained checkpoint was still served: the serving path got checked.
    assert run["figures"]["latency_s_per_reply"] > 0
    assert "FAILED in train" in done.stdout and "gpu_check: FAILED" in done.stdout


def test_model_flops_follow_the_documented_formulas():
    script = _load_script()
    shape = script.TINY_8B  # 2 layers, 4 heads of 16; vision 2 layers of width 32, merge 2
    counts = script.ParamCounts(total=0, lm=100, embedding=50, vision_blocks=10, vision_mergers=4)
    fed = script._Counted(samples=1, tokens=7, tokens_sq=49, patches=8, patches_sq=64, images=1)
    full = script.model_flops(shape, counts, fed, lora=False, lora_params=0)
    assert full == 6 * 100 * 7 + 12 * 2 * 64 * 49 + 6 * 10 * 8 + 6 * 4 * 2 + 12 * 2 * 32 * 64
    lora = script.model_flops(shape, counts, fed, lora=True, lora_params=3)
    assert lora == 4 * 100 * 7 + 12 * 2 * 64 * 49 + 6 * 3 * 7 + 2 * 10 * 8 + 2 * 4 * 2 + 4 * 2 * 32 * 64


def test_the_docstring_lists_exactly_the_wheels_gpu_wheels_sh_downloads():
    script_text = (REPO_ROOT / "benchmarks" / "gpu_wheels.sh").read_text()
    core = re.search(r"CORE=\((.*?)\)", script_text, re.S).group(1).split()
    docstring = _load_script().__doc__
    listed = re.findall(r"([a-z][a-z-]+) (\d[\d.]*) \(", docstring.split("downloads exactly these")[1]
                        .split("No uvicorn")[0])
    assert sorted(f"{name}=={version}" for name, version in listed) == sorted(core)


@pytest.mark.gpu
def test_tiny_shapes_on_the_gpu(tmp_path):
    done, report = _run(tmp_path, "--require-cuda")
    assert report["device"]["device"] == "cuda"
    _check_passing(done, report)
