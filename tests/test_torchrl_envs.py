"""Any TorchRL env: observation entries concatenated for the networks (``in_keys`` to choose), unreadable
entries refused in one line, TorchRL's PendulumEnv and DeepMind Control as env plugins, and the array road
as a capability any env may offer (collected without a TensorDict per step) or not (through TensorDicts)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from conftest import ROOT, run_cli
from tensordict import TensorDict
from torchrl.data import Bounded, Categorical, Composite, Unbounded
from torchrl.envs import EnvBase
from torchrl.envs.utils import check_env_specs

import rlplug
from rlplug import recipe as recipes
from rlplug.core.collect import Collector
from rlplug.core.observations import one_observation
from rlplug.errors import UserError
from rlplug.registry import manager
from rlplug.run.evaluation import evaluate
from rlplug.run.trainer import Run

SMALL = ["run.total_frames=256", "eval.episodes=2", "eval.every_frames=0", "run.checkpoint_every_frames=0"]


def train(tmp_path, recipe: str, *overrides: str) -> dict:
    """A whole run of ``recipes/RECIPE`` on a small budget; its summary."""
    summary = Run.build(recipes.load(ROOT / "recipes" / recipe, [*SMALL, *overrides]), tmp_path / "run").train()
    assert summary["status"] == "finished" and summary["frames"] >= 256, summary
    assert np.isfinite(summary["eval_return_mean"]), summary
    return summary


def done_spec(n: int) -> Composite:
    flag = Categorical(2, shape=(n, 1), dtype=torch.bool)
    return Composite(done=flag, terminated=flag.clone(), truncated=flag.clone(), shape=(n,))


class Drift(EnvBase):
    """A third party's env: a point drifting on a plane, pushed by a 1-D action. Observation entries:
    ``position`` (float64 [2]), ``speed`` (float32 scalar), ``count`` (int64 [1]), with ``frame`` (uint8
    [4, 4, 3]) as well when ``image``; episodes truncated after ``horizon`` steps."""

    def __init__(self, num_envs: int = 2, horizon: int = 5, image: bool = False):
        super().__init__(batch_size=[num_envs])
        n, self.horizon = num_envs, horizon
        entries = {"position": Unbounded(shape=(n, 2), dtype=torch.float64),
                   "speed": Unbounded(shape=(n,), dtype=torch.float32),
                   "count": Unbounded(shape=(n, 1), dtype=torch.int64)}
        if image:
            entries["frame"] = Unbounded(shape=(n, 4, 4, 3), dtype=torch.uint8)
        self.observation_spec = Composite(entries, shape=(n,))
        self.action_spec = Bounded(-1.0, 1.0, shape=(n, 1))
        self.reward_spec = Unbounded(shape=(n, 1))
        self.full_done_spec = done_spec(n)
        self.position, self.count = torch.zeros(n, 2, dtype=torch.float64), torch.zeros(n, 1, dtype=torch.int64)

    def _observe(self) -> dict:
        data = {"position": self.position.clone(), "speed": self.position.norm(dim=-1).float(),
                "count": self.count.clone()}
        if "frame" in self.observation_spec.keys():
            data["frame"] = torch.zeros(*self.batch_size, 4, 4, 3, dtype=torch.uint8)
        return data

    def _reset(self, tensordict=None, **kwargs):
        reset = torch.ones(self.batch_size, dtype=torch.bool) if tensordict is None or "_reset" not in tensordict \
            else tensordict.get("_reset").reshape(self.batch_size)
        self.position[reset] = torch.rand(int(reset.sum()), 2, generator=self.rng, dtype=torch.float64)
        self.count[reset] = 0
        done = torch.zeros(*self.batch_size, 1, dtype=torch.bool)
        return TensorDict({**self._observe(), "done": done, "terminated": done.clone(), "truncated": done.clone()},
                          batch_size=self.batch_size)

    def _step(self, tensordict):
        self.position = self.position + 0.1 * tensordict.get("action").double()
        self.count += 1
        truncated = self.count >= self.horizon
        reward = -self.position.norm(dim=-1, keepdim=True).float()
        return TensorDict({**self._observe(), "reward": reward, "done": truncated.clone(),
                           "terminated": torch.zeros_like(truncated), "truncated": truncated},
                          batch_size=self.batch_size)

    def _set_seed(self, seed):
        self.rng = torch.Generator().manual_seed(int(seed or 0))


def test_several_entries_become_one_float_observation_and_in_keys_choose():
    env = one_observation(Drift(num_envs=3))
    check_env_specs(env, seed=0)
    spec = env.observation_spec["observation"]
    assert spec.shape == (3, 3) and spec.dtype == torch.float32  # position's 2 and speed's 1; not the count
    env.set_seed(1)
    state = env.reset()
    expected = torch.cat([state.get("position").float(), state.get("speed").unsqueeze(-1)], -1)
    torch.testing.assert_close(state.get("observation"), expected)

    chosen = one_observation(Drift(num_envs=3), ["speed"])
    assert chosen.observation_spec["observation"].shape == (3,)  # one entry keeps its shape
    chosen.set_seed(1)
    torch.testing.assert_close(chosen.reset().get("observation"), state.get("speed"))


@pytest.mark.parametrize("in_keys, fragments", [
    (["count"], ["'count'", "int64"]),
    (["speeed"], ["'speeed'", "did you mean 'speed'"]),
])
def test_an_entry_no_network_reads_is_one_line(in_keys, fragments):
    with pytest.raises(UserError) as caught:
        one_observation(Drift(image=True), in_keys)
    message = str(caught.value)
    assert "\n" not in message and message.startswith("env.in_keys: ")
    for fragment in fragments:
        assert fragment in message, message


def test_an_env_with_no_readable_entry_is_one_line_naming_them():
    env = Drift()
    env.observation_spec = Composite({"count": env.observation_spec["count"]}, shape=env.batch_size)
    with pytest.raises(UserError) as caught:
        one_observation(env)
    assert "'count'" in str(caught.value) and "int64" in str(caught.value) and "\n" not in str(caught.value)


def test_a_uint8_image_read_alone_stays_a_uint8_image():
    env = Drift(image=True)
    env.observation_spec = Composite({k: env.observation_spec[k] for k in ("count", "frame")}, shape=env.batch_size)
    spec = one_observation(env).observation_spec["observation"]
    assert spec.shape == (2, 4, 4, 3) and spec.dtype == torch.uint8  # cnn scales it, as gymnasium's images
    chosen = one_observation(Drift(image=True), ["frame"]).observation_spec["observation"]
    assert chosen.shape == (2, 4, 4, 3) and chosen.dtype == torch.uint8


def test_torchrl_pendulum_is_batched_and_reads_the_entries_it_is_told():
    env = rlplug.make("env", "torchrl-pendulum", num_envs=3, max_episode_steps=4)
    check_env_specs(env, seed=0)
    assert env.batch_size == (3,) and env.observation_spec["observation"].shape == (3, 8)
    rollout = env.rollout(6, break_when_any_done=False)
    assert rollout.get(("next", "truncated"))[:, 3].all()  # the episode ends at max_episode_steps
    two = rlplug.make("env", "torchrl-pendulum", num_envs=3, in_keys=["th", "thdot"])
    state = two.reset()
    torch.testing.assert_close(state.get("observation"), torch.stack([state.get("th"), state.get("thdot")], -1))
    with pytest.raises(UserError, match="env.in_keys: entry 'step_count' holds int64"):
        rlplug.make("env", "torchrl-pendulum", in_keys=["step_count"])


def test_an_unreadable_entry_from_a_recipe_is_one_line_and_exit_2(tmp_path):
    result = run_cli("run", str(ROOT / "recipes" / "pendulum-sac.toml"), "--out", str(tmp_path / "run"),
                     "--set", 'env={use="torchrl-pendulum", in_keys=["th", "step_count"]}')
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "step_count" in lines[0], result.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
@pytest.mark.parametrize("recipe, overrides", [
    ("pendulum-ppo.toml", ["algorithm.frames_per_batch=128", "algorithm.minibatch_size=32", "algorithm.epochs=2"]),
    ("pendulum-sac.toml", ["algorithm.learning_starts=64", "algorithm.batch_size=32"]),
])
def test_ppo_and_sac_train_on_torchrl_pendulum(tmp_path, recipe, overrides):
    summary = train(tmp_path, recipe, 'env={use="torchrl-pendulum", num_envs=2, max_episode_steps=50}', *overrides)
    assert summary["eval_return_mean"] < 0  # costs only


# -- third-party envs and the array road ------------------------------------------------------------------


class ArrayDrift(EnvBase):
    """A third party's env that takes the array road: one ``observation`` entry, arrays in and out."""

    supports_tensor_steps = True

    def __init__(self, num_envs: int = 2, horizon: int = 5):
        super().__init__(batch_size=[num_envs])
        self.horizon = horizon
        self.observation_spec = Composite(observation=Unbounded(shape=(num_envs, 2)), shape=(num_envs,))
        self.action_spec = Bounded(-1.0, 1.0, shape=(num_envs, 1))
        self.reward_spec = Unbounded(shape=(num_envs, 1))
        self.full_done_spec = done_spec(num_envs)
        self.tensordict_steps = self.array_steps = 0

    def reset_arrays(self, seed=None):
        self.generator = np.random.default_rng(seed)
        self.position = self.generator.random((*self.batch_size, 2), dtype=np.float32)
        self.count = np.zeros(self.batch_size, dtype=np.int64)
        return self.position.copy()

    def step_arrays(self, action):
        self.array_steps += 1
        self.position = self.position + 0.1 * action.astype(np.float32)
        self.count += 1
        reward = -np.linalg.norm(self.position, axis=-1).astype(np.float32)
        truncated = self.count >= self.horizon
        next_observation = self.position.copy()
        if truncated.any():  # same-step autoreset: the ended envs go on from a new start
            self.position[truncated] = self.generator.random((int(truncated.sum()), 2), dtype=np.float32)
            self.count[truncated] = 0
        return next_observation, reward, np.zeros_like(truncated), truncated, self.position.copy()  # a plain tuple

    def _reset(self, tensordict=None, **kwargs):
        observation = torch.from_numpy(self.reset_arrays(0))
        done = torch.zeros(*self.batch_size, 1, dtype=torch.bool)
        return TensorDict({"observation": observation, "done": done, "terminated": done, "truncated": done},
                          batch_size=self.batch_size)

    def _step(self, tensordict):
        self.tensordict_steps += 1
        next_observation, reward, _, truncated, _ = self.step_arrays(tensordict.get("action").numpy())
        truncated = torch.from_numpy(truncated).unsqueeze(-1)
        return TensorDict({"observation": torch.from_numpy(next_observation),
                           "reward": torch.from_numpy(reward).unsqueeze(-1), "done": truncated,
                           "terminated": torch.zeros_like(truncated), "truncated": truncated},
                          batch_size=self.batch_size)

    def _set_seed(self, seed):
        pass


def actor_for(env):
    return rlplug.make("network", "mlp", hidden=[8], observation_spec=env.observation_spec,
                       action_spec=env.action_spec, role="policy")


def test_an_env_offering_the_array_step_is_collected_without_tensordicts_per_step():
    env = ArrayDrift()
    batch = Collector(env, actor_for(env), frames_per_batch=20, seed=0).collect()
    assert env.array_steps == 10 and env.tensordict_steps == 0
    assert batch.batch_size == (2, 10) and batch.get(("next", "truncated"))[:, 4].all()
    assert torch.equal(batch.get("observation")[:, 1], batch.get(("next", "observation"))[:, 0])
    returns = evaluate(env, actor_for(env), episodes=4, seed=0)
    # 5 steps, each -|position| > -2
    assert len(returns) == 4 and env.tensordict_steps == 0 and all(-10 < r < 0 for r in returns)


def test_an_env_without_the_array_step_is_collected_through_tensordicts():
    env = one_observation(Drift())
    batch = Collector(env, actor_for(env), frames_per_batch=20, seed=0).collect()
    assert batch.batch_size == (2, 10) and batch.get("observation").shape == (2, 10, 3)
    assert batch.get(("next", "truncated"))[:, 4].all()
    assert torch.equal(batch.get("position")[:, 1], batch.get(("next", "position"))[:, 0])


@pytest.mark.slow
def test_a_plugin_returning_torchrl_pendulum_as_it_is_trains(install, monkeypatch, tmp_path):
    """Before, a plugin env with several observation entries ended in a traceback."""
    install({"thirdparty": textwrap.dedent('''
        import rlplug

        def make_plain_pendulum():
            """TorchRL's PendulumEnv, unbatched and untouched."""
            from torchrl.envs import PendulumEnv, StepCounter, TransformedEnv
            return TransformedEnv(PendulumEnv(), StepCounter(max_steps=40))

        @rlplug.hookimpl
        def rlplug_register_envs(register):
            register("plain-pendulum", make_plain_pendulum)
    ''')})
    monkeypatch.setattr(manager, "_cache", {False: manager.load_registry(), True: manager.load_registry(strict=True)})
    train(tmp_path, "pendulum-ppo.toml", 'env={use="plain-pendulum"}', "algorithm.frames_per_batch=64",
          "algorithm.minibatch_size=32")


# -- DeepMind Control ---------------------------------------------------------------------------------------


def test_dm_control_without_the_package_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "dm_control", None)
    with pytest.raises(UserError, match=r'pip install "rlplug\[dm-control\]"'):
        rlplug.make("env", "dm_control", domain="cheetah", task="run")


@pytest.mark.slow
def test_dm_control_cheetah_run_trains_with_sac(tmp_path):
    pytest.importorskip("dm_control")
    env = rlplug.make("env", "dm_control", domain="cheetah", task="run", num_envs=2)
    assert env.batch_size == (2,) and env.observation_spec["observation"].shape == (2, 17)
    assert env.action_spec.dtype == torch.float32
    with pytest.raises(UserError, match="did you mean 'run'"):
        rlplug.make("env", "dm_control", domain="cheetah", task="runn")
    summary = train(tmp_path, "dmc-cheetah-run-sac.toml", "env.frame_skip=50", "eval.episodes=1",
                    "algorithm.random_frames=64", "algorithm.learning_starts=64", "algorithm.batch_size=32",
                    "algorithm.policy.hidden=[16]", "algorithm.critic.hidden=[16]")
    assert 0 <= summary["eval_return_mean"] <= 20 * 50  # 20 steps of 50 physics steps of reward <= 1


@pytest.mark.slow
def test_dm_control_from_pixels_declares_a_float_image():
    """In a process of its own: MuJoCo's renderer is chosen once per process, at dm_control's import."""
    pytest.importorskip("dm_control")
    script = textwrap.dedent("""
        import rlplug
        from rlplug.errors import UserError
        try:
            env = rlplug.make("env", "dm_control", domain="cartpole", task="swingup", from_pixels=True, pixels_size=32)
        except UserError as error:
            print("cannot render:", error)
        else:
            spec = env.observation_spec["observation"]
            print(tuple(spec.shape), spec.dtype, tuple(env.reset().get("observation").shape))
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 0, result.stderr
    if result.stdout.startswith("cannot render:"):
        pytest.skip(f"MuJoCo cannot render here: {result.stdout.strip()}")
    assert result.stdout.split("\n")[0] == "(1, 3, 32, 32) torch.float32 (1, 3, 32, 32)", result.stdout
