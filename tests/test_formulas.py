"""Formulas that comparisons between two of rlplug's own roads cannot pin, each against a known answer: TD3's
delayed policy updates (alone and with seeds trained together, which share the algorithm's rule, so comparing
them says nothing about the rule), SAC's loss against TorchRL's ``SACLoss`` on twin critics that disagree (the
lower one in the target), and the interquartile mean over seeds with an outlier, in aggregate.json and in a tune
trial's value (with two seeds, as the other tests run, it equals the mean)."""

from __future__ import annotations

import json
import textwrap

import pytest
import torch
from conftest import ROOT, built_algorithm, rlplug_cli
from tensordict import TensorDict
from test_offpolicy_losses import loss_of, network, replay_sample

# -- TD3: the actor and the targets move every policy_delay gradient steps -----------------------------------

TD3 = ROOT / "recipes" / "pendulum-td3.toml"
#: one gradient step per update, the actor every third
DELAYED = ["algorithm.steps_per_update=64", "algorithm.gradient_steps=1", "algorithm.batch_size=32",
           "algorithm.learning_starts=0", "algorithm.policy_delay=3"]
#: what moves at gradient steps 1 to 6 with policy_delay = 3
EVERY_THIRD = [{"critic"}, {"critic"}, {"critic", "actor", "targets"}] * 2


def flat(parameters) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in parameters])


def snapshot(algorithm) -> dict[str, torch.Tensor]:
    """The critics, the actor and every target network's parameters, each as one flat copy."""
    targets = [p for group in algorithm.loss_module.target_parameters.values() for p in group]
    return {"critic": flat(algorithm.learners.groups["critic"]), "actor": flat(algorithm.learners.groups["actor"]),
            "targets": flat(targets)}


def moved(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor]) -> set[str]:
    return {name for name in before if not torch.equal(before[name], after[name])}


def test_td3_moves_its_actor_and_targets_every_policy_delay_steps():
    algorithm, (batch,) = built_algorithm(TD3, 0, DELAYED)
    seen = []
    for _ in EVERY_THIRD:
        before = snapshot(algorithm)
        algorithm.update(batch.clone())
        seen.append(moved(before, snapshot(algorithm)))
    assert seen == EVERY_THIRD


def test_td3_seeds_trained_together_move_their_actors_and_targets_every_policy_delay_steps():
    seeds = [0, 5]
    built = [built_algorithm(TD3, seed, DELAYED) for seed in seeds]
    algorithms = [algorithm for algorithm, _ in built]
    together = algorithms[0].batched_update(algorithms, seeds)
    seen = []
    for _ in EVERY_THIRD:
        before = [snapshot(algorithm) for algorithm in algorithms]
        together.update([batch.clone() for _, (batch,) in built])
        seen.append([moved(b, snapshot(algorithm)) for b, algorithm in zip(before, algorithms)])
    assert seen == [[step, step] for step in EVERY_THIRD]


# -- SAC: rlplug's sac-loss is TorchRL's SACLoss -------------------------------------------------------------

def fixed_noise(shape: torch.Size, like: torch.Tensor) -> torch.Tensor:
    """Noise fixed by its shape: the losses draw their actions in different orders (TorchRL's the next ones
    first), and this gives every one the same actions."""
    return torch.linspace(-1.5, 1.5, shape.numel(), dtype=like.dtype, device=like.device).reshape(shape)


def noise_of_its_shape(self, sample_shape=()) -> torch.Tensor:
    """``Normal.rsample`` (TorchRL's losses' TanhNormal) with :func:`fixed_noise`."""
    return self.loc + fixed_noise(torch.Size(sample_shape) + self.batch_shape, self.loc) * self.scale


def known_actions(monkeypatch) -> None:
    """Every tanh-normal action drawn with :func:`fixed_noise`: TorchRL's (through ``Normal.rsample``) and
    rlplug's (``TanhNormalSampling.noise``)."""
    from rlplug.core.acting import TanhNormalSampling

    monkeypatch.setattr(torch.distributions.Normal, "rsample", noise_of_its_shape)
    monkeypatch.setattr(TanhNormalSampling, "noise", staticmethod(fixed_noise))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_our_sac_loss_is_torchrls_sac_loss_with_twin_critics_that_disagree(monkeypatch, seed):
    """The same actor, the same two critics (TorchRL's twins made ours, and their targets), the same sample and
    the same actions: every loss term and every gradient (actor, both critics, the temperature) equal. The
    target bootstraps from the lower twin in both; its mean, or one twin, gives other critic terms."""
    known_actions(monkeypatch)
    actor = network("policy", "continuous", seed)
    critics = [network("q_value", "continuous", seed + 1), network("q_value", "continuous", seed + 2)]
    networks = {"policy": actor, "critic": critics[0], "critics": critics}
    ours, theirs = loss_of("sac-loss", networks, "continuous"), loss_of("SACLoss", networks, "continuous")
    twins = torch.stack([TensorDict.from_module(critic) for critic in critics]).detach()
    theirs.qvalue_network_params.data.update_(twins)
    theirs.target_qvalue_network_params.data.update_(twins)
    data = replay_sample("continuous", 64, seed)
    with torch.no_grad():
        q = [critic(data.clone()).get("state_action_value") for critic in critics]
    assert (q[0] - q[1]).abs().mean() > 0.05, "the twins disagree, so the lower one matters"

    terms, gradients = {}, {}
    for name, loss in (("ours", ours), ("theirs", theirs)):
        out = loss(data.clone())
        terms[name] = {key: float(out[key].detach()) for key in ("loss_actor", "loss_qvalue", "loss_alpha")}
        groups = [loss.parameter_groups[group] for group in ("actor", "critic", "entropy")]
        total = out["loss_actor"] + out["loss_qvalue"] + out["loss_alpha"]
        grads = torch.autograd.grad(total, [p for group in groups for p in group])
        gradients[name] = dict(zip(("actor", "critic", "entropy"), split_as(grads, groups)))
    for key, value in terms["theirs"].items():
        assert terms["ours"][key] == pytest.approx(value, rel=1e-5, abs=1e-6), key
    for mine, their in zip(gradients["ours"]["actor"], gradients["theirs"]["actor"]):
        torch.testing.assert_close(mine, their, rtol=1e-4, atol=1e-6)
    per_twin = len(gradients["theirs"]["critic"])  # TorchRL's: each parameter with the twins stacked first
    for index, their in enumerate(gradients["theirs"]["critic"]):
        mine = torch.stack([gradients["ours"]["critic"][index], gradients["ours"]["critic"][per_twin + index]])
        torch.testing.assert_close(mine, their, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(gradients["ours"]["entropy"][0], gradients["theirs"]["entropy"][0])


def split_as(values, groups) -> list[list]:
    values, parts = list(values), []
    for group in groups:
        parts.append(values[:len(group)])
        values = values[len(group):]
    return parts


# -- the interquartile mean over seeds -----------------------------------------------------------------------

@pytest.mark.parametrize("returns, iqm", [
    ([10.0, 20.0, 1000.0, 30.0], 25.0),  # the middle two of four
    ([1000.0, 3.0, -400.0, 5.0, 4.0, 2.0, 7.0, 6.0], 4.5),  # the middle four of eight: 3, 4, 5, 6
])
def test_the_aggregates_iqm_is_the_mean_of_the_middle_half_not_of_all(returns, iqm):
    """aggregate.json's IQM, and the value of a tune trial over seeds, which is that IQM too."""
    from rlplug.run.statistics import aggregate_returns
    from rlplug.run.tune import score

    result = aggregate_returns(dict(enumerate(returns)), reps=100)
    assert result["iqm"] == pytest.approx(iqm)
    assert result["mean"] == pytest.approx(sum(returns) / len(returns))
    low, high = result["ci95"]["iqm"]
    assert low <= iqm <= high
    assert score(returns) == pytest.approx(iqm)


def test_the_same_returns_get_the_same_interval_whatever_numpy_drew_before_and_whatever_is_beside_them():
    # rliable's bootstrap draws from numpy's global generator: a bench's report gave one entry's interval as
    # [58.5, 227] in its progress line and [76.2, 227] in report.json, written after other entries' estimates
    import numpy as np

    from rlplug.run.statistics import interval_estimates

    returns = np.array([[40.9], [227.0], [93.9], [223.8], [226.9]])
    np.random.seed(1)
    alone = interval_estimates({"dqn": returns}, None, reps=200)["dqn"]
    np.random.seed(2)
    state = np.random.get_state()
    beside = interval_estimates({"other": returns * 2, "dqn": returns}, None, reps=200)["dqn"]
    assert beside == alone
    assert np.random.rand() == (np.random.set_state(state), np.random.rand())[1], "numpy's own draws left alone"


#: the final eval return each run seed's evaluation gets from the planted env
PLANTED = {0: 10.0, 1: 20.0, 2: 30.0, 3: 1000.0}


def planted_env_plugin() -> str:
    """A plugin registering the gymnasium id ``PlantedReturn-v0``: one-step episodes whose reward is
    ``PLANTED[run seed]`` in that run's evaluation (reset with seed ``run.seed + EVAL_SEED_OFFSET``), 0 in
    training."""
    from rlplug.recipe import EVAL_SEED_OFFSET

    return f"""
import gymnasium
import numpy as np

PLANTED = {PLANTED!r}


class PlantedReturn(gymnasium.Env):
    observation_space = gymnasium.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gymnasium.spaces.Discrete(2)
    reward = 0.0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:
            self.reward = PLANTED.get(seed - {EVAL_SEED_OFFSET}, 0.0)
        return np.zeros(1, np.float32), {{}}

    def step(self, action):
        return np.zeros(1, np.float32), self.reward, True, False, {{}}


gymnasium.register("PlantedReturn-v0", entry_point=PlantedReturn)
"""


@pytest.mark.slow
def test_run_with_four_seeds_writes_the_iqm_of_their_returns_to_aggregate_json(tmp_path, install):
    """``run --seeds 0-3`` whose final evaluations return 10, 20, 30 and 1000: aggregate.json's IQM is 25, its
    mean 265."""
    plugins = install({"planted": planted_env_plugin()}, where=tmp_path / "plugins")
    recipe = tmp_path / "planted.toml"
    recipe.write_text(textwrap.dedent("""
        [run]
        total_frames = 64

        [env]
        use = "gym"
        id = "PlantedReturn-v0"

        [algorithm]
        use = "ppo"
        frames_per_batch = 32
        minibatch_size = 32
        epochs = 1

        [eval]
        episodes = 1

        [[loggers]]
        use = "csv"
    """))
    out = tmp_path / "seeds"
    result = rlplug_cli("run", str(recipe), "--seeds", "0-3", "--out", str(out), path=plugins, timeout=300)
    assert result.returncode == 0, result.stderr
    aggregate = json.loads((out / "aggregate.json").read_text())
    assert aggregate["seeds"] == {str(seed): value for seed, value in PLANTED.items()}
    assert aggregate["iqm"] == pytest.approx(25.0)
    assert aggregate["mean"] == pytest.approx(265.0)


def test_a_checkpoints_digest_reads_an_expanded_tensor_as_its_values():
    """A TorchRL env's action bounds can be one number expanded to the action's shape (stride 0), which
    ``digest`` could not view as bytes: every checkpoint of such a run failed once checkpoints kept the bounds."""
    from rlplug.run.checkpoints import digest

    expanded = torch.tensor(2.0).expand(1)
    assert expanded.stride() == (0,)
    assert digest({"low": expanded}) == digest({"low": torch.tensor([2.0])})
    assert digest({"low": expanded}) != digest({"low": torch.tensor([2.5])})
