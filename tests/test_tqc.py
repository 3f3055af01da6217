"""TQC on the algorithm kit: rlplug's tqc-loss and TorchRL's TQCLoss built through their registered factories
from critics of quantiles, each against a plain reference of TQC (the target pools every target critic's atoms,
drops the highest, each critic's quantile Huber loss on the rest; the actor ascends the mean of all atoms) and
against each other, the refusals in one line, ``rlplug show`` and ``rlplug list``, and a short CLI run that takes
``rlplug set`` and resumes."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import ROOT, one_line_error, run_cli, stopped_then_set_and_resumed
from tensordict import TensorDict
from test_formulas import known_actions
from test_offpolicy_losses import loss_of, replay_sample, specs

import rlplug
from rlplug.networks import Role
from rlplug.run import checkpoints

TQC = ROOT / "recipes" / "pendulum-tqc.toml"
#: a run of seconds: small batches, few frames, no evaluation until the end
TINY = ["--set", "run.total_frames=300", "--set", "eval.every_frames=0", "--set", "eval.episodes=1",
        "--set", "algorithm.batch_size=32", "--set", "algorithm.learning_starts=64"]


def critic_of_quantiles(quantiles: int, seed: int):
    torch.manual_seed(seed)
    return rlplug.make("network", "mlp", role=Role("q_value", outputs=quantiles), hidden=[16], **specs("continuous"))


def atoms(critic, parameters, observation, action) -> torch.Tensor:
    """The critic with one ensemble member's ``parameters`` swapped in: its atoms of (observation, action)."""
    with parameters.to_module(critic):
        data = TensorDict({"observation": observation, "action": action}, observation.shape[:-1])
        return critic(data).get("state_action_value")


def huber(delta: torch.Tensor) -> torch.Tensor:
    return torch.where(delta.abs() <= 1, 0.5 * delta**2, delta.abs() - 0.5)


def tqc_networks(seed: int, critics: int, quantiles: int) -> dict:
    """A tanh-Gaussian actor and ``critics`` critics of ``quantiles`` atoms, each its own seeded parameters."""
    torch.manual_seed(seed)
    actor = rlplug.make("network", "mlp", role="policy", hidden=[16], log_std="state", squash="tanh",
                        **specs("continuous"))
    built = [critic_of_quantiles(quantiles, seed + 1 + i) for i in range(critics)]
    return {"policy": actor, "critic": built[0], "critics": built}


def critic_parameters(loss, built: list) -> tuple[list, list]:
    """Each critic's online and target parameters, as TensorDicts: TorchRL's TQCLoss keeps them stacked, rlplug's
    tqc-loss keeps the critics themselves and a target copy of each."""
    if hasattr(loss, "qvalue_network_params"):
        online, targets = loss.qvalue_network_params, loss.target_qvalue_network_params
        return [online[i] for i in range(len(built))], [targets[i] for i in range(len(built))]
    return ([TensorDict.from_module(critic) for critic in built],
            [TensorDict.from_module(target) for target in loss.target_critics])


@pytest.mark.parametrize("name", ["tqc-loss", "TQCLoss"])
@pytest.mark.parametrize("seed, critics, quantiles, drop", [(0, 2, 5, 2), (1, 3, 4, 1), (2, 2, 6, 0)])
def test_tqc_loss_terms_match_a_plain_reference(monkeypatch, name, seed, critics, quantiles, drop):
    known_actions(monkeypatch)
    networks = tqc_networks(seed, critics, quantiles)
    actor, built = networks["policy"], networks["critics"]
    loss = loss_of(name, networks, "continuous", critics=critics, quantiles=quantiles,
                   top_quantiles_to_drop_per_net=drop)
    online, targets = critic_parameters(loss, built)
    sample = replay_sample("continuous", 8, seed)
    for i, critic in enumerate(built):  # each critic its own parameters, not copies of the first
        with torch.no_grad():
            own = critic(sample.select("observation", "action")).get("state_action_value")
            torch.testing.assert_close(atoms(built[0], online[i], sample["observation"], sample["action"]), own)
        assert own.shape == (8, quantiles)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # targets that differ from the online critics and from each other
        for target in targets:
            target.apply_(lambda p: p.add_(torch.randn(p.shape, generator=generator)))
    data = replay_sample("continuous", 32, seed)
    out = loss(data.clone())

    with torch.no_grad():
        def draw(observation):
            distribution = actor.get_dist(TensorDict({"observation": observation}, observation.shape[:-1]))
            action = distribution.rsample()
            return action, distribution.log_prob(action)

        action, log_prob = draw(data["observation"])
        next_action, next_log_prob = draw(data["next", "observation"])
        alpha, critic = loss.log_alpha.exp(), built[0]
        pooled = torch.cat([atoms(critic, targets[j], data["next", "observation"], next_action)
                            for j in range(critics)], -1)  # [batch, critics x quantiles]
        kept = pooled.sort(-1).values[:, :critics * (quantiles - drop)]
        reward, terminated = data["next", "reward"], data["next", "terminated"].float()
        target = reward + 0.9 * (1 - terminated) * (kept - alpha * next_log_prob.unsqueeze(-1))
        z = torch.stack([atoms(critic, online[i], data["observation"], data["action"]) for i in range(critics)])
        delta = target[None, :, None, :] - z[..., None]  # [critics, batch, quantiles, kept]
        fractions = ((torch.arange(quantiles) + 0.5) / quantiles).view(quantiles, 1)
        per_critic = ((fractions - (delta < 0).float()).abs() * huber(delta)).mean((-1, -2))  # [critics, batch]
        critic_term = per_critic.sum(0).mean()
        z_new = torch.stack([atoms(critic, online[i], data["observation"], action) for i in range(critics)])
        actor_term = (alpha * log_prob - z_new.mean((0, -1))).mean()
    assert float(out["loss_qvalue"].detach()) == pytest.approx(float(critic_term), rel=1e-4)
    assert float(out["loss_actor"].detach()) == pytest.approx(float(actor_term), rel=1e-4, abs=1e-6)
    if drop:  # the highest atoms dropped: keeping them all gives another critic term
        whole = reward + 0.9 * (1 - terminated) * (pooled - alpha * next_log_prob.unsqueeze(-1))
        delta = whole[None, :, None, :] - z[..., None]
        untruncated = ((fractions - (delta < 0).float()).abs() * huber(delta)).mean((-1, -2)).sum(0).mean()
        assert float(untruncated) != pytest.approx(float(critic_term), rel=1e-3)
    assert set(loss.parameter_groups) == {"actor", "critic", "entropy"}


@pytest.mark.parametrize("seed, critics, quantiles, drop", [(0, 2, 5, 2), (3, 3, 4, 1)])
def test_tqc_loss_is_torchrls_tqc_loss_in_terms_gradients_and_priorities(monkeypatch, seed, critics, quantiles, drop):
    """rlplug's tqc-loss against TorchRL's TQCLoss on the same networks, targets and actions: every term, the
    gradient of their sum for the actor, each critic and alpha, and the priorities written back. (Prioritised
    replay's weights average as in every rlplug loss, ``mean(w * loss)``; TorchRL's divide by ``sum(w)``.)"""
    known_actions(monkeypatch)
    networks = tqc_networks(seed, critics, quantiles)
    actor, built = networks["policy"], networks["critics"]
    keys = dict(critics=critics, quantiles=quantiles, top_quantiles_to_drop_per_net=drop)
    theirs = loss_of("TQCLoss", networks, "continuous", **keys)
    ours = loss_of("tqc-loss", networks, "continuous", **keys)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # targets off the online critics, the same in both
        theirs.target_qvalue_network_params.data.apply_(lambda p: p.add_(torch.randn(p.shape, generator=generator)))
        for i, target in enumerate(ours.target_critics):
            TensorDict.from_module(target).update_(theirs.target_qvalue_network_params[i].data)
    data = replay_sample("continuous", 32, seed)

    def terms_and_gradients(loss, actor_parameters, critic_parameters):
        written = data.clone()
        out = loss(written)
        terms = {key: out[key] for key in ("loss_qvalue", "loss_actor", "loss_alpha")}
        wrt = [*actor_parameters, *critic_parameters, loss.log_alpha]
        return terms, torch.autograd.grad(sum(terms.values()), wrt, allow_unused=True), written["td_error"]

    actor_keys = list(TensorDict.from_module(actor).keys(True, True))
    critic_keys = list(TensorDict.from_module(built[0]).keys(True, True))
    our_terms, our_gradients, our_priorities = terms_and_gradients(
        ours, [TensorDict.from_module(actor)[k] for k in actor_keys],
        [TensorDict.from_module(c)[k] for c in built for k in critic_keys])
    their_terms, their_gradients, their_priorities = terms_and_gradients(
        theirs, [theirs.actor_network_params[k] for k in actor_keys],
        [theirs.qvalue_network_params[k] for k in critic_keys])
    for term in our_terms:
        torch.testing.assert_close(our_terms[term], their_terms[term], rtol=1e-5, atol=1e-6, msg=term)
    count = len(actor_keys)
    for ours_g, theirs_g in zip(our_gradients[:count], their_gradients[:count]):  # the actor's
        torch.testing.assert_close(ours_g, theirs_g, rtol=1e-4, atol=1e-6)
    per_critic = our_gradients[count:-1]  # critic by critic, key by key; TorchRL's stack the critics per key
    for k, theirs_g in enumerate(their_gradients[count:-1]):
        torch.testing.assert_close(torch.stack(per_critic[k::len(critic_keys)]), theirs_g, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(our_gradients[-1], their_gradients[-1], rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(our_priorities.reshape(-1), their_priorities.reshape(-1), rtol=1e-5, atol=1e-6)


def test_the_loss_serves_tqc_alone():
    problem = one_line_error(run_cli("run", str(ROOT / "recipes" / "pendulum-sac.toml"), "--set",
                                     "algorithm.loss.use=TQCLoss", timeout=120), "algorithm.loss")
    assert "'TQCLoss' is for tqc, not sac" in problem


@pytest.mark.parametrize("flags, fragments", [
    (["--set", "env.id=CartPole-v1"], ["algorithm", "tqc is for continuous actions"]),
    (["--set", "algorithm.top_quantiles_to_drop_per_net=25"],
     ["algorithm.top_quantiles_to_drop_per_net", "less than quantiles (25)"]),
    (["--set", "algorithm.quantiles=100000"], ["algorithm.quantiles", "at most 1000"]),
    (["--set", "algorithm.critics=0"], ["algorithm.critics", ">= 1"]),
])
def test_tqc_refusals_are_one_line(tmp_path, flags, fragments):
    out = tmp_path / "run"
    one_line_error(run_cli("run", str(TQC), "--out", str(out), *TINY, *flags, timeout=120), *fragments)
    assert not out.exists(), "refused before the run directory is made"


def test_show_and_list_name_tqc():
    shown = run_cli("show", "tqc", timeout=60)
    assert shown.returncode == 0, shown.stderr
    for key, default in [("critics", "2"), ("quantiles", "25"), ("top_quantiles_to_drop_per_net", "2"),
                         ("loss", '"rlplug:tqc-loss"'), ("initial_entropy_coef", "1.0"), ("tau", "0.005")]:
        assert any(line.split()[:1] == [key] and line.rstrip().endswith(f"default: {default}")
                   for line in shown.stdout.splitlines()), (key, shown.stdout)
    assert "Truncated quantile critics" in shown.stdout
    listed = run_cli("list", "--json", timeout=60)
    assert listed.returncode == 0, listed.stderr
    components = json.loads(listed.stdout)["components"]
    assert "tqc" in str(components["algorithm"])
    assert "TQCLoss" in str(components["loss"]) and "tqc-loss" in str(components["loss"])


@pytest.mark.slow
def test_a_tqc_run_takes_set_and_resumes(tmp_path):
    """Stopped at its evaluation at frame 150, ``rlplug set`` asks for a learning rate that resume applies."""
    out = tmp_path / "run"
    resumed = stopped_then_set_and_resumed(TQC, out, TINY, "algorithm.lr=3e-4", stop_at=150)
    assert "algorithm.lr 0.001 -> 0.0003 (rlplug set)" in resumed.stdout, resumed.stdout
    assert json.loads((out / "summary.json").read_text())["frames"] == 300
    state = checkpoints.load_checkpoint(out / "checkpoint.pt")
    assert state["parameters"] == {"lr": 3e-4}
    evaluated = run_cli("eval", str(out), "--episodes", "1", timeout=120)
    assert evaluated.returncode == 0, evaluated.stderr
