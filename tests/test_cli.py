"""The command line as users meet it: every recipe mistake is one line, exit status 2, nothing left behind;
a good recipe trains and fills its run directory."""

from __future__ import annotations

import csv
import importlib
import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from conftest import CANONICAL, ROOT, run_cli
from hypothesis import given, settings
from hypothesis import strategies as st

import rlplug
from rlplug import recipe as recipes

SHORT = ["--set", "run.total_frames=1024", "--set", "eval.every_frames=512", "--set", "eval.episodes=2"]


def write_recipe(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "recipe.toml"
    path.write_text(text)
    return path


def canonical_with(tmp_path: Path, old: str, new: str) -> Path:
    text = CANONICAL.read_text()
    assert old in text, old
    return write_recipe(tmp_path, text.replace(old, new, 1))


def assert_user_error(result, *fragments: str) -> str:
    """One line on stderr naming what the test expects, exit status 2, no traceback."""
    assert result.returncode == 2, (result.returncode, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


@pytest.mark.parametrize(
    "old, new, fragments",
    [
        ('use = "ppo"', 'use = "ppoo"', ["algorithm.use", "unknown algorithm 'ppoo'", "did you mean 'ppo'"]),
        ('use = "gym"', 'use = "ppo"', ["env.use", "'ppo' is an algorithm, not an env"]),
        ("lr = 1e-3", "lrr = 1e-3", ["algorithm.lrr", "unknown key 'lrr'", "did you mean 'lr'"]),
        ("epochs = 20", 'epochs = "twenty"', ["algorithm.epochs", "expected an integer", "'twenty'"]),
        ("epochs = 20", "epochs = -3", ["algorithm.epochs", "must be >= 1", "-3"]),
        ("gamma = 0.98", "gamma = 1.5", ["algorithm.advantage.gamma", "must be <= 1"]),
        ('id = "CartPole-v1"', 'id = "CartPole-v9"', ["env.id", "no gymnasium environment 'CartPole-v9'",
                                                       "did you mean 'CartPole-v1'"]),
        ("hidden = [64, 64]", 'hidden = [64, "x"]', ["algorithm.policy.hidden[1]", "expected an integer"]),
        ('activation = "tanh"', 'activation = "tahn"', ["algorithm.policy.activation", "did you mean 'tanh'"]),
        ("[eval]", "[evaluation]", ["evaluation", "unknown key 'evaluation' in the recipe"]),
        ("total_frames = 100_000", "total_frames = 0", ["run.total_frames", "must be >= 1"]),
        ('use = "gae"', 'use = "gym"', ["algorithm.advantage.use", "'gym' is an env, not an estimator"]),
        ("[algorithm.value_target]\nuse", "[algorithm.value_target]\nwhat", ["algorithm.value_target",
                                                                            "needs a 'use' key"]),
    ],
)
def test_recipe_mistakes_are_one_line_errors(tmp_path, old, new, fragments):
    recipe = canonical_with(tmp_path, old, new)
    out = tmp_path / "run"
    line = assert_user_error(run_cli("run", str(recipe), "--out", str(out)), str(recipe), *fragments)
    assert line.startswith("rlplug: error: ")
    assert not out.exists(), "a rejected recipe must leave no run directory"


def test_missing_file(tmp_path):
    assert_user_error(run_cli("run", str(tmp_path / "nope.toml")), "nope.toml", "no such recipe file")


def test_toml_syntax_error_names_the_line(tmp_path):
    recipe = write_recipe(tmp_path, "[run]\nseed = 0\n[env\nuse = 'gym'\n")
    assert_user_error(run_cli("run", str(recipe)), f"{recipe}:3:", "invalid TOML")


@pytest.mark.parametrize(
    "override, fragments",
    [
        ("algorithm.lr=-1", ["algorithm.lr", "must be > 0"]),
        ("algorithm.lr=fast", ["algorithm.lr", "expected a number", "'fast'"]),
        ("algorithm.policy.hiden=[8]", ["algorithm.policy.hiden", "did you mean 'hidden'"]),
        ("noequals", ["expected KEY=VALUE"]),
        ("run.seed.x=1", ["run.seed", "is a value, not a table"]),
        ("loggers.5.use=csv", ["loggers.5", "not an index"]),
        ("run.device=cuda:0", ["run.device", "not available"]),
    ],
)
@pytest.mark.slow
def test_bad_overrides_are_one_line_errors(tmp_path, override, fragments):
    out = tmp_path / "run"
    assert_user_error(run_cli("run", str(CANONICAL), "--out", str(out), "--set", override), *fragments)
    assert not out.exists()


@pytest.mark.slow
def test_frames_per_batch_must_fit_the_envs(tmp_path):
    out = tmp_path / "run"
    result = run_cli("run", str(CANONICAL), "--out", str(out), "--set", "algorithm.frames_per_batch=260")
    assert_user_error(result, "algorithm.frames_per_batch", "multiple of", "8")
    assert not out.exists()


@pytest.mark.slow
def test_existing_run_directory_is_never_overwritten(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "precious.txt").write_text("keep me")
    assert_user_error(run_cli("run", str(CANONICAL), "--out", str(out), *SHORT), "not empty")
    assert (out / "precious.txt").read_text() == "keep me"


@pytest.mark.slow
def test_short_canonical_run_fills_the_run_directory(tmp_path):
    out = tmp_path / "run"
    result = run_cli("run", str(CANONICAL), "--out", str(out), *SHORT, "--set", "algorithm.lr=3e-4",
                     "--set", "run.seed=1")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr

    summary = json.loads((out / "summary.json").read_text())
    for key in ("frames", "episodes", "eval_return_mean", "eval_return_std", "wall_time_s", "seed"):
        assert key in summary, key
    assert summary["status"] == "finished"
    assert summary["frames"] == 1024 and summary["seed"] == 1
    assert summary["episodes"] > 0 and summary["eval_return_mean"] > 0

    resolved = tomllib.loads((out / "recipe.toml").read_text())
    assert resolved["algorithm"]["use"] == "rlplug:ppo"
    assert resolved["algorithm"]["lr"] == pytest.approx(3e-4)
    assert resolved["algorithm"]["policy"]["init"] == "orthogonal", "defaults are filled in"
    assert resolved["provenance"]["components"]["algorithm.advantage"].startswith("rlplug:gae ")

    with (out / "metrics.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [int(r["frames"]) for r in rows if r["loss_objective"]][-1] == 1024
    assert any(r["eval_return_mean"] for r in rows), "evaluations are logged"
    assert (out / "checkpoint.pt").stat().st_size > 0
    # Not a terminal: plain progress lines, then the summary.
    assert "frames 1024/1024 (100%)" in result.stdout

    # The resolved recipe runs again as it is, and the same seed gives the same returns.
    again = tmp_path / "again"
    result = run_cli("run", str(out / "recipe.toml"), "--out", str(again))
    assert result.returncode == 0, result.stderr
    repeat = json.loads((again / "summary.json").read_text())
    assert (repeat["eval_return_mean"], repeat["episodes"]) == (summary["eval_return_mean"], summary["episodes"])


def test_list_groups_components_by_kind():
    result = run_cli("list")
    assert result.returncode == 0, result.stderr
    for heading, name in [("envs", "gym"), ("algorithms", "ppo"), ("estimators", "gae"), ("loggers", "csv"),
                          ("networks", "mlp")]:
        assert heading in result.stdout and name in result.stdout
    data = json.loads(run_cli("list", "--json").stdout)
    gae = next(c for c in data["components"]["estimator"] if c["name"] == "gae")
    assert gae["plugin"] == "rlplug" and gae["qualified_name"] == "rlplug:gae"
    assert {"name": "gamma", "type": "float", "default": 0.99} in gae["parameters"]


def test_unknown_command_is_a_usage_error():
    result = run_cli("fly")
    assert result.returncode == 2 and "invalid choice" in result.stderr


@settings(max_examples=25, deadline=None)
@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=20), st.randoms())
def test_aggregate_iqm_is_a_robust_middle_with_an_interval(returns, rng):
    from rlplug.run.statistics import aggregate_returns

    shuffled = returns[:]
    rng.shuffle(shuffled)
    result = aggregate_returns(dict(enumerate(returns)), reps=50)
    assert min(returns) - 1e-6 <= result["iqm"] <= max(returns) + 1e-6
    assert result["iqm"] == pytest.approx(aggregate_returns(dict(enumerate(shuffled)), reps=50)["iqm"])
    if len(returns) < 4:
        assert result["iqm"] == pytest.approx(result["mean"])
    for metric in ("iqm", "mean", "median"):
        low, high = result["ci95"][metric]
        assert min(returns) - 1e-6 <= low <= high <= max(returns) + 1e-6
    assert result["optimality_gap"] is None and result["ci95"]["optimality_gap"] is None


@pytest.mark.parametrize("text, seeds", [("0-4", [0, 1, 2, 3, 4]), ("1,3,7", [1, 3, 7]), ("5", [5]),
                                         ("0-1,4", [0, 1, 4])])
def test_seed_lists(text, seeds):
    from rlplug.cli.run import parse_seeds

    assert parse_seeds(text) == seeds


@pytest.mark.parametrize("text", ["a-b", "3-1", "1,1", "", "-2"])
def test_bad_seed_lists_are_user_errors(text):
    from rlplug.cli.run import parse_seeds
    from rlplug.errors import UserError

    with pytest.raises(UserError, match="--seeds"):
        parse_seeds(text)


@pytest.mark.slow
def test_run_with_seeds_writes_each_run_the_aggregate_and_a_plot(tmp_path):
    out = tmp_path / "seeds"
    result = run_cli("run", str(CANONICAL), "--out", str(out), "--seeds", "0-1", "--set", "run.total_frames=1024",
                     "--set", "eval.episodes=2")
    assert result.returncode == 0, result.stderr
    aggregate = json.loads((out / "aggregate.json").read_text())
    assert set(aggregate["seeds"]) == {"0", "1"}
    for seed in (0, 1):
        summary = json.loads((out / f"seed-{seed}" / "summary.json").read_text())
        assert summary["seed"] == seed and aggregate["seeds"][str(seed)] == summary["eval_return_mean"]
    assert (out / "curve.png").read_bytes()[:4] == b"\x89PNG"
    assert "interquartile mean" in result.stdout and "95% intervals" in result.stdout
    returns = sorted(aggregate["seeds"].values())
    assert aggregate["mean"] == pytest.approx(sum(returns) / 2) and aggregate["std"] >= 0
    assert aggregate["gap_threshold"] == 475  # CartPole-v1's reward_threshold in gymnasium's registry
    assert aggregate["optimality_gap"] == pytest.approx(475 - sum(min(r, 475) for r in returns) / 2)
    for metric in ("iqm", "mean", "median", "optimality_gap"):
        low, high = aggregate["ci95"][metric]  # two seeds: the bootstrap's extremes are the two runs'
        assert low <= aggregate[metric] <= high
    assert aggregate["ci95"]["mean"] == pytest.approx(returns) or returns[0] == returns[1]
    assert aggregate["bootstrap"]["reps"] >= 1000 and aggregate["bootstrap"]["library"] == "rliable"
    conflict = run_cli("run", str(CANONICAL), "--out", str(tmp_path / "x"), "--seeds", "0-1", "--set", "run.seed=3")
    assert conflict.returncode == 2 and "--seeds" in conflict.stderr


@pytest.mark.xdist_group("ray")
@pytest.mark.slow
def test_start_up_hides_ray_and_mujoco_and_leaves_the_collector_on(tmp_path):
    """A local run of rlplug's own components keeps TorchRL from importing Ray and MuJoCo (start-up cost,
    BENCHMARKS.md), yet both import as usual afterwards, and the garbage collector, paused while the run is
    built, is on again for training."""
    pytest.importorskip("ray")
    script = ("import gc, sys\nfrom rlplug.cli import main\n"
              f"status = main(['run', {str(CANONICAL)!r}, '--out', {str(tmp_path / 'run')!r}, "
              f"'--set', 'run.total_frames=256', '--set', 'eval.episodes=1'])\n"
              "print('imported during the run:', sorted({'ray', 'mujoco'} & set(sys.modules)))\n"
              "print('collector enabled:', gc.isenabled())\n"
              "import ray\nprint('ray imports after:', ray.__name__)\nsys.exit(status)\n")
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "imported during the run: []" in result.stdout
    assert "ray imports after: ray" in result.stdout
    assert "collector enabled: True" in result.stdout


def test_a_recipe_with_a_plugin_component_lets_torchrl_see_everything():
    """A plugin's component might use TorchRL's Ray replay buffer or its MuJoCo envs: nothing is hidden."""
    from rlplug import recipe as recipes
    from rlplug.cli.run import hidden_from_torchrl, packages_torchrl_need_not_load

    own = recipes.load(CANONICAL, [])
    assert sorted(packages_torchrl_need_not_load(own)) == ["mujoco", "ray"]
    assert packages_torchrl_need_not_load(recipes.load(CANONICAL, ["runner.use=ray"])) == ["mujoco"]
    with_plugin = recipes.load(CANONICAL, ['algorithm.advantage={use="mc-return"}'])
    assert packages_torchrl_need_not_load(with_plugin) == []
    with hidden_from_torchrl(["a_package_nobody_installed"]):
        with pytest.raises(ImportError):
            importlib.import_module("a_package_nobody_installed")
    assert "a_package_nobody_installed" not in sys.modules


@pytest.mark.slow
@pytest.mark.parametrize("args, env", [
    (["list"], {}),
    (["run", "missing.toml"], {}),
    (["run", str(CANONICAL), "--set", "algorithm.gamma=2"], {}),
    (["run", str(CANONICAL), "--set", "algorithm.gamma=2"], {"RLPLUG_DEBUG": "1"}),
], ids=["list", "missing-recipe", "bad-value", "bad-value-traceback"])
def test_the_suites_forked_runs_answer_as_plain_ones(args, env, tmp_path):
    """The suite's command-line runs are forks of a server that imported the libraries first
    (``tests/cli_zygote.py``): each must answer as ``python -m rlplug`` itself does, exit status, stdout and
    stderr (a traceback's last line: its frames differ)."""
    forked = run_cli(*args, env=env)
    plain = run_cli(*args, env={**env, "RLPLUG_TEST_PLAIN_SUBPROCESS": "1"})
    assert forked.returncode == plain.returncode
    assert forked.stdout == plain.stdout
    if "Traceback" in plain.stderr:
        assert "Traceback" in forked.stderr and forked.stderr.splitlines()[-1] == plain.stderr.splitlines()[-1]
    else:
        assert forked.stderr == plain.stderr


@pytest.mark.parametrize("name", ['local', '"local"', "'local'"])
def test_switching_a_component_by_its_use_key_says_how_whatever_the_quotes(name):
    """A ``TABLE.use`` override leaving the file's keys of the old component: the hint's --set is valid TOML
    with the bare name in it, whether the override wrote the name bare, in basic or in literal quotes."""
    with pytest.raises(rlplug.UserError) as caught:
        recipes.load(ROOT / "recipes" / "cartpole-impala-ray.toml", [f"runner.use={name}"])
    assert caught.value.path == "runner.workers"
    assert str(caught.value).endswith("""--set 'runner={use="local"}'""")
