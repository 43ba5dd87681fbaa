"""The command table (cli.COMMANDS): every command explains itself, and the parser built from the table gives
each handler the arguments, defaults and errors it expects."""
from __future__ import annotations

import re

import pytest

from conftest import assert_one_line_error, cli_commands, run_cli
from minitrain import cli


def test_the_lab_names_are_the_learner_labs():
    from minitrain.lab import learner

    assert tuple(learner.LABS) == cli.LAB_NAMES


def test_every_command_and_argument_has_help():
    for command in cli.COMMANDS:
        for spec in (command, *command.actions):
            assert spec.help and spec.description, spec.name
            assert (spec.run is None) == bool(spec.actions), spec.name  # a handler, or sub-commands
            for a in spec.args:
                assert a.options.get("help"), (spec.name, a.names)
    commands = cli_commands()
    assert len(commands) == 27
    for cmd in commands:
        proc = run_cli(*cmd, "--help")
        assert proc.returncode == 0 and "usage:" in proc.stdout, cmd
        assert len(proc.stdout.splitlines()) >= 4, cmd  # a description, not a bare usage line


def test_the_help_names_every_preset_injection_and_default_truly():
    """The help writes these out (importing core.config for them would slow every --help): they must stay true."""
    from minitrain.core.config import PRESETS, TrainConfig
    from minitrain.core.injections import REGISTRY

    train, config = (run_cli(cmd, "--help", env={"COLUMNS": "10000"}).stdout for cmd in ("train", "config"))
    presets = " | ".join(PRESETS)
    assert presets in train and presets in config
    defaults = {"--seed": TrainConfig.seed, "--steps": TrainConfig.steps, "--injection-step": TrainConfig.injection_step}
    for flag, default in defaults.items():
        assert re.search(rf"{flag} \S+ .*\(default {default}\)", train), flag
    assert f"{TrainConfig.device} (default)" in train and f"{TrainConfig.precision} (default)" in train
    assert {"scale", "bad_batch", "v_corrupt"} < set(REGISTRY) and "scale | bad_batch | v_corrupt" in train


@pytest.mark.parametrize("argv, expected", [
    (["lab-run"], {"func": cli.runs.cmd_lab_run, "seed": 42, "injection": "none", "injection_step": 500,
                   "experiments": "experiments", "set": None, "from_env": False}),
    (["lab", "--jobs", "2", "--set", "steps=10"], {"func": cli.LAB.run, "jobs": 2, "set": ["steps=10"],
                                                   "seed": 42, "injection_step": 500, "no_report": False}),
    (["train", "--out", "r", "--injection-step", "7", "--set", "a=1", "--set", "b=2"],
     {"func": cli.runs.cmd_train, "out": "r", "injection_step": "7", "set": ["a=1", "b=2"], "resume": None}),
    (["learner", "init", "ana"], {"func": cli.learner.cmd_learner, "action": "init", "name": "ana",
                                  "learners": "learners"}),
    (["check", "ana", "--lab", "blind"], {"func": cli.learner.cmd_check, "lab": "blind", "solutions": None,
                                          "experiments": "experiments"}),
    (["report"], {"func": cli.reports.cmd_report, "experiments": "experiments"}),
    (["blind-runs", "spike", "--run", "02"], {"func": cli.learner.cmd_blind_runs, "lab": "spike", "run": "02",
                                              "random": "0"}),
    (["stability-md", "--check"], {"func": cli.reports.cmd_stability_md, "root": ".", "check": True}),
])
def test_the_table_parses_into_what_each_handler_reads(argv, expected):
    args = cli.build_parser().parse_args(argv)
    assert {k: getattr(args, k) for k in expected} == expected


@pytest.mark.parametrize("argv, needle", [
    (["learner"], "required: ACTION"),
    (["reveal"], "required: NAME"),
    (["blind-runs", "nope"], "invalid choice: 'nope'"),
    (["lab", "--jobs", "two"], "invalid int value: 'two'"),
    (["nosuch"], "invalid choice: 'nosuch'"),
])
def test_a_usage_error_is_one_line_and_exit_2(argv, needle):
    assert_one_line_error(run_cli(*argv), needle)


def test_no_command_prints_the_commands_and_exits_2():
    proc = run_cli()
    assert proc.returncode == 2
    assert all(f"    {c.name}" in proc.stdout for c in cli.COMMANDS)


def test_under_torchrun_only_train_runs():
    assert_one_line_error(run_cli("config", env={"WORLD_SIZE": "2"}), "runs in one process")


@pytest.mark.parametrize("argv, say", [
    (["train"], "interrupted; resume with 'minitrain train --resume DIR'"),
    (["lab-run"], "interrupted; run the same command again: finished runs are kept"),
    (["lab"], "interrupted; run the same command again: finished runs are kept"),
    (["config"], "interrupted; run the same command again\n"),
])
def test_ctrl_c_says_what_the_command_runs_next(argv, say, monkeypatch):
    """Each command's Ctrl-C line is data on its Command (`interrupted`)."""
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(next(c for c in cli.COMMANDS if c.name == argv[0]), "run", interrupted)
    proc = run_cli(*argv)
    assert proc.returncode == 130 and say in proc.stderr
