"""C51 (categorical DQN): TorchRL's DistributionalDQNLoss built through the registered factory, against a plain
reference of the paper's projection on hand-made transitions (the target network's distribution for the action
the online network values most, shifted by the reward and discount, clipped and spread over the two nearest
atoms); the acting policy's greedy action is the largest expected value; a CLI run that resumes and takes
``rlplug set``; ``show`` and ``list``; one-line refusals."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
from conftest import ROOT, one_line_error, run_cli, stopped_then_set_and_resumed
from tensordict import TensorDict

import rlplug
from rlplug.networks import Role

RECIPE = ROOT / "recipes" / "cartpole-c51.toml"
SETTINGS = SimpleNamespace(gamma=0.9, atoms=5, v_min=-2.0, v_max=2.0, double=True)
#: a run of seconds: checkpoints at 128 and 256 frames, a few gradient steps
TINY = ["--set", "run.total_frames=256", "--set", "run.checkpoint_every_frames=128", "--set", "eval.every_frames=0",
        "--set", "eval.episodes=1", "--set", "algorithm.steps_per_update=64", "--set", "algorithm.gradient_steps=2",
        "--set", "algorithm.batch_size=16", "--set", "algorithm.learning_starts=64",
        "--set", "algorithm.random_frames=64", "--set", "algorithm.replay_buffer.capacity=1000"]


def specs() -> dict:
    env = rlplug.make("env", "gym", id="CartPole-v1")
    return {"observation_spec": env.observation_spec, "action_spec": env.action_spec}


def q_network(seed: int):
    torch.manual_seed(seed)
    return rlplug.make("network", "mlp", role=Role("q_values", outputs=SETTINGS.atoms), hidden=[16], **specs())


def transitions(rows: int, seed: int) -> TensorDict:
    generator = torch.Generator().manual_seed(seed)
    action = torch.nn.functional.one_hot(torch.randint(2, (rows,), generator=generator), 2)
    terminated = torch.rand(rows, 1, generator=generator) < 0.3
    return TensorDict({
        "observation": torch.randn(rows, 4, generator=generator), "action": action,
        "next": {"observation": torch.randn(rows, 4, generator=generator),
                 "reward": 2 * torch.randn(rows, 1, generator=generator), "terminated": terminated},
    }, [rows])


def probabilities(network, observation: torch.Tensor) -> torch.Tensor:
    """``[rows, actions, atoms]``: the network's outputs, action by action, softmaxed over the atoms."""
    return network.module(observation).unflatten(-1, (2, SETTINGS.atoms)).softmax(-1)


def reference_loss(network, loss, data: TensorDict) -> torch.Tensor:
    """Bellemare et al.'s projected target and cross-entropy, written out plainly; the target network is
    ``network`` with the loss's target parameters."""
    z = torch.linspace(SETTINGS.v_min, SETTINGS.v_max, SETTINGS.atoms)
    spacing = z[1] - z[0]
    with torch.no_grad():
        next_online = probabilities(network, data["next", "observation"])
        best = (next_online * z).sum(-1).argmax(-1)  # the online network chooses (double DQN)
        with loss.target_value_network_params.to_module(loss.value_network):
            next_target = probabilities(network, data["next", "observation"])[torch.arange(len(best)), best]
        not_terminated = 1.0 - data["next", "terminated"].float()
        shifted = (data["next", "reward"] + SETTINGS.gamma * not_terminated * z).clamp(SETTINGS.v_min, SETTINGS.v_max)
        # each shifted atom's mass to the atoms around it, in proportion to its nearness: [rows, atom_i, atom_j]
        share = (1 - (shifted.unsqueeze(1) - z.view(1, -1, 1)).abs() / spacing).clamp(min=0)
        projected = (share * next_target.unsqueeze(1)).sum(-1)
    taken = probabilities(network, data["observation"])[torch.arange(len(data)), data["action"].argmax(-1)]
    return -(projected * taken.log()).sum(-1).mean()


def distributional_loss(network):
    return rlplug.make("loss", "DistributionalDQNLoss", networks={"q_network": network}, settings=SETTINGS, **specs())


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_distributional_loss_is_the_papers_projection(seed):
    network = q_network(seed)
    loss = distributional_loss(network)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # a target network unlike the online one
        for key, value in loss.target_value_network_params.items(True, True):
            if key[-1] in ("weight", "bias"):
                value.add_(torch.randn(value.shape, generator=generator))
    data = transitions(32, seed)
    out = loss(data.clone())
    expected = reference_loss(network, loss, data)
    assert float(out["loss"].detach()) == pytest.approx(float(expected.detach()), rel=1e-5)
    gradients = torch.autograd.grad(out["loss"], list(network.parameters()))
    expected_gradients = torch.autograd.grad(reference_loss(network, loss, data), list(network.parameters()))
    for mine, theirs in zip(gradients, expected_gradients):
        torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-6)
    with torch.no_grad(), loss.target_value_network_params.to_module(loss.value_network):
        assert not torch.allclose(probabilities(network, data["observation"]), probabilities(q_network(seed),
                                  data["observation"])), "the target differs from the online network"


def test_the_greedy_action_has_the_largest_expected_return():
    from torchrl.envs.utils import ExplorationType, set_exploration_type

    env = rlplug.make("env", "gym", id="CartPole-v1", num_envs=2)
    torch.manual_seed(0)
    c51 = rlplug.make("algorithm", "c51", observation_spec=env.observation_spec, action_spec=env.action_spec,
                      total_frames=10_000, atoms=SETTINGS.atoms, v_min=SETTINGS.v_min, v_max=SETTINGS.v_max,
                      q_network={"use": "mlp", "hidden": [16]})
    observation = 3 * torch.randn(256, 4)
    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        action = c51.policy(TensorDict({"observation": observation}, [256])).get("action")
        z = torch.linspace(SETTINGS.v_min, SETTINGS.v_max, SETTINGS.atoms)
        expected = (probabilities(c51.network, observation) * z).sum(-1)
    assert torch.equal(action.argmax(-1), expected.argmax(-1))


def test_show_and_list_name_c51():
    shown = run_cli("show", "c51")
    assert shown.returncode == 0, shown.stderr
    for fragment in ("Categorical DQN (C51)", "atoms", "v_min", "v_max", "target_update_interval", "epsilon_end",
                     "DistributionalDQNLoss"):
        assert fragment in shown.stdout, fragment
    listed = run_cli("list")
    assert listed.returncode == 0, listed.stderr
    assert "c51" in listed.stdout and "DistributionalDQNLoss" in listed.stdout


@pytest.mark.slow
def test_a_c51_run_stops_takes_set_and_resumes(tmp_path):
    out = tmp_path / "run"
    resumed = stopped_then_set_and_resumed(RECIPE, out, TINY, "algorithm.lr=1e-4")
    assert "frame 128: algorithm.lr 0.0023 -> 0.0001 (rlplug set)" in resumed.stdout, resumed.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["frames"] == 256
    state = torch.load(out / "checkpoint.pt", weights_only=False)
    assert state["parameters"] == {"lr": 1e-4}


@pytest.mark.slow
@pytest.mark.parametrize("flags, fragments", [
    (["--set", "env.id=Pendulum-v1"], ["algorithm", "c51 is for discrete actions"]),
    (["--set", "algorithm.v_max=-200.0"], ["algorithm.v_max", "must be above v_min (-100.0)"]),
    (["--set", "algorithm.double=false"], ["algorithm.double", "DistributionalDQNLoss"]),
    (["--set", "algorithm.atoms=1"], ["algorithm.atoms", ">= 2"]),
])
def test_c51_refusals_are_one_line(tmp_path, flags, fragments):
    out = tmp_path / "run"
    one_line_error(run_cli("run", str(RECIPE), "--out", str(out), *TINY, *flags), *fragments)
    assert not out.exists(), "refused before the run directory is made"
