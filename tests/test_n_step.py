"""n-step returns (``algorithm.n_steps``, issue 41 item 4): the transitions the replay stores and the targets the
losses bootstrap from, against a plain Python reference on known steps (terminations and truncations inside the
window, several envs, windows across batches and a restart between them), a property test on random steps, every
loss that declares ``n_step_targets`` against its one-step self at gamma ** k, n_steps = 1 left as it was, and the
CLI (a run, and bad values refused in one line)."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import ROOT, one_line_error, run_cli
from hypothesis import given, settings
from hypothesis import strategies as st
from tensordict import TensorDict

import rlplug
from rlplug.plugins.algorithms.offpolicy.losses import Sample
from rlplug.plugins.algorithms.offpolicy.n_step import NStepReturns

GAMMA = 0.9


def value(observation: float) -> float:
    """The bootstrap's value of an observation in these tests: any function that tells observations apart."""
    return 0.5 * observation + 3.0


# -- the reference -----------------------------------------------------------------------------------------

def reference(rewards, terminated, ends, next_observations, gamma: float, n: int) -> list[float]:
    """Each step's n-step target from one env's steps, in plain Python: sum up to n discounted rewards, stopping
    after a step that ends the episode (``ends``: terminated, truncated, or cut by a restart); bootstrap with
    gamma ** k from the next observation of the last step summed, unless that step terminated."""
    targets = []
    for t in range(len(rewards)):
        total, k = 0.0, 0
        while k < n and t + k < len(rewards):
            total += gamma ** k * rewards[t + k]
            k += 1
            if ends[t + k - 1]:
                break
        last = t + k - 1
        bootstrap = 0.0 if terminated[last] else gamma ** k * value(next_observations[last])
        targets.append(total + bootstrap)
    return targets


class Steps:
    """One env's steps as a collector gives them: each observation a new number; the next observation the
    following step's observation, except after an episode's end (the final observation, then a reset one)."""

    def __init__(self, env: int, rewards, terminated, truncated, restarts=()):
        self.rewards, self.terminated = [float(r) for r in rewards], list(terminated)
        self.truncated = list(truncated)
        self.restarts = set(restarts)  # steps before which the collector restarts the env (no done flag)
        count = len(self.rewards)
        base = 1000.0 * env
        self.observations, self.next_observations = [], []
        fresh = base
        for t in range(count):
            self.observations.append(fresh if t == 0 or self.ended(t - 1) else self.next_observations[-1])
            fresh += 1
            self.next_observations.append(fresh + 0.5 if self.ended(t) else fresh)  # a final observation apart
            fresh += 1

    def ended(self, t: int) -> bool:
        return self.terminated[t] or self.truncated[t] or (t + 1) in self.restarts

    def targets(self, gamma: float, n: int) -> dict[float, float]:
        ends = [self.ended(t) for t in range(len(self.rewards))]
        targets = reference(self.rewards, self.terminated, ends, self.next_observations, gamma, n)
        return dict(zip(self.observations, targets))


def batches(envs: list[Steps], cuts: list[int]) -> list[TensorDict]:
    """The envs' steps as ``[envs, time]`` batches split at ``cuts`` (the collector's layout)."""
    def column(values, dtype=torch.float32):
        return torch.tensor(values, dtype=dtype).reshape(len(envs), -1, 1)

    whole = TensorDict({
        "observation": column([e.observations for e in envs]), "action": column([e.observations for e in envs]),
        "next": {"observation": column([e.next_observations for e in envs]),
                 "reward": column([e.rewards for e in envs]),
                 "terminated": column([e.terminated for e in envs], torch.bool),
                 "done": column([[a or b for a, b in zip(e.terminated, e.truncated)] for e in envs], torch.bool)},
    }, batch_size=[len(envs), len(envs[0].rewards)])
    edges = [0, *cuts, whole.batch_size[1]]
    return [whole[:, a:b] for a, b in zip(edges, edges[1:])]


def stored_targets(envs: list[Steps], cuts: list[int], n: int, gamma: float = GAMMA) -> dict[float, float]:
    """What rlplug stores of the batches, as each transition's target through ``Sample.target`` (by the
    observation it starts from)."""
    returns = NStepReturns(n)
    targets: dict[float, float] = {}
    for batch in batches(envs, cuts):
        stored = returns(batch, gamma)
        next_value = stored.get(("next", "observation")).double().apply_(value).float()
        target = Sample.of(stored).target(gamma, next_value)
        for observation, result in zip(stored.get("observation").reshape(-1).tolist(), target.reshape(-1).tolist()):
            assert observation not in targets, f"the step from {observation} was stored twice"
            targets[observation] = result
    return targets


def assert_targets(envs: list[Steps], cuts: list[int], n: int, gamma: float = GAMMA) -> None:
    """Every step but each env's last n - 1 (held for a batch that never comes) is stored once, with the
    reference's target."""
    got = stored_targets(envs, cuts, n, gamma)
    expected = {}
    for env in envs:
        kept = env.observations[:max(0, len(env.observations) - (n - 1))]
        expected.update({o: t for o, t in env.targets(gamma, n).items() if o in kept})
    assert got.keys() == expected.keys()
    for observation, target in expected.items():
        assert got[observation] == pytest.approx(target, rel=1e-5, abs=1e-4), observation


# -- known steps -------------------------------------------------------------------------------------------

def test_known_sums_and_gamma_powers_in_one_batch():
    """Rewards 1, 2, 3, ..., gamma 0.9, n = 3, no episode end: every target is r_t + 0.9 r_t+1 + 0.81 r_t+2
    + 0.729 V(s_t+3), written out by hand for the first step."""
    env = Steps(0, range(1, 9), [False] * 8, [False] * 8)
    got = stored_targets([env], [], 3)
    first = 1 + 0.9 * 2 + 0.81 * 3 + 0.729 * value(env.next_observations[2])
    assert got[env.observations[0]] == pytest.approx(first, rel=1e-6)
    assert_targets([env], [], 3)


def test_allowed_actions_ride_with_the_window():
    """An env that masks actions: each stored transition keeps its own step's mask and, as its next one, the mask
    after the window's last step (what a masked target's max reads), across a batch cut and at an episode end."""
    env = Steps(0, range(1, 9), [False, False, False, True, False, False, False, False], [False] * 8)
    mask = torch.tensor([[t % 3 != a for a in range(3)] for t in range(9)])  # step t forbids action t % 3
    parts = batches([env], [5])
    returns, stored = NStepReturns(3), []
    for part, start in zip(parts, (0, 5)):
        length = part.batch_size[1]
        part.set("action_mask", mask[start:start + length].unsqueeze(0))
        part.set(("next", "action_mask"), mask[start + 1:start + length + 1].unsqueeze(0))
        stored.append(returns(part, 0.9))
    transitions = torch.cat(stored)
    first = {o: t for t, o in enumerate(env.observations)}
    for row in transitions:
        t = first[row.get("observation").item()]
        k = int(row.get("steps_to_next_obs").item())
        assert k == min(3, 4 - t) if t <= 3 else k == 3
        assert torch.equal(row.get("action_mask"), mask[t])
        assert torch.equal(row.get(("next", "action_mask")), mask[t + k])


def test_a_termination_inside_the_window_stops_the_sum_and_the_bootstrap():
    """Terminated at step 2: the step 0 target is 1 + 0.9 * 2 + 0.81 * 3 and nothing after; step 1's is
    2 + 0.9 * 3; steps after it start a new episode."""
    terminated = [False, False, True, False, False, False, False]
    env = Steps(0, range(1, 8), terminated, [False] * 7)
    got = stored_targets([env], [], 3)
    assert got[env.observations[0]] == pytest.approx(1 + 0.9 * 2 + 0.81 * 3, rel=1e-6)
    assert got[env.observations[1]] == pytest.approx(2 + 0.9 * 3, rel=1e-6)
    assert got[env.observations[2]] == pytest.approx(3, rel=1e-6)
    assert_targets([env], [], 3)


def test_a_truncation_inside_the_window_bootstraps_from_the_truncated_steps_next_observation():
    """Truncated (a time limit) at step 1: step 0 sums two rewards and bootstraps with 0.9 ** 2 from the final
    observation of step 1, not from the reset observation that follows."""
    truncated = [False, True, False, False, False, False]
    env = Steps(0, range(1, 7), [False] * 6, truncated)
    got = stored_targets([env], [], 3)
    final = env.next_observations[1]
    assert final != env.observations[2]
    assert got[env.observations[0]] == pytest.approx(1 + 0.9 * 2 + 0.81 * value(final), rel=1e-6)
    assert got[env.observations[1]] == pytest.approx(2 + 0.9 * value(final), rel=1e-6)
    assert_targets([env], [], 3)


def test_several_envs_each_with_their_own_ends():
    envs = [Steps(0, range(1, 10), [False, False, False, True, False, False, False, False, False], [False] * 9),
            Steps(1, range(10, 19), [False] * 9, [False, True, False, False, False, False, True, False, False]),
            Steps(2, [0.5] * 9, [False] * 9, [False] * 9)]
    assert_targets(envs, [], 3)


@pytest.mark.parametrize("cuts", [[1], [2, 4], [1, 2, 3, 4, 5, 6, 7], [3, 6]])
def test_windows_go_on_across_batches(cuts):
    """Batches of any length (one step each, as SAC's steps_per_update = 1 gives them) make the same
    transitions as one batch: each env's last n - 1 steps wait for the next batch."""
    envs = [Steps(0, range(1, 10), [False] * 5 + [True] + [False] * 3, [False] * 9),
            Steps(1, range(1, 10), [False] * 9, [False] * 2 + [True] + [False] * 6)]
    assert_targets(envs, cuts, 3)
    assert stored_targets(envs, cuts, 3) == pytest.approx(stored_targets(envs, [], 3))


def test_a_restart_between_batches_ends_the_held_windows_where_they_are():
    """The collector restarted the env between batches (a checkpoint): no done flag, but the next batch's first
    observation is not the held steps' last next observation, so their windows end with the held steps and
    bootstrap from it with the matching power."""
    env = Steps(0, range(1, 9), [False] * 8, [False] * 8, restarts=[4])
    assert env.observations[4] != env.next_observations[3]
    got = stored_targets([env], [4], 3)
    assert got[env.observations[3]] == pytest.approx(4 + 0.9 * value(env.next_observations[3]), rel=1e-6)
    assert got[env.observations[2]] == pytest.approx(3 + 0.9 * 4 + 0.81 * value(env.next_observations[3]),
                                                     rel=1e-6)
    assert_targets([env], [4], 3)


def test_the_held_steps_survive_a_checkpoint():
    env = Steps(0, range(1, 9), [False] * 8, [False] * 8)
    first, second = batches([env], [4])
    returns = NStepReturns(3)
    returns(first, GAMMA)
    again = NStepReturns(3)
    again.load_state_dict(returns.state_dict())
    assert torch.equal(again(second, GAMMA).get(("next", "reward")), returns(second, GAMMA).get(("next", "reward")))


# -- random steps ------------------------------------------------------------------------------------------

@st.composite
def episodes(draw):
    envs, length = draw(st.integers(1, 3)), draw(st.integers(1, 24))
    steps = []
    for _ in range(envs):
        rewards = draw(st.lists(st.integers(-5, 5), min_size=length, max_size=length))
        ends = draw(st.lists(st.sampled_from(["", "", "", "terminated", "truncated"]), min_size=length,
                             max_size=length))
        steps.append((rewards, [e == "terminated" for e in ends], [e == "truncated" for e in ends]))
    cuts = sorted(draw(st.sets(st.integers(1, max(1, length - 1)), max_size=6)) - {length})
    restarts = draw(st.sets(st.sampled_from(cuts), max_size=2)) if cuts else set()
    return [Steps(i, *s, restarts=restarts) for i, s in enumerate(steps)], cuts


@settings(max_examples=150, deadline=None)
@given(case=episodes(), n=st.integers(2, 6), gamma=st.floats(0.3, 1.0))
def test_random_steps_give_the_references_targets(case, n, gamma):
    envs, cuts = case
    assert_targets(envs, cuts, n, gamma)


# -- the losses --------------------------------------------------------------------------------------------

def test_n_steps_1_stores_and_targets_as_before():
    """n_steps = 1 stores the one-step transitions exactly (no steps_to_next_obs), and Sample.target is the
    one-step formula, bit for bit."""
    from rlplug.plugins.algorithms.offpolicy.base import replay_transitions

    env = rlplug.make("env", "gym", id="CartPole-v1", num_envs=2)
    dqn = rlplug.make("algorithm", "dqn", observation_spec=env.observation_spec, action_spec=env.action_spec,
                      total_frames=1000, q_network={"use": "mlp", "hidden": [8]})
    assert dqn.n_step_writer is None
    batch = collected(env, dqn, steps=3, batches=1)[0]
    dqn.store(batch)
    stored = dqn.replay.sample(len(dqn.replay))
    assert "steps_to_next_obs" not in stored.keys()
    expected = replay_transitions(batch, dqn.config, "observation")
    assert len(dqn.replay) == expected.numel()
    sample = Sample.of(expected)
    next_value = torch.randn(expected.numel(), 1)
    assert torch.equal(sample.target(0.9, next_value),
                       sample.reward + 0.9 * sample.not_terminated * next_value)


def collected(env, algorithm, steps: int, batches: int) -> list:
    from rlplug.core.collect import Collector

    collector = Collector(env, algorithm.policy, frames_per_batch=steps * 2, seed=0)
    return [collector.collect() for _ in range(batches)]


def test_the_replay_of_a_real_run_holds_the_references_transitions():
    """CartPole, 2 envs, 2 steps per update, n = 3: what the algorithm stores from the collector's own batches
    (windows across every batch boundary, episode ends) is the reference's sums, k and next observations."""
    env = rlplug.make("env", "gym", id="CartPole-v1", num_envs=2, seed=3)
    dqn = rlplug.make("algorithm", "dqn", observation_spec=env.observation_spec, action_spec=env.action_spec,
                      total_frames=1000, n_steps=3, gamma=GAMMA, q_network={"use": "mlp", "hidden": [8]})
    raw = collected(env, dqn, steps=2, batches=30)
    for batch in raw:
        dqn.store(batch)
    whole = torch.cat(raw, dim=1)  # [2 envs, 60 steps]
    stored = dqn.replay.sample(len(dqn.replay))  # with replacement; every row checked against the reference
    assert len(dqn.replay) == 2 * (60 - 2)
    assert bool(whole.get(("next", "done")).any())
    index = {}
    for e in range(2):
        reward = whole.get(("next", "reward"))[e, :, 0].tolist()
        done = whole.get(("next", "done"))[e, :, 0].tolist()
        terminated = whole.get(("next", "terminated"))[e, :, 0].tolist()
        for t in range(58):
            k = next((j + 1 for j in range(3) if done[t + j]), 3)
            total = sum(GAMMA ** j * reward[t + j] for j in range(k))
            index[tuple(whole.get("observation")[e, t].tolist())] = (
                total, k, whole.get(("next", "observation"))[e, t + k - 1], terminated[t + k - 1])
    for row in range(stored.numel()):
        total, k, next_observation, terminated = index[tuple(stored.get("observation")[row].tolist())]
        assert stored.get(("next", "reward"))[row].item() == pytest.approx(total, rel=1e-6)
        assert stored.get("steps_to_next_obs")[row].item() == k
        assert torch.equal(stored.get(("next", "observation"))[row], next_observation)
        assert stored.get(("next", "terminated"))[row].item() == terminated
    assert set(stored.get("steps_to_next_obs").reshape(-1).tolist()) <= {1, 2, 3}


def test_dqns_target_with_three_steps():
    """DQN, n = 3 on a tiny network: the TD target is r_n + gamma ** k max_a Q'(s_t+k, a) (1 - terminated),
    row by row with k = 3, 2, 1 and a terminated row."""
    from types import SimpleNamespace

    env = rlplug.make("env", "gym", id="CartPole-v1")
    torch.manual_seed(0)
    q = rlplug.make("network", "mlp", role="q_values", hidden=[4], observation_spec=env.observation_spec,
                    action_spec=env.action_spec)
    loss = rlplug.make("loss", "dqn-loss", networks={"q_network": q}, action_spec=env.action_spec,
                       observation_spec=env.observation_spec, settings=SimpleNamespace(gamma=GAMMA, double=False))
    with torch.no_grad():
        for p in loss.target_value_network.parameters():
            p.add_(0.1)  # the target network differs from the online one
    rows = 4
    data = TensorDict({
        "observation": torch.randn(rows, 4), "action": torch.nn.functional.one_hot(torch.tensor([0, 1, 1, 0]), 2),
        "steps_to_next_obs": torch.tensor([[3], [2], [1], [3]]),
        "next": {"observation": torch.randn(rows, 4), "reward": torch.tensor([[5.23], [2.0], [1.0], [4.0]]),
                 "terminated": torch.tensor([[False], [False], [False], [True]])}}, [rows])
    loss(data)
    with torch.no_grad():
        next_max = loss.target_value_network(data.get("next").clone()).get("action_value").max(-1).values
        q_taken = q(data.clone()).get("action_value").gather(-1, data.get("action").argmax(-1, keepdim=True))[:, 0]
    k = data.get("steps_to_next_obs")[:, 0].double()
    kept = 1.0 - data.get(("next", "terminated"))[:, 0].double()
    target = data.get(("next", "reward"))[:, 0].double() + GAMMA ** k * next_max.double() * kept
    torch.testing.assert_close(data.get("td_error").double(), (q_taken.double() - target).abs(), rtol=1e-5,
                               atol=1e-5)
    assert target[0].item() == pytest.approx(5.23 + 0.729 * next_max[0].item(), rel=1e-5)


#: every off-policy algorithm and loss that takes n_steps > 1 (REDQ's TorchRL loss refuses it)
LOSSES = [("dqn", "dqn-loss"), ("dqn", "DQNLoss"), ("c51", "DistributionalDQNLoss"),
          ("discrete-sac", "DiscreteSACLoss"), ("ddpg", "ddpg-loss"), ("ddpg", "DDPGLoss"), ("td3", "td3-loss"),
          ("td3", "TD3Loss"), ("sac", "sac-loss"), ("sac", "SACLoss"), ("crossq", "crossq-loss"),
          ("crossq", "CrossQLoss"), ("mpo", "mpo-loss"), ("tqc", "tqc-loss"), ("tqc", "TQCLoss")]


ENV = {"dqn": "CartPole-v1", "c51": "CartPole-v1", "discrete-sac": "CartPole-v1", "redq": "Pendulum-v1",
       **dict.fromkeys(["ddpg", "td3", "sac", "crossq", "mpo", "tqc", "sac-n"], "Pendulum-v1")}


def built(algorithm: str, loss: str, **keys):
    env = rlplug.make("env", "gym", id=ENV[algorithm])
    torch.manual_seed(0)
    return rlplug.make("algorithm", algorithm, observation_spec=env.observation_spec, action_spec=env.action_spec,
                       total_frames=1000, loss={"use": loss}, **keys)


@pytest.mark.parametrize("algorithm, loss", LOSSES)
def test_every_loss_bootstraps_with_gamma_to_the_steps_summed(algorithm, loss):
    """A sample whose transitions each sum 3 rewards gives the loss, at gamma 0.9, what the same sample of
    one-step transitions gives it at 0.9 ** 3 (the same networks, the same random draws)."""
    assert_bootstraps_with_gamma_to_the_steps_summed(algorithm, loss)


def test_a_kit_algorithm_from_a_plugin_takes_n_steps():
    """The example plugin's SAC-N, written on the kit alone, gets n-step returns as the built-ins do."""
    pytest.importorskip("rlplug_example_plugin")  # examples/rlplug-example-plugin, installed for the test suite
    assert_bootstraps_with_gamma_to_the_steps_summed("sac-n", "sac-n-loss")


def assert_bootstraps_with_gamma_to_the_steps_summed(algorithm: str, loss: str) -> None:
    n_step = built(algorithm, loss, gamma=GAMMA, n_steps=3)
    one_step = built(algorithm, loss, gamma=GAMMA ** 3)
    assert n_step.n_step_writer is not None and one_step.n_step_writer is None
    env = rlplug.make("env", "gym", id=ENV[algorithm], num_envs=2)
    batch = collected(env, one_step, steps=16, batches=1)[0]
    one_step.store(batch)
    sample = one_step.replay.sample(16)
    sample.set(("next", "terminated"), torch.arange(16).reshape(16, 1) % 5 == 0)  # some bootstraps cut
    outputs = []
    for algo, data in ((n_step, sample.clone().set("steps_to_next_obs", torch.full((16, 1), 3))),
                       (one_step, sample.clone())):
        torch.manual_seed(1)
        out = algo.loss_module(data)
        outputs.append(({key: value.detach() for key, value in out.items() if value.numel() == 1},
                        data.get("td_error", None)))
    (terms, td_error), (expected_terms, expected_td_error) = outputs
    assert terms.keys() == expected_terms.keys()
    for key in terms:
        torch.testing.assert_close(terms[key], expected_terms[key], rtol=1e-4, atol=1e-5, msg=key)
    if td_error is not None:
        torch.testing.assert_close(td_error, expected_td_error, rtol=1e-4, atol=1e-5)
    # and the power matters: at gamma 0.9 without steps_to_next_obs the critic's term differs
    torch.manual_seed(1)
    plain = n_step.loss_module(sample.clone())
    critic = next(key for key in terms if key.startswith("loss") and "actor" not in key and "alpha" not in key)
    assert not math.isclose(float(plain[critic].detach()), float(terms[critic]), rel_tol=1e-4), critic


def test_a_kit_loss_without_n_step_targets_is_refused():
    """A plugin's loss that does not say it discounts by gamma ** steps_to_next_obs would bootstrap n steps
    on with gamma: refused by name when the algorithm is built (REDQ's TorchRL loss is one)."""
    from rlplug.errors import UserError

    with pytest.raises(UserError, match="REDQLoss.*n_step_targets") as raised:
        built("redq", "REDQLoss", n_steps=3, critics=3)
    assert raised.value.path == "algorithm.n_steps"


# -- the CLI -----------------------------------------------------------------------------------------------

RECIPE = ROOT / "recipes" / "cartpole-dqn.toml"


@pytest.mark.slow
def test_a_dqn_run_with_three_steps_finishes(tmp_path):
    result = run_cli("run", str(RECIPE), "--out", str(tmp_path / "run"), "--set", "algorithm.n_steps=3",
                     "--set", "run.total_frames=2000", "--set", "eval.every_frames=0")
    assert result.returncode == 0, result.stderr[-2000:]
    assert (tmp_path / "run" / "checkpoint.pt").exists()


@pytest.mark.slow
@pytest.mark.parametrize("value, fragment", [("0", "must be >= 1"), ("-2", "must be >= 1"),
                                             ("2.5", "expected an integer"), ("5000", "must be at most 1000")])
def test_bad_n_steps_are_one_line(tmp_path, value, fragment):
    one_line_error(run_cli("run", str(RECIPE), "--out", str(tmp_path / "run"), "--set", f"algorithm.n_steps={value}"),
                   "cartpole-dqn.toml", "algorithm.n_steps", fragment)
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
@pytest.mark.parametrize("recipe, flags, fragment", [
    ("pendulum-redq.toml", [], "REDQLoss"),
    ("pendulum-ddpg-lstm.toml", [], "recurrent networks"),
    ("cartpole-dqn.toml", ["--set", "algorithm.replay_buffer.capacity=2", "--set", "algorithm.batch_size=2"],
     "capacity (2)"),
])
def test_n_steps_that_cannot_apply_are_one_line(tmp_path, recipe, flags, fragment):
    one_line_error(run_cli("run", str(ROOT / "recipes" / recipe), "--out", str(tmp_path / "run"),
                           "--set", "algorithm.n_steps=3", *flags), "algorithm.n_steps", fragment)
