"""Inputs an adversary (or a slip of the keyboard) gives the command line: each is refused in one line that
says where and what to do, exit status 2, no traceback, nothing left behind; none runs code or floods the
terminal. Through the real CLI in a subprocess; each stops at validation or at building, so they are quick."""

from __future__ import annotations

import pytest
from conftest import CANONICAL, ROOT, run_cli
from test_cli import assert_user_error

DQN = ROOT / "recipes" / "cartpole-dqn.toml"


def nested(depth: int, inner: str, opening: str, closing: str) -> str:
    return opening * depth + inner + closing * depth


def test_an_env_id_never_imports_a_module(tmp_path):
    """``module:Id`` makes gymnasium import the module: a recipe is data, so such an id is refused first."""
    marker = tmp_path / "imported"
    (tmp_path / "sneaky.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    result = run_cli("run", str(CANONICAL), "--out", str(tmp_path / "run"), "--set", "env.id=sneaky:CartPole-v1",
                     env={"PYTHONPATH": str(tmp_path)})
    assert_user_error(result, "env.id", "names a module to import")
    assert not marker.exists(), "the module named in env.id must not be imported"
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("how", ["array", "table", "set-array", "set-key"])
def test_deep_nesting_is_one_line_not_a_recursion_error(tmp_path, how):
    recipe = tmp_path / "deep.toml"
    if how == "array":
        recipe.write_text(CANONICAL.read_text() + f"\n[extra]\nv = {nested(3000, '1', '[', ']')}\n")
    elif how == "table":
        recipe.write_text(CANONICAL.read_text() + f"\n[extra]\nv = {nested(3000, 'a = 1', '{ a = ', ' }')}\n")
    else:
        recipe.write_text(CANONICAL.read_text())
    extra = {"set-array": ["--set", f"algorithm.lr={nested(3000, '1', '[', ']')}"],
             "set-key": ["--set", ".".join(["a"] * 5000) + "=1"]}.get(how, [])
    result = run_cli("run", str(recipe), "--out", str(tmp_path / "run"), *extra)
    assert_user_error(result, "nested too deeply")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("override, fragments", [
    ("loggers.\u00b2.use=csv", ["loggers", "not an index of this list"]),  # '²'.isdigit() is True
    ("algorithm.policy.hidden=[1000000000000]", ["GiB", "use smaller layers"]),
    ("run.device=meta", ["run.device", "not a device rlplug trains on"]),
    ("run.total_frames=1e18", ["run.total_frames", "write the integer itself"]),
    ("algorithm.num_minibatches=100000", ["algorithm.num_minibatches", "cannot be cut from a batch"]),
    ('env.wrappers=[{name="TransformReward", kwargs={func="abs"}}]', ["env.wrappers[0]", "takes a function"]),
])
def test_absurd_values_are_refused_with_the_reason(tmp_path, override, fragments):
    result = run_cli("run", str(CANONICAL), "--out", str(tmp_path / "run"), "--set", override)
    assert_user_error(result, *fragments)
    assert not (tmp_path / "run").exists()


def test_a_replay_buffer_smaller_than_a_batch_is_refused(tmp_path):
    result = run_cli("run", str(DQN), "--out", str(tmp_path / "run"), "--set", "algorithm.replay_buffer.capacity=10")
    assert_user_error(result, "algorithm.replay_buffer.capacity", "never holds a batch of batch_size = 64")
    assert not (tmp_path / "run").exists()


def test_seed_ranges_are_bounded_before_any_list_is_made(tmp_path):
    result = run_cli("run", str(CANONICAL), "--out", str(tmp_path / "runs"), "--seeds", "0-99999999999")
    assert_user_error(result, "--seeds", "at most 1000 seeds")


def test_very_many_envs_get_a_one_line_warning(tmp_path):
    result = run_cli("run", str(CANONICAL), "--out", str(tmp_path / "run"), "--set", "env.num_envs=1030",
                     "--set", "algorithm.frames_per_batch=1000")
    warning, error = [line for line in result.stderr.splitlines() if line.strip()]
    assert warning.startswith("rlplug: warning: env.num_envs = 1030") and "rarely meant" in warning
    assert result.returncode == 2 and "multiple of" in error
    # stepped as one array, many copies are what "vector" is for: no warning
    result = run_cli("run", str(CANONICAL), "--out", str(tmp_path / "run"), "--set", "env.num_envs=1030",
                     "--set", "algorithm.frames_per_batch=1000", "--set", "env.vectorization=vector")
    [error] = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and "multiple of" in error


def test_a_minibatch_larger_than_the_batch_is_the_whole_batch_with_a_warning(tmp_path):
    result = run_cli("run", str(CANONICAL), "--out", str(tmp_path / "run"), "--set", "algorithm.minibatch_size=100000",
                     "--set", "algorithm.frames_per_batch=250")  # the warning comes first; the error stops the run
    warning, error = [line for line in result.stderr.splitlines() if line.strip()]
    assert warning == ("rlplug: warning: algorithm.minibatch_size = 100000 is larger than the batch "
                       "(frames_per_batch = 250): each minibatch is the whole batch")
    assert result.returncode == 2 and "multiple of" in error


def test_init_refuses_an_algorithm_the_env_cannot_run():
    result = run_cli("init", "dqn", "--env", "Pendulum-v1")
    assert_user_error(result, "--env Pendulum-v1", "dqn is for discrete actions", "ddpg, td3 or sac")
    assert result.stdout == ""


def test_an_image_observation_under_mlp_names_the_network_key(tmp_path):
    result = run_cli("run", str(CANONICAL), "--out", str(tmp_path / "run"),
                     "--set", 'env.kwargs={render_mode="rgb_array"}',
                     "--set", 'env.wrappers=[{name="AddRenderObservation"}]',
                     env={"SDL_VIDEODRIVER": "dummy", "XDG_RUNTIME_DIR": str(tmp_path)})
    assert_user_error(result, "algorithm.policy", "mlp reads one-dimensional observations", "(400, 600, 3)",
                      "the gym env's flatten_observations = true")
    assert not (tmp_path / "run").exists()


def test_a_huge_id_is_shortened_and_invisible_controls_are_escaped(tmp_path):
    huge = tmp_path / "huge.toml"
    huge.write_text(CANONICAL.read_text().replace('id = "CartPole-v1"', f'id = "{"A" * 20_000_000}"', 1))
    line = assert_user_error(run_cli("run", str(huge), "--out", str(tmp_path / "a")), "env.id", "more characters")
    assert len(line) < 2000
    result = run_cli("run", str(CANONICAL), "--out", str(tmp_path / "b"), "--set", "env.id=Cart\u202ePole-v1")
    line = assert_user_error(result, "env.id", "\\u202e")
    assert "\u202e" not in result.stderr
