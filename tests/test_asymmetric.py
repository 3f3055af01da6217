"""Asymmetric actor-critics (issue 41, item 5): ``[algorithm.critic] in_keys`` gives the critic other entries
than the policy (privileged state in simulation), ``[algorithm.policy] in_keys`` chooses the policy's; the
policy alone acts, is evaluated and is exported.

``rlplug/PrivilegedCartPole-v1``'s Dict observation holds ``observation`` (position and angle) and ``state``
(all four of CartPole's entries), so a network reading the wrong one has the wrong input size or, where sizes
agree, values that do not follow the velocities.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import SHORT, one_line_error, run_cli
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

import rlplug
from rlplug import recipe as recipes
from rlplug.core.envs import build_env
from rlplug.core.observations import CRITIC_OBSERVATION
from rlplug.errors import UserError
from rlplug.plugins.algorithms.networks import build_network

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "privileged-cartpole-ppo.toml"
#: CartPole's state entries the policy observes (x and theta)
OBSERVED = [0, 2]


def small(**changes):
    return {"run.total_frames": 512, "run.checkpoint_every_frames": 0, "eval.every_frames": 0,
            "eval.episodes": 1, "env.num_envs": 2, "algorithm.frames_per_batch": 256, "loggers": [{"use": "csv"}],
            **changes}


def test_every_env_of_the_run_gathers_each_networks_entries():
    """The policy's ``observation`` is the Dict's position and angle, the critic's ``critic_observation`` the
    whole state of the same step, at resets and steps of every copy."""
    recipe = recipes.load(RECIPE, ["env.num_envs=3"])
    assert recipe.env.policy_in_keys == ("observation",) and recipe.env.critic_in_keys == ("state",)
    env = build_env(recipe.env)
    try:
        env.set_seed(0)
        rollout = env.rollout(60, break_when_any_done=False)
    finally:
        env.close()
    for data in (rollout, rollout.get("next")):
        observation, state = data.get("observation"), data.get(CRITIC_OBSERVATION)
        assert observation.shape[-1] == 2 and state.shape[-1] == 4
        torch.testing.assert_close(observation, state[..., OBSERVED])
    velocities = rollout.get(CRITIC_OBSERVATION)[..., [1, 3]]
    assert velocities.abs().sum() > 0 and velocities.std() > 0  # the critic's input is not the policy's padded


def test_the_critic_values_the_privileged_state_and_the_policy_never_reads_it(tmp_path):
    agent = rlplug.Agent.from_recipe(RECIPE, out=tmp_path / "run", **small())
    try:
        algorithm = agent.algorithm
        assert algorithm.critic.in_keys == [CRITIC_OBSERVATION]
        observation = torch.tensor([[0.1, 0.02]]).expand(5, 2)
        state = torch.tensor([[0.1, v, 0.02, w] for v, w in [(0, 0), (1, 0), (-1, 0), (0, 1), (0, -1)]])
        data = TensorDict({"observation": observation, CRITIC_OBSERVATION: state}, batch_size=[5])
        values = algorithm.critic(data.clone()).get("state_value").squeeze(-1)
        assert values.unique().numel() == 5  # the velocities, which the policy never sees, move the value
        logits = algorithm.policy(data.clone()).get("logits")
        # whatever the state: the same logits on every row, but for rounding (a CPU's matrix kernels may sum one
        # row of a batch in another order than the next: about 1e-7 of the logits here)
        torch.testing.assert_close(logits, logits[:1].expand_as(logits), rtol=1e-6, atol=0.0)

        batch = agent.run.collector.collect()
        estimated = algorithm.estimate(batch.clone())
        expected = algorithm.critic(TensorDict({CRITIC_OBSERVATION: batch.get(CRITIC_OBSERVATION)},
                                               batch_size=batch.batch_size)).get("state_value")
        torch.testing.assert_close(estimated.get("state_value"), expected)
        prepared = algorithm.prepare(batch.clone(), 64)
        assert prepared.data[CRITIC_OBSERVATION].shape[-1] == 4  # the loss's value term reads it too
    finally:
        agent.close()


def test_a_trained_asymmetric_run_acts_evaluates_and_exports_with_the_policys_entries_alone(tmp_path):
    run_dir = tmp_path / "run"
    result = run_cli("run", str(RECIPE), "--out", str(run_dir), *SHORT)
    assert result.returncode == 0, result.stderr
    saved = recipes.load(run_dir / "recipe.toml")  # the run directory's recipe keeps both networks' entries
    assert saved.env.critic_in_keys == ("state",) and saved.env.policy_in_keys == ("observation",)

    agent = rlplug.Agent.load(run_dir / "checkpoint.pt", out=tmp_path / "loaded")
    try:
        rng = np.random.default_rng(0)
        states = rng.normal(0, 0.1, (16, 4)).astype(np.float32)
        for state in states:  # the env's own dict and the policy's entry alone give the same action
            as_env_gives = {"observation": state[OBSERVED], "state": state}
            assert agent.select_action(as_env_gives) == agent.select_action(state[OBSERVED])
        with pytest.raises(UserError, match="policy reads the entries"):
            agent.select_action({"state": states[0]})
    finally:
        agent.close()

    onnx = tmp_path / "policy.onnx"
    result = run_cli("export", str(run_dir), "--out", str(onnx))
    assert result.returncode == 0, result.stderr
    assert "observation: float32 [batch, 2]: the env's observation entry 'observation'" in result.stdout
    result = run_cli("eval", str(run_dir), "--episodes", "2")
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("flags, fragments", [
    (["algorithm.critic.in_keys=['stat']"], ["algorithm.critic.in_keys", "no observation entry 'stat'",
                                             "did you mean 'state'", "entries: observation, state"]),
    (["algorithm.critic.in_keys=['state', 'state']"], ["algorithm.critic.in_keys", "names an entry twice"]),
    (["algorithm.shared_body=true"], ["algorithm.critic.in_keys", "shares no body"]),
    (["algorithm.policy.use='lstm'", "algorithm.critic.use='lstm'"], ["algorithm.critic.in_keys", "not recurrent"]),
    (["algorithm={use='discrete-sac', policy={use='mlp', in_keys=['observation']}, critic={use='mlp', "
      "in_keys=['state']}}"], ["algorithm.critic.in_keys", "on-policy family"]),
    (["algorithm={use='dqn', q_network={use='mlp', in_keys=['state']}}"],
     ["algorithm.q_network.in_keys", "[algorithm.policy] and [algorithm.critic] only"]),
])
def test_asymmetric_mistakes_are_one_line_and_create_nothing(tmp_path, flags, fragments):
    args = [part for flag in flags for part in ("--set", flag)]
    result = run_cli("run", str(RECIPE), "--out", str(tmp_path / "run"), *args)
    one_line_error(result, str(RECIPE), *fragments)
    assert not (tmp_path / "run").exists()


def test_a_critic_network_that_ignores_its_entries_is_refused_at_its_key():
    """A network plugin that reads ``observation`` whatever spec it is given would value the policy's view:
    refused when built, at the critic's key."""
    recipe = recipes.load(RECIPE)
    env = build_env(recipe.env)
    try:
        spec = env.observation_spec
    finally:
        env.close()

    class Fixed:
        in_keys = ("state",)
        path = "critic"
        title = "network 'fixed' (plugin example 1.0)"

        @staticmethod
        def build(**context):
            assert list(context["observation_spec"].keys()) == [CRITIC_OBSERVATION]  # what it is sized from
            return TensorDictModule(nn.LazyLinear(1), in_keys=["observation"], out_keys=["state_value"])

    with pytest.raises(UserError) as raised:
        build_network(Fixed(), role="value", observation_spec=spec, action_spec=None, device="cpu")
    assert raised.value.path == "algorithm.critic.in_keys" and "network 'fixed'" in str(raised.value)


@pytest.mark.xdist_group("ray")
@pytest.mark.slow
def test_ray_workers_build_the_critics_entries_in_both_modes(tmp_path):
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        for mode in ("experience", "gradients"):
            agent = rlplug.Agent.from_recipe(RECIPE, out=tmp_path / mode,
                                             **small(runner={"use": "ray", "workers": 2, "mode": mode}))
            try:
                if mode == "experience":  # in gradient mode the batches stay with the workers that learn from them
                    batch = agent.run.collector.collect()
                    assert batch.get(CRITIC_OBSERVATION).shape[-1] == 4
                    torch.testing.assert_close(batch.get("observation"),
                                               batch.get(CRITIC_OBSERVATION)[..., OBSERVED])
                summary = agent.train()
                assert summary["status"] == "finished" and summary["frames"] >= 512
            finally:
                agent.close()
    finally:
        ray.shutdown()
