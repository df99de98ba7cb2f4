"""webgym_rl.train under ``accelerate launch``: 2 DDP processes on CPU (gloo) end with identical weights."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, free_port
from tests.webgym_rl.synthetic import standard_iteration, tiny_checkpoint
from webgym_rl.modeling import load_model

SCRIPT = '''
import hashlib, json, os, sys
from pathlib import Path
from webgym_core.settings import settings_from_dict
from webgym_rl.settings import TrainCommandSettings
from webgym_rl.train import train

settings = settings_from_dict(TrainCommandSettings, json.loads(sys.argv[1]))
result = train(settings)
digest = hashlib.sha256()
for name, tensor in sorted(result.model.state_dict().items()):
    digest.update(name.encode())
    digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
rank = os.environ["RANK"]
Path(settings.out, f"weights-rank{rank}.json").write_text(json.dumps({
    "sha256": digest.hexdigest(), "losses": [e["loss"] for e in result.log_history],
    "samples_seen": result.samples_seen}))
'''


def test_two_ddp_processes_train_and_end_with_identical_weights(tmp_path_factory, tmp_path):
    model = tiny_checkpoint(tmp_path_factory, "qwen2_vl")
    data = standard_iteration(tmp_path / "iter-0", tasks=4)  # 4 kept episodes x 2 steps = 8 samples
    out = tmp_path / "out"
    settings = {"model": str(model), "data": [str(data)], "out": str(out), "objective": "filtered_bc",
                "max_steps": 3, "per_device_batch_size": 2, "learning_rate": 1e-3, "log_with": "none",
                "cache_dir": str(tmp_path / "cache")}
    script = tmp_path / "ddp_train.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": str(REPO_ROOT)}
    accelerate = Path(sys.executable).with_name("accelerate")
    result = subprocess.run(
        [str(accelerate), "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
         "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(free_port()),
         str(script), json.dumps(settings)],
        capture_output=True, text=True, env=env, timeout=240, check=False)
    assert result.returncode == 0, result.stderr[-4000:]
    ranks = [json.loads((out / f"weights-rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["sha256"] == ranks[1]["sha256"]
    initial = hashlib.sha256()  # same digest as SCRIPT's, of the starting weights: training moved them
    for name, tensor in sorted(load_model(model).state_dict().items()):
        initial.update(name.encode())
        initial.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    assert initial.hexdigest() != ranks[0]["sha256"]
    assert ranks[0]["losses"] == ranks[1]["losses"] and len(ranks[0]["losses"]) == 3
    # Each rank saw its own half of each global batch: 3 steps x batch 2 per process.
    assert ranks[0]["samples_seen"] == ranks[1]["samples_seen"] == 6
    state = json.loads((out / "checkpoint-000003" / "trainer_state.json").read_text())
    assert state["num_processes"] == 2 and state["step"] == 3
    assert (out / "checkpoint-000003" / "training_state" / "random_states_1.pkl").is_file()


SAVE = '''
import json, sys
from webgym_core.settings import settings_from_dict
from webgym_rl.settings import TrainCommandSettings
from webgym_rl.train import train

result = train(settings_from_dict(TrainCommandSettings, json.loads(sys.argv[1])))
print("LOSSES", json.dumps([e["loss"] for e in result.log_history]))
'''


def test_a_step_on_two_processes_is_the_step_on_one(tmp_path_factory, tmp_path):
    """token-mean divides by the tokens of the whole step, on every process: the first step of two
    DDP ranks with two samples each has the loss of one process with all four (the replies differ in
    length, so a per-process normaliser would not). The loss is what is differentiated, and DDP
    averages its gradients over the ranks: the same loss is the same gradient. (The weights after
    Adam's first step are no test: it moves a weight by the sign of its gradient, and a near-zero
    gradient's sign depends on the order of the sums.)"""
    from tests.webgym_rl.synthetic import episode, write_shards

    model = tiny_checkpoint(tmp_path_factory, "qwen2_vl")
    replies = ["ok", '{"action": "click", "x": 120, "y": 5, "why": "a much longer reply"}', "go", "y" * 40]
    played = [episode(task_id=f"t{i}", reward=1.0, num_steps=1, responses=[r]) for i, r in enumerate(replies)]
    data = write_shards(tmp_path / "data", played)
    script = tmp_path / "train_once.py"
    script.write_text(SAVE)
    env = {**os.environ, "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": str(REPO_ROOT)}
    runs = {}
    for name, processes, batch in (("two", 2, 2), ("one", 1, 4)):
        out = tmp_path / name
        settings = {"model": str(model), "data": [str(data)], "out": str(out), "objective": "filtered_bc",
                    "max_steps": 1, "per_device_batch_size": batch, "learning_rate": 1e-2,
                    "log_with": "none", "max_grad_norm": 0, "cache_dir": str(tmp_path / f"cache-{name}")}
        ranks = ["--multi_gpu", "--num_processes", "2"] if processes == 2 else ["--num_processes", "1"]
        launch = [str(Path(sys.executable).with_name("accelerate")), "launch", "--num_machines", "1",
                  "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port",
                  str(free_port()), *ranks]
        result = subprocess.run([*launch, str(script), json.dumps(settings)], capture_output=True, text=True,
                                env=env, timeout=240, check=False)
        assert result.returncode == 0, result.stderr[-4000:]
        losses = [json.loads(line.split(" ", 1)[1]) for line in result.stdout.splitlines()
                  if line.startswith("LOSSES")]
        runs[name] = losses[0]
    assert runs["two"] == [pytest.approx(runs["one"][0], rel=1e-5)]
