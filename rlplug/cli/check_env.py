"""``python -m rlplug check-env RECIPE``: the recipe's env built as a run builds it, stepped with random actions
through resets and time limits on every copy, and each broken promise reported in one line
(:mod:`rlplug.run.check_env`, :mod:`rlplug.core.env_check`)."""

from __future__ import annotations

import argparse
from pathlib import Path

#: Exit status where the env broke a promise: 2, as for a user error (the problems on stdout, an error on stderr).
EXIT_PROBLEMS = 2
#: The most steps of each copy: far beyond any episode a check needs to cross.
MAX_STEPS = 10_000_000


def steps_value(text: str) -> int:
    from rlplug.cli.eval import positive_int

    value = positive_int(text)
    if value > MAX_STEPS:
        raise argparse.ArgumentTypeError(f"expected at most {MAX_STEPS} steps of each copy, got {value}")
    return value


def add_commands(subparsers) -> None:
    """Adds ``check-env``."""
    from rlplug.cli.eval import seed_value

    parser = subparsers.add_parser(
        "check-env", help="check a recipe's env against its specs: random steps through resets and time limits",
        description="Build the recipe's env exactly as a run builds it ([env] with num_envs, transforms, "
                    "normalisation), step it with random actions from its action spec through resets and time "
                    "limits on every copy, and report each broken promise in one line: TorchRL's "
                    "check_env_specs, entries missing or not of their spec's shape or dtype, NaN or infinity, "
                    "observations and rewards outside their spec's bounds, done not terminated | truncated, "
                    "episodes past the time limit the env claims, copies that do not reset, seeding that does "
                    "not repeat, an array road that parts from the TensorDict road.",
        epilog="exit status: 0 no problems found; 2 the env broke a promise (each problem one line, on stdout, "
               "after the summary) or the recipe or the command line is wrong (one 'rlplug: error:' line on "
               "stderr naming the file and key)")
    parser.add_argument("recipe", type=Path, help="the recipe TOML file")
    parser.add_argument("--steps", type=steps_value, default=1000, metavar="N",
                        help="random steps of each copy (default: 1000)")
    parser.add_argument("--seed", type=seed_value, metavar="S", help="seed of the envs and the random actions "
                        "(default: the recipe's run.seed)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a recipe value, as rlplug run takes it, e.g. --set env.num_envs=4 "
                             "(repeatable)")
    parser.set_defaults(handler=cmd_check_env)


def cmd_check_env(args: argparse.Namespace) -> int:
    from rlplug import recipe as recipes
    from rlplug.cli.run import hidden_from_torchrl, packages_torchrl_need_not_load
    from rlplug.registry import get_registry

    get_registry().report_failures()
    recipe = recipes.load(args.recipe, args.overrides)
    with hidden_from_torchrl(packages_torchrl_need_not_load(recipe)):
        from rlplug.core.env_check import lines
        from rlplug.run.check_env import check_recipe_env

    report = check_recipe_env(recipe, steps=args.steps, seed=args.seed)
    for line in lines(report):
        print(line)
    return 0 if report.ok else EXIT_PROBLEMS
