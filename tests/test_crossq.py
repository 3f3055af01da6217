"""CrossQ: rlplug's loss on known inputs (the bootstrap from the critics' own joint pass, batch-normalised over
both batches at once), against TorchRL's CrossQLoss on the same networks and sample, without target networks
and without a ``tau``; and the recipe through the CLI."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from conftest import ROOT, one_line_error, run_cli
from conftest import pendulum_transitions as sample
from tensordict.nn import TensorDictModule

import rlplug

RECIPE = ROOT / "recipes" / "pendulum-crossq.toml"
SETTINGS = SimpleNamespace(gamma=0.5, initial_entropy_coef=0.5, learn_entropy_coef=True, target_entropy=None)


def specs() -> dict:
    env = rlplug.make("env", "gym", id="Pendulum-v1")
    return {"observation_spec": env.observation_spec, "action_spec": env.action_spec}


def loss_of(name: str, actor, critics: list, **changes):
    networks = {"policy": actor, "critic": critics[0], "critics": critics}
    return rlplug.make("loss", name, networks=networks, settings=SimpleNamespace(**{**vars(SETTINGS), **changes}),
                       **specs())


def actor_network(seed: int = 0):
    torch.manual_seed(seed)
    return rlplug.make("network", "mlp", role="policy", hidden=[16], log_std="state", squash="tanh", **specs())


class NormalisedFirstObservation(torch.nn.Module):
    """Q(s, a) = BN(s_0) + offset: batch normalisation (no affine part) of the observation's first entry."""

    def __init__(self, offset: float):
        super().__init__()
        self.norm = torch.nn.BatchNorm1d(1, affine=False)
        self.offset = offset

    def forward(self, observation, action):
        return self.norm(observation[:, :1]) + self.offset


def test_the_bootstrap_comes_from_one_pass_normalising_both_batches_together():
    """s_0 = [0, 1], s'_0 = [2, 3]: one pass normalises [0, 1, 2, 3] (mean 1.5, variance 1.25), so Q(s) =
    [-1.5, -0.5] / sqrt(1.25) and Q(s') = [0.5, 1.5] / sqrt(1.25) (the lower critic's); with alpha ~ 0 the
    target is r + gamma Q(s'), and the critics' running mean moved once, towards 1.5 (separate passes of s and
    s' would give Q(s) = [-1, 1] and move it twice)."""
    critics = [TensorDictModule(NormalisedFirstObservation(offset), in_keys=["observation", "action"],
                                out_keys=["state_action_value"]) for offset in (0.0, 1.0)]
    loss = loss_of("crossq-loss", actor_network(), critics, initial_entropy_coef=1e-9, learn_entropy_coef=False)
    data = sample(2, 0)
    data.set("observation", torch.tensor([[0.0, 0, 0], [1, 0, 0]]))
    data.set(("next", "observation"), torch.tensor([[2.0, 0, 0], [3, 0, 0]]))
    data.set(("next", "reward"), torch.tensor([[1.0], [0.0]]))
    data.set(("next", "terminated"), torch.zeros(2, 1, dtype=torch.bool))
    out = loss(data)
    scale = (1.25 + 1e-5) ** 0.5
    q, next_q = torch.tensor([[-1.5], [-0.5]]) / scale, torch.tensor([[0.5], [1.5]]) / scale
    target = torch.tensor([[1.0], [0.0]]) + 0.5 * next_q
    expected = ((q - target) ** 2).mean() + ((q + 1.0 - target) ** 2).mean()
    assert float(out["loss_qvalue"]) == pytest.approx(float(expected), rel=1e-4)
    assert data.get("td_error").tolist() == pytest.approx((q - target).abs().reshape(-1).tolist(), rel=1e-4)
    for critic in critics:
        norm = critic.module.norm
        assert int(norm.num_batches_tracked) == 1, "one pass of each critic; the actor's term reads them in eval"
        assert float(norm.running_mean) == pytest.approx(0.1 * 1.5)
        assert critic.training, "the critics are left in train mode"


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rlplugs_crossq_loss_is_torchrls_crossq_loss(seed):
    """The same actor and twin batch-normalised critics (TorchRL makes its twins from one network with fresh
    weights: rlplug's take theirs), the same draws: the same terms, actor gradients and running statistics."""
    layers = [{"type": "Linear", "out": 16}, {"type": "ReLU"}, {"type": "BatchNorm1d"}]

    def critic():
        return rlplug.make("network", "sequential", role="q_value", layers=layers, **specs())

    their_actor, ours_actor = actor_network(seed), actor_network(seed)
    theirs = loss_of("CrossQLoss", their_actor, [critic()])
    critics = [critic(), critic()]
    for index, twin in enumerate(critics):
        twin.load_state_dict(dict(theirs.qvalue_network_params[index].flatten_keys(".").items()))
    ours = loss_of("crossq-loss", ours_actor, critics)
    data = sample(32, seed)
    torch.manual_seed(seed)
    mine = ours(data.clone())
    torch.manual_seed(seed)
    their = theirs(data.clone())
    for key in ("loss_qvalue", "loss_actor", "loss_alpha", "entropy", "alpha"):
        assert float(mine[key]) == pytest.approx(float(their[key]), rel=1e-4, abs=1e-6), key
    my_gradients = torch.autograd.grad(mine["loss_actor"], list(ours_actor.parameters()), allow_unused=True)
    their_gradients = torch.autograd.grad(their["loss_actor"], list(their_actor.parameters()), allow_unused=True)
    for a, b in zip(my_gradients, their_gradients):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    running = dict(theirs.qvalue_network_params[0].flatten_keys(".").items())
    for name, value in critics[0].state_dict().items():
        if "running" in name:
            torch.testing.assert_close(value, running[name].detach(), rtol=1e-5, atol=1e-6)


def test_crossq_keeps_no_targets_and_offers_no_tau():
    critics = [TensorDictModule(NormalisedFirstObservation(0.0), in_keys=["observation", "action"],
                                out_keys=["state_action_value"]) for _ in range(2)]
    for name in ("crossq-loss", "CrossQLoss"):
        loss = loss_of(name, actor_network(), critics)
        assert loss.no_targets is True and not hasattr(loss, "update_targets"), name
        assert not any(key.startswith("target_") for key in loss.state_dict()), name
        assert not loss.batchable if name == "crossq-loss" else True
    from rlplug.registry import get_registry

    schema = get_registry().lookup("algorithm", "crossq").schema
    assert "tau" not in schema.params and schema.params["policy_delay"].default == 3
    assert "tau" in get_registry().lookup("algorithm", "sac").schema.params


def test_the_actor_and_alpha_move_every_policy_delay_steps():
    from conftest import built_algorithm

    algorithm, batches = built_algorithm(RECIPE, 0, ["algorithm.learning_starts=0", "algorithm.batch_size=8",
                                                     "algorithm.steps_per_update=8", "algorithm.gradient_steps=3"])
    assert algorithm.update_targets is None
    actor = [p.detach().clone() for p in algorithm.actor.parameters()]
    alpha = algorithm.loss_module.log_alpha.detach().clone()
    steps = []
    for _ in range(2):
        steps.append(algorithm.stepped_learners())
        algorithm.steps += 1
    assert steps == [{"critic"}, {"critic"}] and algorithm.loss_module.with_actor is False
    algorithm.steps = 0
    algorithm.update(batches[0])  # three gradient steps: the third moves the actor and alpha
    assert algorithm.steps == 3
    assert any(not torch.equal(a, b) for a, b in zip(actor, algorithm.actor.parameters()))
    assert not torch.equal(alpha, algorithm.loss_module.log_alpha)


@pytest.mark.slow
def test_the_recipe_trains_through_the_cli_with_two_envs(tmp_path):
    out = tmp_path / "run"
    result = run_cli("run", str(RECIPE), "--out", str(out), "--set", "env.num_envs=2", "--set", "run.total_frames=512",
                     "--set", "algorithm.learning_starts=128", "--set", "algorithm.batch_size=64",
                     "--set", "eval.every_frames=0", "--set", "eval.episodes=1")
    assert result.returncode == 0, result.stderr
    assert (out / "summary.json").exists()


@pytest.mark.slow
def test_a_tau_or_batched_seeds_are_refused_in_one_line(tmp_path):
    result = run_cli("run", str(RECIPE), "--out", str(tmp_path / "a"), "--set", "algorithm.tau=0.01")
    one_line_error(result, "algorithm.tau")
    assert not (tmp_path / "a").exists()
    result = run_cli("run", str(RECIPE), "--out", str(tmp_path / "b"), "--seeds", "0,1", "--batched",
                     "--set", "run.total_frames=256")
    one_line_error(result, "algorithm.loss", "cannot compute several seeds at once")


#: TorchRL's SACLoss offered to crossq: it keeps target networks, which crossq has no tau to move
TARGETED_PLUGIN = """
import rlplug
from rlplug.plugins.algorithms.sac import make_sac_loss


def make_targeted_loss(networks, settings, action_spec=None):
    return make_sac_loss(networks, settings, action_spec)


make_targeted_loss.serves = ("crossq",)


@rlplug.hookimpl
def rlplug_register_losses(register):
    register("targeted-loss", make_targeted_loss)
"""


@pytest.mark.slow
def test_a_loss_with_targets_is_refused_for_crossq_as_its_plugins_mistake(tmp_path, install):
    from conftest import rlplug_cli

    where = install({"targeted": TARGETED_PLUGIN}, dist="targeted")
    result = rlplug_cli("run", str(RECIPE), "--out", str(tmp_path / "run"), "--set",
                        'algorithm.loss={use = "targeted-loss"}', path=where, timeout=240)
    one_line_error(result, "loss 'targeted-loss'", "it keeps target networks, and crossq has none", "plugin's mistake")
