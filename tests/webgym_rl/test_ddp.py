"""webgym_rl.train under ``accelerate launch``: 2 DDP processes on CPU (gloo) end with identical weights."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO_ROOT, free_port
from tests.webgym_rl.synthetic import standard_iteration, tiny_checkpoint
from webgym_rl.modeling import load_model

SCRIPT = '''
import hashlib, json, os, sys
from pathlib import Path
from webgym_core.settings import settings_from_dict
from webgym_rl.train import TrainSettings, train

settings = settings_from_dict(TrainSettings, json.loads(sys.argv[1]))
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
