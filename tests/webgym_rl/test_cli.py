"""webgym_rl.cli: the group's help names what the commands offer, from the lists that define it."""

from __future__ import annotations

from click.testing import CliRunner

from webgym_rl.cli import main
from webgym_rl.samples import Objective


def test_the_help_names_every_training_objective():
    names = [objective.value for objective in Objective]
    assert len(names) >= 3
    listed = f"({', '.join(names[:-1])} or {names[-1]})"
    assert listed in " ".join(CliRunner().invoke(main, ["--help"], terminal_width=200).output.split())
    # the same once the command is loaded (its docstring's first line is not what the group lists),
    # and in the command's own help
    train = CliRunner().invoke(main, ["train", "--help"], terminal_width=200)
    assert train.exit_code == 0 and listed in " ".join(train.output.split())
    assert listed in " ".join(CliRunner().invoke(main, ["--help"], terminal_width=200).output.split())
