"""Action masks (issue 41, item 2): an env's ``action_mask`` entry makes every discrete algorithm choose only
allowed actions, in collection, evaluation, ``Agent.select_action`` and the exported file; the losses read the
masked distribution and DQN's target the next state's allowed actions.

The test env allows one action of three at each step, never action 0, and counts any other: each policy's
network is biased towards action 0, so a missing mask anywhere fails.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import one_line_error, rlplug_cli, run_cli
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn
from torchrl.data import Binary, Composite, OneHot, Unbounded

import rlplug
from rlplug.core.acting import ActorView
from rlplug.core.heads import wrap
from rlplug.plugins.algorithms.dqn.algorithm import DQNObjective
from rlplug.plugins.algorithms.onpolicy.base import log_prob_and_entropy

ROOT = Path(__file__).resolve().parents[1]
ENV_ID = "RlplugMaskTest/OneAllowed-v0"

ENV_SOURCE = '''
import gymnasium as gym
import numpy as np
from gymnasium import spaces


class OneAllowed(gym.Env):
    """Dict(observation=Box(3), action_mask=MultiBinary(3)); one action of 1 and 2 allowed at each step, chosen
    at random; any other action is counted in ``taken`` (TorchRL's GymWrapper steps unmasked random actions
    while it reads the env's info, so it cannot raise) and ends the episode at -1000. 20 steps an episode,
    reward 1 a step."""

    taken = []

    def __init__(self, continuous=False):
        self.observation_space = spaces.Dict({"observation": spaces.Box(-1, 1, (3,), np.float32),
                                              "action_mask": spaces.MultiBinary(3)})
        self.action_space = spaces.Box(-1, 1, (1,), np.float32) if continuous else spaces.Discrete(3)
        self.mask, self.t = np.zeros(3, np.int8), 0

    def _observe(self):
        self.mask = np.zeros(3, np.int8)
        self.mask[1 + int(self.np_random.integers(0, 2))] = 1
        return {"observation": self.np_random.uniform(-1, 1, 3).astype(np.float32), "action_mask": self.mask.copy()}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._observe(), {}

    def step(self, action):
        if isinstance(self.action_space, spaces.Discrete) and not self.mask[int(action)]:
            OneAllowed.taken.append((int(action), self.mask.tolist()))
            return self._observe(), -1000.0, True, False, {}
        self.t += 1
        return self._observe(), 1.0, False, self.t >= 20, {}


for _id, _kwargs in (("RlplugMaskTest/OneAllowed-v0", {}),
                     ("RlplugMaskTest/ContinuousMasked-v0", {"continuous": True})):
    if _id not in gym.registry:
        gym.register(_id, entry_point=OneAllowed, kwargs=_kwargs)
'''

exec(compile(ENV_SOURCE, "mask_test_env", "exec"))  # registers the ids in this process

SMALL = {
    "ppo": {"algorithm.frames_per_batch": 64, "algorithm.minibatch_size": 32, "algorithm.epochs": 1},
    "dqn": {"algorithm.learning_starts": 32, "algorithm.random_frames": 32, "algorithm.batch_size": 16},
    "c51": {"algorithm.learning_starts": 32, "algorithm.batch_size": 16},
    "discrete-sac": {"algorithm.learning_starts": 32, "algorithm.random_frames": 32, "algorithm.batch_size": 16},
}


def favour_first_action(agent, algorithm: str) -> None:
    """The policy's last linear layer biased so that, unmasked, action 0 (never allowed) is its favourite."""
    network = {"ppo": "policy", "dqn": "q_network", "c51": "q_network", "discrete-sac": "policy"}[algorithm]
    module = agent.algorithm.networks()[network] if hasattr(agent.algorithm, "networks") else None
    module = module if module is not None else agent.algorithm.policy
    last = [layer for layer in module.modules() if isinstance(layer, nn.Linear)][-1]
    with torch.no_grad():
        last.weight.zero_()
        last.bias.zero_()
        if algorithm == "c51":  # action 0's distribution all on the highest atom
            atoms = last.bias.numel() // 3
            last.bias[atoms - 1] = 50.0
        else:
            last.bias[0] = 50.0


@pytest.fixture(params=list(SMALL))
def masked_agent(request, tmp_path):
    algorithm = request.param
    recipe = ROOT / "recipes" / f"cartpole-{algorithm}.toml"
    agent = rlplug.Agent.from_recipe(recipe, out=tmp_path / "run", **{
        "env.id": ENV_ID, "env.num_envs": 2, "run.total_frames": 256, "eval.every_frames": 256,
        "eval.episodes": 2, "loggers": [], **SMALL[algorithm]})
    favour_first_action(agent, algorithm)
    OneAllowed.taken.clear()  # what building the env stepped  # noqa: F821 (defined by ENV_SOURCE)
    yield algorithm, agent
    agent.close()


def test_only_allowed_actions_everywhere(masked_agent, tmp_path):
    algorithm, agent = masked_agent
    batch = agent.run.collector.collect()
    actions = batch.get("action")
    taken = actions.argmax(-1) if actions.shape[-1] == 3 else actions
    allowed = batch.get("action_mask").gather(-1, taken.long().unsqueeze(-1))
    assert bool(allowed.all()), algorithm
    assert "action_mask" not in agent.run.env.observation_spec["observation"].keys() \
        if isinstance(agent.run.env.observation_spec["observation"], Composite) else True
    assert agent.run.env.observation_spec["observation"].shape[-1] == 3  # the networks read no mask
    agent.algorithm.update(batch)
    assert agent.evaluate() == [20.0, 20.0]  # the run's own evaluation env, built with the run
    assert OneAllowed.taken == []  # noqa: F821 (defined by ENV_SOURCE)
    observation = np.zeros(3, np.float32)
    for allowed_action in (1, 2):
        mask = np.eye(3, dtype=np.int8)[allowed_action]
        assert agent.select_action({"observation": observation, "action_mask": mask}) == allowed_action
        many = agent.select_action({"observation": np.zeros((4, 3), np.float32), "action_mask": np.tile(mask, (4, 1))})
        assert (many == allowed_action).all()
    with pytest.raises(rlplug.UserError, match="action_mask"):
        agent.select_action(observation)

    import onnxruntime

    from rlplug.run.export import export

    path, _ = export(agent.run, tmp_path / "policy.onnx", "onnx")
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["observation", "action_mask"]
    rng = np.random.default_rng(0)
    chosen = 1 + rng.integers(0, 2, 32)
    masks = np.eye(3, dtype=bool)[chosen]
    got = session.run(["action"], {"observation": rng.uniform(-1, 1, (32, 3)).astype(np.float32),
                                   "action_mask": masks})[0]
    assert (got == chosen).all(), algorithm


def masked_head(logits: list[float]):
    """A categorical policy of three actions whose logits are ``logits`` whatever the observation."""
    trunk = nn.Linear(2, 3)
    with torch.no_grad():
        trunk.weight.zero_()
        trunk.bias.copy_(torch.tensor(logits))
    spec = Composite(observation=Unbounded(shape=(2,)), action_mask=Binary(n=3, shape=(3,), dtype=torch.bool))
    return wrap(trunk, role="policy", observation_spec=spec, action_spec=OneHot(3))


def test_loss_log_prob_is_the_masked_distributions():
    policy = masked_head([0.0, 0.0, 0.0])
    view = ActorView.of(policy)
    assert view.mask_key == "action_mask" and view.categorical
    observation, mask = torch.zeros(1, 2), torch.tensor([[True, False, True]])
    action = torch.tensor([[1, 0, 0]])
    log_prob, entropy = log_prob_and_entropy(view, observation, action, with_entropy=True, mask=mask)
    assert log_prob.item() == pytest.approx(math.log(0.5))
    assert entropy.item() == pytest.approx(math.log(2))  # no NaN from the masked choice
    data = TensorDict({"observation": observation, "action_mask": mask}, batch_size=[1])
    dist = policy.get_dist(data)  # TorchRL's masked distribution, as the collection and TorchRL's losses build it
    assert dist.log_prob(action).item() == pytest.approx(math.log(0.5))
    unmasked, _ = log_prob_and_entropy(view, observation, action, mask=torch.ones(1, 3, dtype=torch.bool))
    assert unmasked.item() == pytest.approx(math.log(1 / 3))
    with pytest.raises(ValueError, match="action_mask"):
        log_prob_and_entropy(view, observation, action)


def test_dqn_target_skips_masked_next_actions():
    trunk = nn.Linear(2, 3)
    with torch.no_grad():
        trunk.weight.zero_()
        trunk.bias.copy_(torch.tensor([5.0, 10.0, 1.0]))
    network = TensorDictModule(trunk, in_keys=["observation"], out_keys=["action_value"])
    for double in (False, True):
        loss = DQNObjective(network, gamma=0.5, double=double, one_hot=True)
        data = TensorDict({
            "observation": torch.zeros(1, 2), "action": torch.tensor([[1, 0, 0]]),
            "next": {"observation": torch.zeros(1, 2), "reward": torch.ones(1, 1),
                     "terminated": torch.zeros(1, 1, dtype=torch.bool),
                     "action_mask": torch.tensor([[True, False, True]])},
        }, batch_size=[1])
        loss(data)
        # Q(s, 0) = 5; target 1 + 0.5 * max(5, 1) = 3.5 (10 is masked; unmasked it would be 6)
        assert data.get("td_error").item() == pytest.approx(1.5), double


#: the test env as a plugin module for the CLI: loading it registers the ids
PLUGIN_SOURCE = ENV_SOURCE + '''

from rlplug import hookimpl


@hookimpl
def rlplug_register_envs(register):
    pass
'''


def test_continuous_actions_with_a_mask_refused(tmp_path, install):
    where = install({"masktest": PLUGIN_SOURCE}, dist="masktest")
    result = rlplug_cli("run", str(ROOT / "recipes" / "pendulum-ppo.toml"), "--set",
                        "env.id=RlplugMaskTest/ContinuousMasked-v0", "--out", str(tmp_path / "run"), path=where)
    one_line_error(result, "env.action_mask", "one Discrete action")


def test_asking_for_a_mask_on_an_env_without_one_refused(tmp_path):
    result = run_cli("run", str(ROOT / "recipes" / "cartpole-ppo.toml"), "--set", "env.action_mask=applied",
                     "--out", str(tmp_path / "run"))
    one_line_error(result, "env.action_mask", "no 'action_mask' entry")


@pytest.mark.parametrize("key", ["env.flatten_observations=true", "env.frame_stack=4"])
def test_flattening_or_stacking_a_masked_observation_refused(tmp_path, key):
    """Flattened, the mask would be features the networks read and the actions would go unmasked; stacked, it
    would be k masks, of the past steps too."""
    result = run_cli("run", str(ROOT / "recipes" / "cartpole-ppo.toml"), "--set", "env.id=rlplug/MaskedCartPole-v1",
                     "--set", key, "--out", str(tmp_path / "run"))
    one_line_error(result, key.partition("=")[0], "action_mask")
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_masked_cartpole_trains_with_the_canonical_recipe(tmp_path):
    result = run_cli("check-env", str(ROOT / "recipes" / "cartpole-ppo.toml"), "--set",
                     "env.id=rlplug/MaskedCartPole-v1")
    assert result.returncode == 0, result.stdout + result.stderr
    result = run_cli("run", str(ROOT / "recipes" / "cartpole-ppo.toml"), "--set", "env.id=rlplug/MaskedCartPole-v1",
                     "--set", "run.total_frames=4096", "--set", "eval.every_frames=4096", "--out",
                     str(tmp_path / "run"), timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    import json

    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "finished"
    assert summary["eval_return_mean"] > 0  # a masked action would end an episode at -100


def test_impalas_v_trace_ratio_reads_the_mask(tmp_path):
    """IMPALA scores the taken actions under the policy of now for V-trace: on a masked env, with the weights
    the batch was collected with, that is the collection's own log-probability (the ratio 1), not the unmasked
    head's."""
    from rlplug.plugins.estimators.returns import TARGET_LOG_PROB

    agent = rlplug.Agent.from_recipe(ROOT / "recipes" / "cartpole-impala-ray.toml", out=tmp_path / "run", **{
        "runner": {"use": "local"}, "env.id": ENV_ID, "env.num_envs": 2, "run.total_frames": 64,
        "algorithm.frames_per_batch": 64, "loggers": []})
    try:
        favour_first_action(agent, "ppo")
        batch = agent.run.collector.collect()
        collected = batch.get("action_log_prob").clone()
        assert bool((collected > -1.0).all())  # each step had two allowed actions and a uniform choice among them
        estimated = agent.algorithm.estimate(batch).get(TARGET_LOG_PROB)
        assert torch.allclose(estimated, collected, atol=1e-5)
    finally:
        agent.close()
