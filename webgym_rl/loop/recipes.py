"""Recipes as files, and the dry run that checks one against a task set before anything trains.

A recipe is a YAML file of `LoopSettings` keys (the keys ``--config`` reads). The toolkit ships
these in ``webgym_rl/loop/recipes/`` (``webgym-rl recipes`` lists them):

- ``published``: the published WebGym recipe (synchronous filtered BC, Qwen3-VL-8B);
- ``published-async``: the same recipe on the asynchronous schedule;
- ``miniwob-cpu``: the CPU MiniWoB++ recipe of ``webgym demo`` and ``benchmarks/learning_miniwob.py``.

``webgym-rl loop --config NAME`` takes a shipped recipe by name (or any YAML file by path); flags
override it. A recipe's first comment lines describe it.

`plan(settings)` is the dry run (``webgym-rl loop --dry-run``): it refuses what cannot work (the
checks `webgym_rl.loop.run.check_recipe` makes before a real run) and describes what would happen:
tasks per split and difficulty, the sampler's first batch, the judge, the endpoints it would call
and whether they answer, the horizons, the schedule and the trainer, and what a rerun in the
output folder would resume.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from webgym_core.settings import read_settings_file, settings_from_dict
from webgym_core.sources import looks_like_path
from webgym_data.loading import load_tasks
from webgym_data.sampler import TaskSampler
from webgym_rl.errors import LoopSettingsError
from webgym_rl.loop.state import STATE_FILE, load_state
from webgym_rl.samples import Objective
from webgym_rollout.tasks.kind import task_kind
from webgym_rollout.tasks.miniwob import MiniWobTask

if TYPE_CHECKING:
    from webgym_rl.loop.settings import LoopSettings

__all__ = ["RECIPES_DIR", "Plan", "describe_recipe", "load_recipe", "plan", "recipe_names", "recipe_path"]

RECIPES_DIR = Path(__file__).resolve().parent / "recipes"


def recipe_names() -> list[str]:
    """The shipped recipes, by name."""
    return sorted(p.stem for p in RECIPES_DIR.glob("*.yaml"))


def recipe_path(name_or_file: str) -> Path:
    """A YAML file given by path, or a shipped recipe given by name; raises `LoopSettingsError`
    naming the recipes there are."""
    path = Path(name_or_file)
    if path.is_file():
        return path
    shipped = RECIPES_DIR / f"{name_or_file}.yaml"
    if shipped.is_file():
        return shipped
    raise LoopSettingsError(f"--config {name_or_file}: no such file, and no recipe of that name (shipped "
                            f"recipes: {', '.join(recipe_names())}; `webgym-rl recipes` describes them)")


def load_recipe(name_or_file: str, **changes: Any) -> LoopSettings:
    """`LoopSettings` from a recipe (`recipe_path`) with `changes` in its YAML keys on top (nested
    groups merged: ``policy={"model": "tiny"}`` changes only that key of the recipe's ``policy``)."""
    from webgym_rl.loop.settings import LoopSettings  # lazy: imports the rollout (playwright)

    path = recipe_path(name_or_file)
    values = read_settings_file(path)
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(values.get(key), dict):
            values[key] = {**values[key], **value}
        else:
            values[key] = value
    return settings_from_dict(LoopSettings, values, source=str(path))


def describe_recipe(name: str) -> str:
    """The first comment lines of a shipped recipe, joined."""
    lines = []
    for line in recipe_path(name).read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("# ").rstrip())
    return " ".join(lines)


@dataclass
class Plan:
    """What a loop would do, section by section (`render` gives the text the CLI prints)."""

    sections: dict[str, list[str]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def add(self, section: str, line: str) -> None:
        self.sections.setdefault(section, []).append(line)

    def render(self) -> str:
        out = []
        for section, lines in self.sections.items():
            out.append(f"{section}:")
            out.extend(f"  {line}" for line in lines)
        if self.warnings:
            out.append("warnings:")
            out.extend(f"  ! {line}" for line in self.warnings)
        return "\n".join(out)


def _answers(url: str, token: str | None = None) -> str:
    """Whether `url` answers a GET within 3 s (its status), or why not."""
    import httpx  # optional: httpx

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        reply = httpx.get(url, timeout=3.0, headers=headers)
    except httpx.HTTPError as exc:
        return f"does not answer ({type(exc).__name__})"
    return "answers" if reply.status_code < 400 else f"answers HTTP {reply.status_code}"


def _levels(tasks) -> str:
    counts = Counter(task.difficulty_level for task in tasks)
    return ", ".join(f"{level} {counts[level]}" for level in ("easy", "medium", "hard", "unknown")
                     if counts[level]) or "none"


def plan(settings: LoopSettings) -> Plan:
    """The dry run of `settings` (see the module docstring); raises what a real run would refuse."""
    from webgym_rl.loop.run import check_recipe  # lazy: imports the rollout (playwright)

    check_recipe(settings)
    result = Plan()
    _plan_model(settings, result)
    first = _plan_tasks(settings, result)
    _plan_overlap(settings, result)
    _plan_judge(settings, result)
    _plan_endpoints(settings, result)
    _plan_horizons(settings, result)
    _plan_schedule(settings, result, len(first))
    _plan_training(settings, result)
    _plan_resume(settings, result)
    return result


def _plan_model(settings: LoopSettings, result: Plan) -> None:
    """The starting model: a local folder must exist (refused otherwise); a Hub id is not fetched."""
    model = settings.model
    folder = Path(model).expanduser()
    if folder.is_dir():
        if (folder / "config.json").is_file():
            result.add("model", f"{model}: a local checkpoint folder")
        elif (folder / "adapter_config.json").is_file():
            result.add("model", f"{model}: a local LoRA adapter folder")
        else:
            result.add("model", f"{model}: a local folder")
            result.warnings.append(f"--model {model} has no config.json (nor adapter_config.json): not a "
                                   "model checkpoint folder")
    elif folder.exists():
        raise LoopSettingsError(f"--model {model} is a file; give a checkpoint folder or a Hub model id")
    elif looks_like_path(model):
        raise LoopSettingsError(f"--model {model}: no such folder (a local path, so not looked up on the "
                                "Hub); give a checkpoint folder (webgym-rl tiny-model writes a tiny one) "
                                "or a Hub model id such as Qwen/Qwen3-VL-8B-Instruct")
    else:
        revision = f" at revision {settings.model_revision}" if settings.model_revision else ""
        result.add("model", f"{model}{revision}: a Hub model id (not a local folder); a dry run does not "
                            "fetch it, so whether it exists and loads is checked when the loop starts")
        if folder.parent.name and folder.parent.is_dir():
            result.warnings.append(f"--model {model} is no local folder, though {folder.parent} is one: "
                                   "if you meant a folder there, it is missing (read as a Hub id)")


def _plan_overlap(settings: LoopSettings, result: Plan) -> None:
    """Warn when the evaluation tasks are (some of) the training tasks: the evaluation would then
    measure what the policy was trained on."""
    if not settings.eval_every:
        return
    source = settings.eval_tasks or settings.tasks
    train = {t.task_id for t in load_tasks(settings.tasks, split=settings.split)}
    evaluated = {t.task_id for t in load_tasks(source, split=settings.eval_split)}
    shared = train & evaluated
    if not shared:
        return
    where = f"{source} [{settings.eval_split}]"
    if shared == evaluated:
        what = f"the evaluation tasks {where} are all training tasks ({settings.tasks} [{settings.split}])"
    else:
        what = (f"{len(shared)} of the {len(evaluated)} evaluation tasks {where} are also training tasks "
                f"({settings.tasks} [{settings.split}])")
    result.warnings.append(f"{what}: the evaluation measures tasks the policy trains on; give held-out "
                           "tasks with --eval-tasks, or evaluate another split (--eval-split)")


def _plan_tasks(settings: LoopSettings, result: Plan) -> list:
    """Tasks: per split and difficulty, and what the samplers draw; returns the first batch."""
    for split in ("train", "test"):
        with contextlib.suppress(Exception):  # a task file has no splits: read once, below
            if not Path(settings.tasks).is_dir():
                break
            tasks = load_tasks(settings.tasks, split=split)
            result.add("tasks", f"{settings.tasks} [{split}]: {len(tasks)} tasks ({_levels(tasks)})")
    train = load_tasks(settings.tasks, split=settings.split)
    if not Path(settings.tasks).is_dir():
        result.add("tasks", f"{settings.tasks}: {len(train)} tasks ({_levels(train)})")
    sampler = TaskSampler(train, settings.sampler)
    kinds = Counter(task_kind(t).name for t in sampler.tasks)
    first = sampler.batch(0)
    result.add("tasks", f"train sampler {settings.sampler.kind}: {len(sampler.tasks)} tasks pass its filters "
                        f"({', '.join(f'{k} {n}' for k, n in sorted(kinds.items()))}); the first batch has "
                        f"{len(first)} tasks x {settings.rollout.attempts} attempts ({_levels(first)}): "
                        f"{', '.join(t.task_id for t in first[:5])}{' ...' if len(first) > 5 else ''}")
    if settings.eval_every:
        source = settings.eval_tasks or settings.tasks
        evaluated = TaskSampler(load_tasks(source, split=settings.eval_split), settings.eval_sampler).batch(0)
        result.add("tasks", f"evaluation: {len(evaluated)} tasks of {source} [{settings.eval_split}] "
                            f"({_levels(evaluated)}) every {settings.eval_every} versions at temperature "
                            f"{settings.eval_temperature:g}, {settings.eval_horizons} horizons")
    else:
        result.add("tasks", "evaluation: none (--eval-every 0)")
    if settings.bootstrap_policy == "random" and kinds.get("web"):
        result.warnings.append("bootstrap_policy random never answers: web tasks judged by a rubric give its "
                               "rollouts no success, so the first round trains on the MiniWoB tasks only")
    return first


def _plan_judge(settings: LoopSettings, result: Plan) -> None:
    """The judge, and whether its endpoint answers."""
    judge = settings.judge
    if judge.kind == "rubric":
        result.add("judge", f"rubric, {judge.endpoint.model} at {judge.endpoint.base_url}: "
                            f"{_answers(judge.endpoint.base_url.rstrip('/') + '/models')}; at most "
                            f"{judge.max_screenshots} screenshots per question")
    elif judge.kind == "site":
        result.add("judge", "site: each episode's facts checked against the ground truth of the site "
                            "server the loop starts")
        from webgym_rl.loop.run import site_judge_problem  # lazy: imports the rollout (playwright)

        problem = site_judge_problem(settings)
        if problem:
            result.warnings.append(f"--judge {problem}")
    else:
        result.add("judge", "programmatic: the environment's own reward (MiniWoB pages)")


def _plan_endpoints(settings: LoopSettings, result: Plan) -> None:
    """The policy endpoint, how new versions reach it, and the browsers."""
    policy = settings.policy
    if policy.endpoint.base_url:
        how = f"restarted with --policy-command {policy.command!r}" if policy.command else \
            f"switched by --policy-updater {policy.updater}"
        result.add("endpoints", f"policy {policy.served_name} at {policy.endpoint.base_url}: "
                                f"{_answers(policy.endpoint.base_url.rstrip('/') + '/models')}; {how}")
    else:
        result.add("endpoints", f"policy: the CPU policy server the loop starts (served as "
                                f"{policy.served_name}, at most {policy.max_new_tokens} new tokens)")
    publish = settings.trainer.publish
    if publish == "auto":
        publish = "folder" if policy.endpoint.base_url or policy.command else "memory"
    publishing = "in memory (POST /weights)" if publish == "memory" else "as folders"
    result.add("endpoints", f"new versions published {publishing}")
    if settings.servers:
        for url in settings.servers:
            result.add("endpoints", f"browser server {url}: {_answers(url.rstrip('/') + '/health')}")
    elif settings.fleet.enabled:
        fleet = settings.fleet
        result.add("endpoints", f"browser fleet {fleet.fleet} on Ray at {fleet.ray_address}")
    else:
        slots = settings.pool.browsers * settings.pool.contexts_per_browser
        result.add("endpoints", f"browsers: a browser server the loop starts on 127.0.0.1 "
                                f"({settings.pool.browsers} Chromium x {settings.pool.contexts_per_browser} "
                                "contexts)")
        if settings.rollout.concurrency > slots:
            result.warnings.append(f"{settings.rollout.concurrency} episodes in flight (--concurrency) on "
                                   f"{slots} browser contexts: episodes wait for a context; give --servers, "
                                   "or more --pool-browsers / --pool-contexts-per-browser")


def _plan_horizons(settings: LoopSettings, result: Plan) -> None:
    """Horizons and the agent."""
    policy = settings.policy
    env = settings.env
    agent = policy.agent
    miniwob = env.horizons.get("miniwob", MiniWobTask.default_horizon)
    result.add("horizons", f"train {'/'.join(map(str, env.train_horizons))}, test "
                           f"{'/'.join(map(str, env.test_horizons))} steps (easy/medium/hard); MiniWoB "
                           f"{miniwob}; prompt {agent.variant} with {agent.full_rounds} image "
                           f"rounds; viewport {env.viewport}")


def _plan_schedule(settings: LoopSettings, result: Plan, first_batch: int) -> None:
    """Sync or async, and how many episodes each version rolls out."""
    if settings.schedule == "sync":
        result.add("schedule", f"sync: {settings.iterations} rounds, each rolls out its batch with "
                               f"{settings.rollout.concurrency} episodes in flight, then trains")
    else:
        a = settings.async_loop
        batch = a.batch_episodes or first_batch * settings.rollout.attempts
        result.add("schedule", f"async: {settings.iterations} versions, {batch} episodes each, max staleness "
                               f"{a.max_staleness}, {a.overprovision} over-provisioned, "
                               f"{settings.rollout.concurrency} episodes in flight")


def _plan_training(settings: LoopSettings, result: Plan) -> None:
    """The objective, the samples it keeps, and where the trainer runs."""
    t, selection = settings.training, settings.training.samples
    ages = range(selection.last_k_iterations or 1)
    weights = ", ".join(f"{(age + 1) ** -selection.recency_power:.2f}" for age in ages)
    steps = f"{t.max_steps} optimizer steps" if t.max_steps else \
        f"{t.epochs:g} epoch{'' if t.epochs == 1 else 's'} of optimizer steps"
    if Objective(t.objective) is Objective.FILTERED_BC:
        noop = "dropped" if selection.drop_same_as_next else "kept"
    else:
        noop = {"penalise": "kept with a negative advantage only", "drop": "dropped",
                "keep": "kept"}[selection.policy_gradient_no_ops]
    shape = f"LoRA rank {t.lora_rank}" if t.lora else "full fine-tune"
    last_k = selection.last_k_iterations or "all"
    result.add("training", f"{Objective(t.objective).value} on the last {last_k} "
                           f"rounds (weights by age {weights}), reward >= {selection.success_threshold:g}, "
                           f"no-op steps {noop}; {steps} per round at lr {t.learning_rate:g} "
                           f"({t.lr_scheduler}); {shape}")
    where = settings.trainer.train_launcher or ("a child process" if settings.trainer.train_process
                                                else "this process")
    result.add("training", f"resident trainer in {where}; full checkpoint every "
                           f"{settings.trainer.checkpoint_every} versions and at the end")


def _plan_resume(settings: LoopSettings, result: Plan) -> None:
    """A new loop folder, or what resuming it would restore and train again."""
    state_file = settings.out_dir / STATE_FILE
    if not state_file.exists():
        result.add("resume", f"{settings.out}: new loop folder")
    else:
        state = load_state(settings)
        last = state.checkpoints[-1] if state.checkpoints else None
        done = last.round if last is not None else -1
        later = sorted(r for r, record in state.rounds.items() if r > done and record.train is not None)
        line = (f"{settings.out}: {len(state.live_versions) - 1} versions published; the trainer would "
                f"restore {last.folder if last else 'the starting model'}")
        if later:
            line += f" and train rounds {later} again"
        result.add("resume", line + f"; next round {done + 1} of {settings.iterations}")
