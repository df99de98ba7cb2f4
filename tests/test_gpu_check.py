"""benchmarks/gpu_check.py: the GPU check of the training path, run at tiny shapes so it cannot rot.

The script runs as a program (a subprocess, as on the GPU machine): tiny Qwen3-VL shapes on the
CPU, the toolkit's trainer (a full fine-tune and LoRA) and policy server, one timed step and one
timed reply each. On a CUDA machine the `gpu` test runs the same tiny shapes on the GPU. What the
one GPU run depends on is tested here too: the report written after every phase (a run killed
mid-way keeps its figures), the early stop when the scratch folder is too small, no progress bars
in the output, and benchmarks/gpu_run.sh stopping on a failed wheel install.
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
import zipfile
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
        # Nothing keeps a finished shape's models alive for the next shape's peak.
        assert generate["model_freed"] is True and train["model_freed"] is True
        assert run["memory_at_start_gib"] is not None and run["scratch_free_gib"] > 0
        # The causal count is below the whole-sequence one; the collator's time is inside the loop.
        assert 0 < train["mfu_causal"] < train["mfu"]
        assert 0 < train["collate_s"] < train["loop_s"]
        assert f"{run['shape']} ({run['mode']}):" in done.stdout
    lora, full = report["runs"][1]["train"], report["runs"][0]["train"]
    assert 0 < lora["trainable_params"] < report["runs"][1]["params"]["total"]
    assert full["trainable_params"] == report["runs"][0]["params"]["total"]
    assert "gpu_check: PASSED" in done.stdout
    assert report["finished"] is True and report["last_phase"] == "finished"


def test_tiny_shapes_train_and_serve_and_report_every_figure(tmp_path):
    done, report = _run(tmp_path)
    assert report["device"]["device"] in ("cpu", "cuda") and report["tiny"] is True
    _check_passing(done, report)
    # The start says what was found and where the files go, and no progress bar redraws fill the
    # output (the GPU run returns only its last 12,000 characters).
    import torch

    assert f"torch {torch.__version__}" in done.stderr and "transformers 5." in done.stderr
    assert report["environment"]["torch"] == torch.__version__
    assert re.search(r"scratch folder \S+: [\d.]+ GiB free; needs about [\d.]+ GiB for tiny-2b-like",
                     done.stderr)
    assert set(report["progress_bars_off"]) == {"huggingface_hub", "transformers", "datasets"}
    for bar in ("Loading weights", "Writing model shards", "Generating train split", "it/s]"):
        assert bar not in done.stderr, bar


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
    # Causal: the 7 queries see 1..7 keys, 28 pairs instead of 49; the vision tower stays bidirectional.
    causal = script.model_flops(shape, counts, fed, lora=False, lora_params=0, causal=True)
    assert causal == full - 12 * 2 * 64 * (49 - 28)


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


def _in_process(monkeypatch, tmp_path: Path, *args: str) -> tuple[object, Path]:
    """The script's module with its progress-bar switch stubbed (it is global to the process), and
    the arguments of a quick one-shape run."""
    script = _load_script()
    monkeypatch.setattr(script, "quiet_progress_bars", lambda: [])
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    return script, tmp_path / "report.json"


class _Killed(BaseException):
    """Stands for the run being killed: not an Exception, so no phase catches it."""


def test_a_run_killed_mid_way_leaves_the_figures_of_the_finished_phases(monkeypatch, tmp_path):
    script, path = _in_process(monkeypatch, tmp_path)
    written = []
    write = script.Reporter.write

    def recording(self, phase=None):
        write(self, phase)
        written.append(json.loads(path.read_text()))

    monkeypatch.setattr(script.Reporter, "write", recording)

    def killed(*args, **kwargs):
        raise _Killed

    monkeypatch.setattr(script, "generate", killed)
    with pytest.raises(_Killed):
        script.main([*QUICK, "--shapes", "2b", "--work-dir", str(tmp_path / "work"), "--json", str(path)])
    # Written once set up, then after each phase, each time a whole JSON document.
    phases = [report["last_phase"] for report in written]
    assert phases == ["setup", "tiny-2b-like: start", "tiny-2b-like: build", "tiny-2b-like: dataset",
                      "tiny-2b-like: train"]
    assert written[0]["scratch"]["free_gib"] > 0 and written[0]["runs"] == []
    assert written[2]["runs"][0]["params"]["total"] > 0 and written[2]["runs"][0]["train"] is None
    # What the kill left: the training's figures, not finished, no temporary file beside it.
    left = json.loads(path.read_text())
    assert left["finished"] is False and left["last_phase"] == "tiny-2b-like: train"
    (run,) = left["runs"]
    assert run["figures"]["samples_per_s"] > 0 and run["figures"]["mfu"] > 0
    assert run["figures"]["latency_s_per_reply"] is None
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".report")] == []


def test_a_failed_write_keeps_the_previous_report_whole(monkeypatch, tmp_path):
    script = _load_script()
    path = tmp_path / "report.json"
    reporter = script.Reporter(str(path))
    reporter.report["runs"].append({"shape": "first"})
    reporter.write("first")

    def broken(source, target):
        raise OSError("disk full")

    monkeypatch.setattr(script.os, "replace", broken)
    reporter.report["runs"].append({"shape": "second"})
    with pytest.raises(OSError, match="disk full"):
        reporter.write("second")
    assert json.loads(path.read_text())["last_phase"] == "first"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]  # the temporary file went


def test_too_little_scratch_space_stops_before_anything_is_built(monkeypatch, tmp_path):
    script, path = _in_process(monkeypatch, tmp_path)
    built = []
    monkeypatch.setattr(script, "free_gib", lambda folder: 0.25)  # a tiny shape needs about 1 GiB
    monkeypatch.setattr(script, "build_checkpoint", lambda *a, **k: built.append(a))
    status = script.main([*QUICK, "--work-dir", str(tmp_path / "work"), "--json", str(path)])
    assert status == 1 and built == []
    report = json.loads(path.read_text())
    assert report["ok"] is False and report["finished"] is True and report["runs"] == []
    (error,) = report["errors"]
    assert error["phase"] == "setup"
    assert "0.2 GiB free" in error["error"] and "tiny-2b-like" in error["error"]
    assert "--work-dir" in error["error"]
    assert report["scratch"]["free_gib"] == 0.2


def test_the_8b_shape_needs_about_33_gib_of_scratch_space(tmp_path):
    script = _load_script()
    source = script.tokenizer_source(tmp_path / "tokenizer")
    weights = script.meta_param_count(script.QWEN3_VL_8B, source)
    assert 8.5e9 < weights < 9.0e9  # Qwen3-VL-8B: 8.77B with the 151936-row vocabulary, untied
    need = script.scratch_need_gib(weights, lora=True, dtype="bfloat16")
    assert 32 < need < 35
    two = script.meta_param_count(script.QWEN3_VL_2B, source)
    assert 2.0e9 < two < 2.3e9
    assert script.scratch_need_gib(two, lora=False, dtype="bfloat16") < need


# ------------------------------------------------------------------------- benchmarks/gpu_run.sh

def _wheel(folder: Path, name: str, version: str) -> Path:
    """A minimal pure-Python wheel of one module."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr(f"{name}.py", "VALUE = 1\n")
        wheel.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        wheel.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                        "Tag: py3-none-any\n")
        wheel.writestr(f"{info}/RECORD", "")
    return path


def _gpu_run(tmp_path: Path, wheels: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OUT": str(tmp_path / "out"), "WHEELS": str(wheels), "SITE": str(tmp_path / "site"),
           "PYTHON": sys.executable, "OMP_NUM_THREADS": "1", "PIP_NO_INDEX": "1"}
    return subprocess.run(["bash", str(REPO_ROOT / "benchmarks" / "gpu_run.sh"), *args], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300)


def test_gpu_run_stops_when_a_wheel_does_not_install(tmp_path):
    wheels = tmp_path / "whl"
    _wheel(wheels, "good_one", "1.0")
    (wheels / "broken-1.0-py3-none-any.whl").write_bytes(b"not a zip file")
    done = _gpu_run(tmp_path, wheels, "--tiny")
    assert done.returncode == 3, done.stderr[-2000:]
    assert "pip could not install the wheels" in done.stderr and "the check did not run" in done.stderr
    assert not (tmp_path / "out" / "gpu_check.log").exists()


def test_gpu_run_installs_the_wheels_then_starts_the_check_with_them(tmp_path):
    wheels = tmp_path / "whl"
    _wheel(wheels, "gpu_run_probe", "2.5")
    # --steps 0 is refused by the check's argument parser: it started, and its exit status is passed on.
    done = _gpu_run(tmp_path, wheels, "--steps", "0")
    assert (tmp_path / "site" / "gpu_run_probe-2.5.dist-info").is_dir()
    assert done.returncode == 2, done.stderr[-2000:]
    log = (tmp_path / "out" / "gpu_check.log").read_text()
    assert "--steps: must be >= 1" in log
