"""The resident trainer: one `webgym_rl.train.Trainer` that stays up from the loop's first round to
its last, so the model, Adam's moments, the learning-rate schedule and the Accelerate state carry
over from round to round as in one continuous run, and each new version reaches the policy
endpoint without the model being read back from disk.

`ResidentTrainer` is the trainer itself, with the four things the loop asks of it:

- ``train_round(r, sources)``: train on the batches of the window (``[[round, folder], ...]``,
  oldest first), selected as `webgym_rl.samples.build_samples` does for every objective (the
  last-K window and recency ages count back from round `r`); returns the round's record;
- ``push(base_url, version)``: send the weights (a LoRA adapter folded into its base model) to a policy
  server's ``POST /weights``, in memory;
- ``save_version(version, checkpoint, adapter)``: write them as a servable checkpoint folder and/or
  a LoRA run's adapter folder (what vLLM's runtime LoRA loading takes);
- ``checkpoint(r, folder)``: a full checkpoint (weights, optimizer, schedule, RNG), which a
  rerun restores (`TrainerSetup.resume_from`).

It runs where `ResidentTrainerSettings` says (`open_trainer`): in this process (`InProcess`), or in a child
process (`TrainerProcess`: ``python -m webgym_rl.loop.resident CONTROL``), or under a launcher
(``accelerate launch ... -m webgym_rl.loop.resident CONTROL``: every rank runs the same commands
and stays up across versions; rank 0 answers). The child reads its `TrainerSetup` from
``CONTROL/setup.json`` and its commands from ``CONTROL/request-NNNNNN.json`` files, and answers in
``CONTROL/reply-NNNNNN.json`` (each file written atomically): files serve one rank or many alike.
The child dies with the loop (``PR_SET_PDEATHSIG``); its output goes to ``CONTROL/../trainer.log``.

Errors: a round with nothing to train on raises `NoTrainingDataError` (on the loop's side too);
any other failure of the child is a `LoopError` naming the command and the log file.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from webgym_core.failpoints import failpoint
from webgym_core.files import write_json_atomic
from webgym_core.settings import settings_from_dict, settings_to_dict
from webgym_rl.errors import LoopError, NoTrainingDataError
from webgym_rl.loop.services import die_with_parent
from webgym_rl.pixels import image_processor_config
from webgym_rl.samples import ListedEpisodes, build_samples, load_trajectories
from webgym_rl.settings import OptimizationSettings
from webgym_rl.train import EpochOrder, Trainer, steps_for

__all__ = ["COMMANDS", "InProcess", "ResidentTrainer", "TrainerClient", "TrainerProcess", "TrainerSetup",
           "open_trainer"]

log = logging.getLogger(__name__)

COMMANDS = ("train_round", "push", "save_version", "checkpoint", "info")
"""The methods of `ResidentTrainer` a client may call."""


@dataclass(frozen=True)
class TrainerSetup:
    """What the resident trainer is built from (written to ``CONTROL/setup.json`` for a child)."""

    model: str = ""
    """The starting model: a folder or Hub id, or (LoRA) an adapter folder to train on."""
    model_revision: str | None = None
    out: str = ""
    """The trainer's folder (TensorBoard logs under logs/)."""
    seed: int = 0
    total_steps: int | None = None
    """Optimizer steps of the whole run, when known (sizes a decaying schedule)."""
    resume_from: str | None = None
    """A full checkpoint (`ResidentTrainer.checkpoint`) to restore after building the model."""
    training: OptimizationSettings = field(default_factory=OptimizationSettings)


class ResidentTrainer:
    """A `webgym_rl.train.Trainer` that trains round after round (see the module docstring)."""

    def __init__(self, setup: TrainerSetup):
        self.setup = setup
        self.trainer = Trainer(model=setup.model, model_revision=setup.model_revision,
                               training=setup.training, out=Path(setup.out), seed=setup.seed,
                               total_steps=setup.total_steps)
        self.round = -1
        """The last round trained (-1: none)."""
        if setup.resume_from:
            state = self.trainer.load(Path(setup.resume_from))
            self.round = int(state.get("round", -1))

    # -- the commands
    def info(self) -> dict[str, Any]:
        trainer = self.trainer
        return {"round": self.round, "step": trainer.step, "num_processes": trainer.num_processes,
                "pid": os.getpid(), "base_model": trainer.base_model}

    def train_round(self, r: int, sources: list[list[Any]]) -> dict[str, Any]:
        """Train on the window `sources` (`webgym_rl.loop.phases.window`: ``[r, folder]`` for a whole
        folder, ``[r, folder, [episode id, ...]]`` for the episodes a batch manifest lists) for one
        round's optimizer steps (``max_steps``, or ``epochs`` passes over its samples); returns the
        round's record fields. Raises `NoTrainingDataError` (nothing trained) when no sample
        survives the selection."""
        t, trainer = self.setup.training, self.trainer
        began = time.perf_counter()
        listed: dict[str, dict[str, int] | None] = {}  # folder -> episode id -> round (None: all)
        for earlier, folder, *ids in sources:
            if ids:
                rounds = listed.get(str(folder)) or {}
                rounds.update(dict.fromkeys(ids[0], int(earlier)))
                listed[str(folder)] = rounds
            else:
                listed[str(folder)] = None
        with trainer.accelerator.main_process_first():
            sets = load_trajectories(list(listed), cache_dir=None)
        read = [found if rounds is None else ListedEpisodes(found, rounds)
                for found, rounds in zip(sets, listed.values(), strict=True)]
        samples = build_samples(read, t.objective, t.samples, newest=r)
        trainer.check(samples[0])
        on_policy = trainer.on_policy_check(samples)
        order = EpochOrder(samples.weights, self.setup.seed * 1000 + r)
        loader = trainer.loader(samples, order)
        steps = steps_for(len(samples), t, trainer.num_processes)
        fitted = trainer.fit(loader, order, until=trainer.step + steps)
        failpoint("trainer.train_round")  # the weights have moved on; the loop has no record of it
        self.round = r
        counts = samples.counts
        losses = [entry["loss"] for entry in fitted.log_history]
        return {"window": list(counts.iterations_kept), "weights": dict(counts.iteration_weights),
                "samples_by_round": dict(counts.samples_by_iteration),
                "data": list(listed), "steps": fitted.steps,
                "trainer_step": trainer.step, "counts": samples.counts.as_dict(), "samples": len(samples),
                "first_loss": losses[0] if losses else None, "last_loss": losses[-1] if losses else None,
                "on_policy": on_policy, "seconds": time.perf_counter() - began}

    def push(self, base_url: str, version: int) -> dict[str, Any]:
        """Send the servable weights to the policy server at `base_url` (``POST /weights``) as
        `version`, in memory (on this machine: into one of two shared-memory files kept between
        versions, whose pages need no allocating)."""
        from webgym_rl.policy_server import push_weights  # lazy: imports fastapi, starlette

        began = time.perf_counter()
        weights = self.trainer.servable_state_dict()
        if weights is not None:  # the main process sends
            push_weights(base_url, weights, version=version, reuse_buffers=True,
                         image_processor=image_processor_config(self.trainer.processor))
        self.trainer.accelerator.wait_for_everyone()
        return {"publish_s": time.perf_counter() - began}

    def save_version(self, version: int, checkpoint: str | None, adapter: str | None = None
                     ) -> dict[str, Any]:
        """Write version `version` as a servable checkpoint folder (a LoRA adapter merged), and for
        a LoRA run its adapter folder (for an endpoint that loads adapters); each is replaced
        atomically and either may be left out (None)."""
        trainer = self.trainer
        state = self._state(version=version)
        if checkpoint is not None:
            trainer.save_servable(Path(checkpoint), state)
        lora = adapter is not None and trainer.training.lora
        if lora:
            self._save_adapter(Path(adapter), state)
        return {"checkpoint": checkpoint, "adapter": adapter if lora else None}

    def checkpoint(self, r: int, folder: str) -> dict[str, Any]:
        """A full checkpoint after round `r` in `folder` (replaced atomically)."""
        target = Path(folder)
        tmp = target.with_name(f".{target.name}.tmp")
        if self.trainer.is_main_process:
            shutil.rmtree(tmp, ignore_errors=True)
        self.trainer.accelerator.wait_for_everyone()
        self.trainer.save(tmp, self._state(round=r))
        if self.trainer.is_main_process:
            if target.exists():
                shutil.rmtree(target)
            os.replace(tmp, target)
        self.trainer.accelerator.wait_for_everyone()
        return {"folder": folder}

    # -- helpers
    def _state(self, **extra: Any) -> dict[str, Any]:
        trainer = self.trainer
        return {"step": trainer.step, "round": self.round, "log_history": trainer.log_history,
                "base_model": trainer.base_model, "base_model_revision": trainer.base_revision,
                "objective": trainer.objective.value, "num_processes": trainer.num_processes,
                # accelerate launch sets ACCELERATE_* variables in the processes it starts.
                "pid": os.getpid(), "launched": "ACCELERATE_DYNAMO_BACKEND" in os.environ,
                "settings": settings_to_dict(self.setup.training), **extra}

    def _save_adapter(self, folder: Path, state: dict[str, Any]) -> None:
        trainer = self.trainer
        accelerator = trainer.accelerator
        tmp = folder.with_name(f".{folder.name}.tmp")
        if accelerator.is_main_process:
            shutil.rmtree(tmp, ignore_errors=True)
        accelerator.unwrap_model(trainer.model).save_pretrained(
            tmp, is_main_process=accelerator.is_main_process, save_function=accelerator.save,
            state_dict=accelerator.get_state_dict(trainer.model))
        if accelerator.is_main_process:
            trainer.processor.save_pretrained(tmp)
            (tmp / "trainer_state.json").write_text(json.dumps(
                {**state, "start_adapter": str(trainer.start_adapter) if trainer.start_adapter else None},
                indent=1))
            if folder.exists():
                shutil.rmtree(folder)
            os.replace(tmp, folder)
        accelerator.wait_for_everyone()

    def close(self) -> None:
        self.trainer.end()


# ------------------------------------------------------------------------------------- clients

class TrainerClient(Protocol):
    """How the loop talks to the resident trainer, wherever it runs."""

    def call(self, command: str, **arguments: Any) -> dict[str, Any]:
        """Run `command` (one of `COMMANDS`) with `arguments`; its result."""

    def close(self) -> None:
        """Stop the trainer."""


class InProcess:
    """The resident trainer in this process."""

    def __init__(self, setup: TrainerSetup):
        self.trainer = ResidentTrainer(setup)

    def call(self, command: str, **arguments: Any) -> dict[str, Any]:
        if command not in COMMANDS:
            raise LoopError(f"unknown trainer command {command!r}")
        return getattr(self.trainer, command)(**arguments)

    def close(self) -> None:
        self.trainer.close()


class TrainerProcess:
    """The resident trainer in a child process (or several ranks under a launcher), driven through
    request and reply files in `control` (see the module docstring)."""

    def __init__(self, setup: TrainerSetup, control: Path, *, launcher: str = "", poll_s: float = 0.02):
        self.control, self.poll_s = Path(control), poll_s
        if self.control.exists():
            for stale in self.control.glob("*.json"):  # requests and replies of an earlier run
                stale.unlink()
        self.control.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.control / "setup.json", settings_to_dict(setup))
        self.log_path = self.control.parent / "trainer.log"
        self._log = self.log_path.open("ab")
        module = ["-m", "webgym_rl.loop.resident", str(self.control)]
        argv = [*shlex.split(launcher), *module] if launcher else [sys.executable, *module]
        log.info("resident trainer: %s", shlex.join(argv))
        try:
            # Its own process group: stopping it also stops the ranks a launcher started.
            self._popen = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL, start_new_session=True,
                                           preexec_fn=die_with_parent)
        except OSError as exc:
            self._log.close()
            raise LoopError(f"the resident trainer could not start ({argv[0]!r}): {exc}") from exc
        self._next = 0
        self._busy = False

    def call(self, command: str, **arguments: Any) -> dict[str, Any]:
        if command not in COMMANDS:
            raise LoopError(f"unknown trainer command {command!r}")
        self._next += 1
        self._busy = True
        request = self.control / f"request-{self._next:06d}.json"
        reply_path = self.control / f"reply-{self._next:06d}.json"
        write_json_atomic(request, {"command": command, "arguments": arguments})
        while not reply_path.exists():
            if self._popen.poll() is not None:
                raise LoopError(f"the resident trainer exited with status {self._popen.returncode} during "
                                f"{command}; last output ({self.log_path}):\n{self._tail()}")
            time.sleep(self.poll_s)
        self._busy = False
        reply = json.loads(reply_path.read_text(encoding="utf-8"))
        request.unlink(missing_ok=True)
        reply_path.unlink(missing_ok=True)
        if "error" in reply:
            kind = NoTrainingDataError if reply["kind"] == "NoTrainingDataError" else LoopError
            raise kind(f"{reply['error']}" if kind is NoTrainingDataError else
                       f"the resident trainer failed in {command}: {reply['kind']}: {reply['error']} "
                       f"(log: {self.log_path})")
        return reply["result"]

    def _tail(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")[-2000:]

    def close(self) -> None:
        stop = self.control / f"request-{self._next + 1:06d}.json"
        try:
            if self._popen.poll() is None and self._busy:
                # Interrupted in the middle of a command (Ctrl-C, a failure elsewhere): its work is
                # lost anyway (a rerun resumes from the newest full checkpoint); do not wait for it.
                os.killpg(self._popen.pid, signal.SIGKILL)
                self._popen.wait(timeout=30)
            elif self._popen.poll() is None:
                write_json_atomic(stop, {"command": "stop"})
                try:
                    self._popen.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    os.killpg(self._popen.pid, signal.SIGKILL)
                    self._popen.wait(timeout=30)
        finally:
            stop.unlink(missing_ok=True)
            self._log.close()


def open_trainer(setup: TrainerSetup, control: Path, *, in_process: bool, launcher: str = ""
                 ) -> TrainerClient:
    """The resident trainer, in this process or a child (under `launcher` when given)."""
    if in_process and not launcher:
        return InProcess(setup)
    return TrainerProcess(setup, control, launcher=launcher)


# ----------------------------------------------------------------------------- the child's side

def _serve(control: Path, poll_s: float = 0.02) -> None:
    """Every rank: build the trainer, then run the commands of the request files in order; rank 0
    writes the replies."""
    setup = settings_from_dict(TrainerSetup, json.loads((control / "setup.json").read_text()))
    trainer = ResidentTrainer(setup)
    main = trainer.trainer.is_main_process
    n = 1
    while True:
        request = control / f"request-{n:06d}.json"
        if not request.exists():
            time.sleep(poll_s)
            continue
        body = json.loads(request.read_text(encoding="utf-8"))
        if body["command"] == "stop":
            break
        try:
            with contextlib.redirect_stdout(sys.stderr):
                reply: dict[str, Any] = {"result": getattr(trainer, body["command"])(**body["arguments"])}
        except Exception as exc:  # reported to the loop, which decides (no data: keep the weights)
            log.exception("%s failed", body["command"])
            reply = {"error": " ".join(str(exc).split()), "kind": type(exc).__name__}
        if main:
            write_json_atomic(control / f"reply-{n:06d}.json", reply)
        n += 1
    trainer.close()


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    _serve(Path(sys.argv[1]))
