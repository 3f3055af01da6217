"""The off-policy per-step fast paths (issue 29, item 4), each against the plain path it stands in for: the same
parameters after several gradient steps on the same samples, from the same seed."""

from __future__ import annotations

import pytest
import torch
from conftest import ROOT, built_algorithm
from conftest import pendulum_transitions as transitions

from rlplug.core.training import MetricMean
from rlplug.plugins.algorithms.offpolicy.parts import FlatTargets

STEPS = 6


def recipe(name: str):
    return ROOT / "recipes" / f"{name}.toml"


def trained_state(algorithm) -> dict[str, torch.Tensor]:
    """The loss's whole state (networks, targets, entropy coefficient) after STEPS gradient steps on the same
    samples, the global generator seeded first (SAC's actions, TD3's target noise)."""
    data = transitions(8 * (STEPS + 1), 0)
    del data["next", "done"]  # not a stored key: the algorithms store terminations only
    torch.manual_seed(0)
    metrics = MetricMean()
    for step in range(STEPS):
        algorithm.gradient_step(data[8 * step: 8 * step + 16], metrics)
    return {key: value.detach().clone() for key, value in algorithm.loss_module.state_dict().items()}


def algorithm_of(name: str, loss: str | None = None, **keys: str):
    overrides = ["algorithm.learning_starts=0", "algorithm.batch_size=16"]
    if loss is not None:
        extra = "".join(f", {key} = {value}" for key, value in keys.items())
        overrides.append(f'algorithm.loss={{use = "{loss}"{extra}}}')
    return built_algorithm(recipe(name), 0, overrides)[0]


@pytest.mark.parametrize("name, loss", [
    ("pendulum-ddpg", None), ("pendulum-td3", None), ("pendulum-sac", None),
    ("pendulum-ddpg", "DDPGLoss"), ("pendulum-td3", "TD3Loss"), ("pendulum-sac", "SACLoss"),
])
def test_targets_move_in_one_kernel_per_learner_exactly_as_the_loss_moves_them(name, loss):
    fused = algorithm_of(name, loss)
    assert isinstance(fused.update_targets, FlatTargets)  # the fast path is the one taken
    assert fused.update_targets.pairs.keys() == fused.loss_module.target_parameters.keys()
    plain = algorithm_of(name, loss)
    plain.update_targets = plain.loss_module.update_targets  # rlplug's per-tensor polyak, or TorchRL's SoftUpdate
    fast, slow = trained_state(fused), trained_state(plain)
    assert fast.keys() == slow.keys()
    for key in fast:
        assert torch.equal(fast[key], slow[key]), key
    moved = [key for key in fast if "target" in key]
    assert moved and any(not torch.equal(fast[key], value) for key, value in
                         algorithm_of(name, loss).loss_module.state_dict().items() if key in moved)


def test_flat_targets_stay_the_loss_own_tensors_so_checkpoints_load_into_them():
    algorithm = algorithm_of("pendulum-sac")
    trained_state(algorithm)
    state = {key: value.clone() for key, value in algorithm.loss_module.state_dict().items()}
    fresh = algorithm_of("pendulum-sac")
    fresh.loss_module.load_state_dict(state)  # in place, into the views of the flat targets
    fresh.update_targets(1.0)
    algorithm.update_targets(1.0)
    for key, value in algorithm.loss_module.state_dict().items():
        assert torch.equal(fresh.loss_module.state_dict()[key], value), key


def test_targets_not_laid_out_as_their_learner_keep_the_loss_own_update():
    algorithm = algorithm_of("pendulum-ddpg")
    learners = algorithm.learners.trained
    targets = algorithm.loss_module.target_parameters
    own = algorithm.loss_module.update_targets
    assert FlatTargets.where_possible({"critic": targets["critic"][::-1]}, learners, own) is None  # another order
    assert FlatTargets.where_possible({"critic": targets["critic"]}, {"critic": list(targets["critic"])}, own) is None
    assert FlatTargets.where_possible({}, learners, own) is None


def test_torchrl_sac_loss_looping_over_its_critics_trains_as_under_vmap():
    looped = algorithm_of("pendulum-sac", "SACLoss", deactivate_vmap="true")
    vmapped = algorithm_of("pendulum-sac", "SACLoss")
    fast, slow = trained_state(looped), trained_state(vmapped)
    for key in fast:  # one matmul per critic against a batched one: the same up to float rounding
        torch.testing.assert_close(fast[key], slow[key], rtol=1e-5, atol=1e-6)


def test_targets_seated_elsewhere_are_moved_by_the_loss_own_update():
    """Seeds trained together seat each seed's parameters and targets in their stacks (new flat tensors): the
    seed's own update (DQN's, by frames) must move them there, not the flat tensors they left."""
    from rlplug.core.training import FlatParameters

    algorithm, plain = algorithm_of("pendulum-ddpg"), algorithm_of("pendulum-ddpg")
    for each in (algorithm, plain):
        for name, copies in each.loss_module.target_parameters.items():
            FlatParameters(list(copies), trained=False)  # re-seated, as the stacks do
            FlatParameters(each.learners.groups[name])
            with torch.no_grad():
                for p in each.learners.groups[name]:
                    p.add_(1.0)  # the online networks away from their targets
    assert isinstance(algorithm.update_targets, FlatTargets) and not algorithm.update_targets.holds()
    algorithm.update_targets(0.5)
    plain.loss_module.update_targets(0.5)
    moved, wanted = algorithm.loss_module.state_dict(), plain.loss_module.state_dict()
    assert any(not torch.equal(moved[key], value) for key, value in algorithm_of("pendulum-ddpg").loss_module
               .state_dict().items() if "target" in key)
    for key, value in wanted.items():
        assert torch.equal(moved[key], value), key


def test_torchrl_td3_loss_leaves_the_actor_out_where_td3_does_not_move_it_and_trains_as_its_whole_forward():
    """TD3 moves its actor every policy_delay steps; on the others TD3Loss computes the critics' term alone
    (value_loss), where TD3Loss.forward computes both and the algorithm discards the actor's."""
    import types

    from torchrl.objectives import TD3Loss

    delayed, whole = algorithm_of("pendulum-td3", "TD3Loss"), algorithm_of("pendulum-td3", "TD3Loss")
    whole.loss_module.forward = types.MethodType(TD3Loss.forward, whole.loss_module)  # both terms at every step
    calls = {delayed: 0, whole: 0}
    for algorithm in calls:
        def counted(tensordict, algorithm=algorithm, actor_loss=algorithm.loss_module.actor_loss):
            calls[algorithm] += 1
            return actor_loss(tensordict)
        algorithm.loss_module.actor_loss = counted
    fast, slow = trained_state(delayed), trained_state(whole)
    assert delayed.config.policy_delay == 2 and calls[whole] == STEPS and calls[delayed] == STEPS // 2
    assert fast.keys() == slow.keys()
    for key in fast:
        assert torch.equal(fast[key], slow[key]), key
    assert any(not torch.equal(fast[key], value) for key, value in
               algorithm_of("pendulum-td3", "TD3Loss").loss_module.state_dict().items() if "actor" in key)


def test_torchrl_td3_loss_with_the_actor_is_td3_loss_itself_and_without_it_its_critics_part():
    """With the actor, every output of TD3Loss.forward; without, its critics' term and diagnostics, and the TD errors
    it writes into the sample for prioritised replay, the same (the actor's term draws no random numbers)."""
    from torchrl.objectives import TD3Loss

    loss = algorithm_of("pendulum-td3", "TD3Loss").loss_module
    data = transitions(16, 0)

    def forward(function) -> tuple:
        torch.manual_seed(0)
        sample = data.clone()
        return function(sample), sample.get("td_error")

    (whole, whole_errors), (delayed, errors) = forward(TD3Loss.forward.__get__(loss)), forward(loss.forward)
    assert loss.with_actor and delayed.keys() == whole.keys()
    for key in whole.keys():
        assert torch.equal(delayed[key], whole[key]), key
    assert torch.equal(errors, whole_errors)
    loss.with_actor = False
    delayed, errors = forward(loss.forward)
    assert "loss_actor" not in delayed.keys() and "loss_qvalue" in delayed.keys()
    for key in delayed.keys():
        assert torch.equal(delayed[key], whole[key]), key
    assert torch.equal(errors, whole_errors)
