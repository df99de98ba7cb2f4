"""webgym_rl.hub: the push at the HfApi boundary, and a Hub model id (and a Hub trajectory dataset)
as training input, served by a real local Hub-protocol server (olah in offline mode)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from huggingface_hub import HfApi

from tests.conftest import REPO_ROOT
from tests.support.local_hub import run_local_hub
from tests.webgym_rl.synthetic import standard_iteration, tiny_checkpoint
from webgym_rl.hub import push_command
from webgym_rl.settings import OptimizationSettings, TrainCommandSettings
from webgym_rl.train import train


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("push")
    data = standard_iteration(root / "iter-0", tasks=2)
    settings = TrainCommandSettings(model=str(tiny_checkpoint(tmp_path_factory, "qwen2_vl")),
                                    data=[str(data)], out=str(root / "out"), cache_dir=str(root / "c"),
                                    training=OptimizationSettings(max_steps=2, log_with="none"))
    return train(settings).checkpoint


class RecordingHub:
    """Stands in for the Hub's write API only: records what would be created and uploaded."""

    def __init__(self, monkeypatch):
        self.repos, self.commits = [], []
        monkeypatch.setattr(HfApi, "create_repo", lambda api, repo_id, **kw: self.repos.append((repo_id, kw)))
        monkeypatch.setattr(HfApi, "create_commit", lambda api, **kw: self._commit(**kw))

    def _commit(self, repo_id, operations, commit_message, **kw):
        files = {}
        for op in operations:
            source = op.path_or_fileobj
            files[op.path_in_repo] = source if isinstance(source, bytes) else Path(source).read_bytes()
        self.commits.append({"repo_id": repo_id, "files": files, "message": commit_message, **kw})
        return "http://127.0.0.1/fake-commit"


def test_push_uploads_the_checkpoint_and_a_card_with_the_measured_figures(checkpoint, monkeypatch):
    hub = RecordingHub(monkeypatch)
    result = CliRunner().invoke(push_command, [str(checkpoint), "my-org/webgym-agent", "--success-rate",
                                               "test=0.429", "--success-rate", "train=0.5",
                                               "--base-model", "Qwen/Qwen3-VL-8B-Instruct", "--private"])
    assert result.exit_code == 0, result.output
    assert hub.repos == [("my-org/webgym-agent", {"repo_type": "model", "private": True, "exist_ok": True})]
    (commit,) = hub.commits
    local = {p.relative_to(checkpoint).as_posix() for p in checkpoint.rglob("*") if p.is_file()}
    expected = {name for name in local if not name.startswith("training_state/")} | {"README.md"}
    assert set(commit["files"]) == expected
    assert commit["files"]["model.safetensors"] == (checkpoint / "model.safetensors").read_bytes()
    assert {"processor_config.json", "tokenizer.json", "trainer_state.json"} <= set(commit["files"])
    state = json.loads((checkpoint / "trainer_state.json").read_text())
    card = commit["files"]["README.md"].decode()
    assert card.startswith("---\n") and "base_model: Qwen/Qwen3-VL-8B-Instruct\n" in card
    assert "library_name: transformers" in card and "$" not in card
    (source,) = state["data"]
    assert f"| `{source['id']}` | `{source['version']}` | 4 |" in card
    assert "| test | 42.9% |" in card and "| train | 50.0% |" in card
    assert "| optimizer steps | 2 |" in card and "| objective | `filtered_bc` |" in card
    assert "4 trajectories read, 2 kept, 4 steps kept" in card
    assert commit["message"] == "webgym-rl checkpoint, step 2"


def test_push_can_include_the_training_state(checkpoint, monkeypatch):
    hub = RecordingHub(monkeypatch)
    result = CliRunner().invoke(push_command, [str(checkpoint), "o/m", "--include-training-state"])
    assert result.exit_code == 0, result.output
    assert "training_state/optimizer.bin" in hub.commits[0]["files"]
    assert "No evaluation figures" in hub.commits[0]["files"]["README.md"].decode()


def test_push_takes_the_old_branch_flag_with_a_warning_and_makes_the_branch(checkpoint, monkeypatch):
    hub = RecordingHub(monkeypatch)
    branches = []
    monkeypatch.setattr(HfApi, "create_branch", lambda api, repo_id, **kw: branches.append((repo_id, kw)))
    with pytest.warns(DeprecationWarning):
        result = CliRunner().invoke(push_command, [str(checkpoint), "o/m", "--branch", "dev",
                                                   "--commit-message", "step 2"])
    assert result.exit_code == 0, result.output
    assert "--branch is deprecated and goes in 0.4; use --revision" in result.stderr
    assert branches == [("o/m", {"repo_type": "model", "branch": "dev", "exist_ok": True})]
    (commit,) = hub.commits
    assert commit["revision"] == "dev" and commit["message"] == "step 2"


def test_card_tells_an_adapter_from_a_merged_lora_checkpoint(checkpoint, tmp_path):
    from webgym_rl.hub import PushSettings, render_model_card

    lora = tmp_path / "lora"
    shutil.copytree(checkpoint, lora)
    state = json.loads((lora / "trainer_state.json").read_text())
    state["settings"].update(lora=True, lora_rank=4, lora_alpha=8)
    (lora / "trainer_state.json").write_text(json.dumps(state))
    merged = render_model_card(PushSettings(checkpoint=lora, repo_id="o/m"))  # model weights, no adapter
    assert "library_name: transformers" in merged
    assert "LoRA rank 4, alpha 8, merged into the weights" in merged
    (lora / "adapter_config.json").write_text("{}")
    adapter = render_model_card(PushSettings(checkpoint=lora, repo_id="o/m"))
    assert "library_name: peft" in adapter and "merged" not in adapter and "a LoRA adapter on" in adapter


def test_push_refuses_an_incomplete_checkpoint_or_a_bad_rate(checkpoint, monkeypatch, tmp_path):
    hub = RecordingHub(monkeypatch)
    broken = tmp_path / "ckpt"
    shutil.copytree(checkpoint, broken)
    for name in ("processor_config.json", "preprocessor_config.json"):
        (broken / name).unlink(missing_ok=True)
    result = CliRunner().invoke(push_command, [str(broken), "o/m"])
    assert result.exit_code == 1 and "lacks its processor" in result.output and str(broken) in result.output
    result = CliRunner().invoke(push_command, [str(checkpoint), "o/m", "--success-rate", "test=42.9"])
    assert result.exit_code == 1 and "'test' = 42.9 is not in [0, 1]" in result.output
    result = CliRunner().invoke(push_command, [str(checkpoint), "o/m", "--success-rate", "test"])
    assert result.exit_code == 2 and "expected NAME=RATE" in result.output
    assert hub.repos == [] and hub.commits == []


def test_train_starts_from_a_hub_model_id_and_reads_a_hub_trajectory_dataset(tmp_path_factory, tmp_path):
    model = tiny_checkpoint(tmp_path_factory, "qwen3_vl")
    data = standard_iteration(tmp_path / "iter-0", tasks=2)
    (data / "README.md").write_text("---\nconfigs:\n- config_name: default\n  data_files:\n"
                                    "  - split: train\n    path: data/*.parquet\n---\n")
    with run_local_hub(tmp_path / "hub") as hub:
        hub.publish("model", "webgym-test/tiny-qwen3vl", model)
        hub.publish("dataset", "webgym-test/trajectories", data)
        env = hub.env(tmp_path / "hf-home", PYTHONPATH=str(REPO_ROOT))
        out = tmp_path / "out"
        result = subprocess.run(
            [str(Path(sys.executable).with_name("webgym-rl")), "train",
             "--model", "webgym-test/tiny-qwen3vl", "--data", "webgym-test/trajectories",
             "--out", str(out), "--max-steps", "1", "--log-with", "none"],
            capture_output=True, text=True, env=env, timeout=180, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    state = json.loads((out / "checkpoint-000001" / "trainer_state.json").read_text())
    assert (state["base_model"], state["base_model_revision"]) == ("webgym-test/tiny-qwen3vl", "main")
    assert state["data"][0]["id"] == "webgym-test/trajectories" and state["data"][0]["rows"] == 4
    assert re.fullmatch(r"[0-9a-f]{40}", state["data"][0]["version"])  # the commit the data came from
    assert state["counts"]["trajectories_kept"] == 2
    assert (out / "checkpoint-000001" / "processor_config.json").is_file()
    config = json.loads((out / "checkpoint-000001" / "config.json").read_text())
    assert config["model_type"] == "qwen3_vl"
