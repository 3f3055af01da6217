"""Offline runs: a recipe's ``[dataset]`` (a Minari dataset ``rlplug record`` wrote) learned from by ``bc``,
``iql``, ``cql`` and ``td3-bc``, through the command line; and each user error one line, nothing created."""

from __future__ import annotations

import json
import shutil
import tomllib

import numpy as np
import pytest
import torch
from conftest import ROOT, one_line_error, recorded_pendulum, run_cli
from tensordict import TensorDict

import rlplug

pytestmark = pytest.mark.slow  # a run is trained and recorded, and the command line started

pytest.importorskip("minari")

RECIPES = {name: ROOT / "recipes" / f"pendulum-offline-{name}.toml" for name in ("bc", "iql", "cql", "td3bc")}
#: two updates of 256 samples, one evaluation episode at the end
SHORT = ["--set", "run.total_frames=512", "--set", "eval.every_frames=0", "--set", "eval.episodes=1"]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    return recorded_pendulum(tmp_path_factory)


UNIT_WRAPPER = '{name="RescaleAction", kwargs={min_action=-1.0, max_action=1.0}}'


def synthetic(folder, *, discrete: bool = False, steps: int = 300, env: bool = True):
    """A Minari dataset of random Pendulum-shaped steps (3 observations), written by the same writer as ``record``:
    continuous actions in [-2, 2] or, with ``discrete``, 3 classes; named as recorded on Pendulum-v1 (``env``) or
    on no env."""
    import gymnasium as gym

    from rlplug.plugins.datasets.minari_format import write_dataset

    folder.mkdir()
    generator = np.random.default_rng(0)
    half = steps // 2
    episodes = [{"observations": generator.normal(size=(half + 1, 3)).astype(np.float32),
                 "actions": generator.integers(0, 3, half) if discrete
                 else generator.uniform(-2, 2, (half, 1)).astype(np.float32),
                 "rewards": generator.normal(size=half), "terminations": np.zeros(half, bool),
                 "truncations": np.arange(half) == half - 1} for _ in range(2)]
    action_space = gym.spaces.Discrete(3) if discrete else gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
    write_dataset(folder, episodes, observation_space=gym.spaces.Box(-np.inf, np.inf, (3,), np.float32),
                  action_space=action_space, env_spec=gym.spec("Pendulum-v1") if env else None,
                  metadata={"dataset_id": folder.name})
    return folder


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_each_offline_recipe_learns_from_a_recorded_dataset(recorded, tmp_path, name):
    _, dataset = recorded
    out = tmp_path / "run"
    result = run_cli("run", str(RECIPES[name]), "--out", str(out), "--set", f"dataset.path={dataset}", *SHORT)
    assert result.returncode == 0, result.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["frames"] == 512 and summary["iterations"] == 2
    assert summary["episodes"] == 0 and np.isfinite(summary["eval_return_mean"])
    recipe = tomllib.loads((out / "recipe.toml").read_text())
    assert recipe["env"]["id"] == "Pendulum-v1" and recipe["dataset"]["path"] == str(dataset)  # the dataset's env
    header = (out / "metrics.csv").read_text().splitlines()[0].split(",")
    assert {"loss_bc"} <= set(header) if name == "bc" else {"loss_actor", "loss_qvalue"} <= set(header)
    state = torch.load(out / "checkpoint.pt", weights_only=True)
    assert state["algorithm"]["replay_buffer"] == {}  # the dataset is read again, never kept
    assert state["algorithm"]["steps"] == 2


def test_an_offline_run_resumes_and_evaluates_like_any_run(recorded, tmp_path):
    _, dataset = recorded
    out = tmp_path / "run"
    result = run_cli("run", str(RECIPES["iql"]), "--out", str(out), "--set", f"dataset.path={dataset}", *SHORT)
    assert result.returncode == 0, result.stderr
    result = run_cli("resume", str(out), "--set", "run.total_frames=1024")
    assert result.returncode == 0, result.stderr
    assert json.loads((out / "summary.json").read_text())["frames"] == 1024
    assert torch.load(out / "checkpoint.pt", weights_only=True)["algorithm"]["steps"] == 4
    result = run_cli("eval", str(out), "--episodes", "1")
    assert result.returncode == 0, result.stderr
    assert "episodes: 1 of Pendulum-v1" in result.stdout


def built(recipe_name: str, dataset, tmp_path, *overrides: str):
    from rlplug import recipe as recipes
    from rlplug.run.trainer import Run

    recipe = recipes.load(RECIPES[recipe_name], [f"dataset.path={dataset}", *overrides])
    return Run.build(recipe, tmp_path / recipe_name)


def test_the_recipe_keys_reach_torchrls_losses(tmp_path):
    dataset = synthetic(tmp_path / "random-v0")
    iql = built("iql", dataset, tmp_path, "algorithm.reward_scale=2.0", "algorithm.reward_offset=1.0",
                "algorithm.expectile=0.6", "algorithm.temperature=2.0",
                "algorithm.gamma=0.9", "algorithm.loss.use=IQLLoss", "algorithm.loss.num_qvalue_nets=3")
    cql = built("cql", dataset, tmp_path, "algorithm.min_q_weight=2.0", "algorithm.num_random=4",
                "algorithm.cql_temperature=0.5", "algorithm.max_q_backup=true", "algorithm.initial_entropy_coef=0.3")
    td3bc = built("td3bc", dataset, tmp_path, "algorithm.alpha=1.5", "algorithm.target_policy_noise=0.1",
                  "algorithm.target_noise_clip=0.3")
    bc = built("bc", dataset, tmp_path, "algorithm.loss.use=BCLoss", "algorithm.loss.loss_function=l1",
               "algorithm.batch_size=100", "algorithm.gradient_steps=3")
    try:
        loss = iql.algorithm.loss_module
        assert type(loss).__name__ == "IQLLoss" and (loss.expectile, loss.temperature, loss.num_qvalue_nets) == \
            (0.6, 2.0, 3)
        assert loss.value_estimator.gamma.item() == pytest.approx(0.9)
        recorded = bc.algorithm.replay.transitions.get(("next", "reward"))  # bc's rewards: as recorded
        torch.testing.assert_close(iql.algorithm.replay.transitions.get(("next", "reward")), recorded * 2.0 + 1.0)
        loss = cql.algorithm.loss_module
        assert type(loss).__name__ == "CQLLoss"
        assert (loss.min_q_weight, loss.num_random, loss.temperature, loss.max_q_backup) == (2.0, 4, 0.5, True)
        assert loss.log_alpha.exp().item() == pytest.approx(0.3)
        assert cql.algorithm.loss_module.term_learners["loss_cql"] == "critic"
        loss = td3bc.algorithm.loss_module
        assert type(loss).__name__ == "TD3BCLoss" and loss.alpha == 1.5
        assert (loss.policy_noise, loss.noise_clip) == (pytest.approx(0.1), pytest.approx(0.3))
        loss = bc.algorithm.loss_module
        assert type(loss).__name__ == "BCLoss" and loss.loss_function == "l1"
        assert bc.algorithm.frames_per_batch == 300  # an update's samples: what run.total_frames counts
    finally:
        for run in (iql, cql, td3bc, bc):
            run.close(abandon=True)


def test_bc_regresses_the_actor_on_the_datasets_actions(tmp_path):
    """Known input: one gradient step of bc is one SGD step down the squared error between the actor's actions and
    the dataset's, on the dataset's observations (the sample fixed to the whole dataset here)."""
    dataset = synthetic(tmp_path / "random-v0")
    run = built("bc", dataset, tmp_path, "algorithm.optimizer=sgd", "algorithm.lr=0.1", "algorithm.batch_size=300")
    try:
        algorithm = run.algorithm
        actor = algorithm.actor
        data = algorithm.replay.transitions
        algorithm.replay.sample = lambda batch_size: data[:batch_size].clone()
        before = [p.detach().clone() for p in actor.parameters()]
        predicted = actor(data.select("observation").clone()).get("action")
        expected = torch.nn.functional.mse_loss(predicted, data.get("action"))
        grads = torch.autograd.grad(expected, list(actor.parameters()))
        metrics = algorithm.update(run.collector.collect())
        assert metrics["loss_bc"] == pytest.approx(expected.item(), rel=1e-5)
        for parameter, old, grad in zip(actor.parameters(), before, grads, strict=True):
            torch.testing.assert_close(parameter.detach(), old - 0.1 * grad, rtol=1e-4, atol=1e-6)
    finally:
        run.close(abandon=True)


@pytest.mark.parametrize("name", ["iql", "cql"])
def test_a_squashed_policy_learns_from_actions_at_the_bounds(tmp_path, name):
    """Known input: a dataset whose actions are exactly the bounds (-2, 2). The tanh-squashed policy of iql and cql
    takes them 0.1% of the half-range inside, so that its log-probability of each is finite and of the order of
    the others' (at the bound itself TorchRL's TanhNormal gives about -90, with a gradient as large); bc's
    deterministic actor regresses on them as recorded."""
    dataset = synthetic(tmp_path / "random-v0")
    data = dataset / "data"
    import h5py

    with h5py.File(data / "main_data.hdf5", "r+") as file:
        for episode in file.values():
            actions = episode["actions"]
            actions[...] = np.where(np.arange(len(actions))[:, None] % 2 == 0, 2.0, -2.0).astype(np.float32)
    run = built(name, dataset, tmp_path)
    cloned = built("bc", dataset, tmp_path)
    try:
        algorithm = run.algorithm
        action = algorithm.replay.transitions.get("action")
        bound = run.env.action_spec.space.high.max().item()  # 2, or 1 where the recipe rescales actions (cql)
        assert action.abs().max().item() == pytest.approx(bound * (1 - 0.001))
        assert cloned.algorithm.replay.transitions.get("action").abs().min().item() == 2.0
        sample = algorithm.replay.transitions.select("observation").clone()
        log_prob = algorithm.actor.get_dist(sample).log_prob(action)
        assert torch.isfinite(log_prob).all() and log_prob.min().item() > -20.0
    finally:
        run.close(abandon=True)
        cloned.close(abandon=True)


def test_rescale_actions_maps_the_datasets_bounds_onto_those_of_the_env_it_wraps(tmp_path):
    """Known input: Pendulum-shaped actions in [-2, 2] read with ``rescale_actions`` are halved (gymnasium's
    RescaleAction map from [-2, 2] onto [-1, 1]), and the run's env, the dataset's own, acts in [-1, 1]: what
    TorchRL's CQLLoss assumes of its random actions."""
    dataset = synthetic(tmp_path / "random-v0")
    plain = built("bc", dataset, tmp_path)
    rescaled = built("bc", dataset, tmp_path / "rescaled", "dataset.rescale_actions=true")
    try:
        recorded = plain.algorithm.replay.transitions.get("action")
        assert recorded.abs().max().item() > 1.5  # the synthetic data use the whole [-2, 2]
        torch.testing.assert_close(rescaled.algorithm.replay.transitions.get("action"), recorded / 2)
        assert rescaled.recipe.env.params["wrappers"][-1].name == "RescaleAction"
        assert rescaled.env.action_spec.space.high.flatten().tolist() == [1.0]
        assert plain.env.action_spec.space.high.flatten().tolist() == [2.0]
    finally:
        plain.close(abandon=True)
        rescaled.close(abandon=True)


def test_rescaled_actions_need_an_env_acting_in_unit_range_whichever_env_the_data_names(tmp_path):
    """Actions mapped onto [-1, 1] fit inside Pendulum's [-2, 2] and would be read there as other actions: an env
    not acting in [-1, 1] is refused at the rescale key, for a recipe's own [env] and for a dataset recorded on an
    env other than gymnasium's (which no wrapper is added to); given an env acting in [-1, 1], such a dataset is
    learned from."""
    from rlplug.errors import UserError

    dataset = synthetic(tmp_path / "random-v0")
    plain_env = 'env={use="gym", id="Pendulum-v1"}'
    with pytest.raises(UserError, match=r"mapped onto \[-1, 1\] and the env acts in \[-2\] to \[2\]: give the env "
                                        r"gymnasium's RescaleAction") as refused:
        built("bc", dataset, tmp_path / "own-env", "dataset.rescale_actions=true", plain_env)
    assert refused.value.path == "dataset.rescale_actions"
    torch_classic = synthetic(tmp_path / "torch-classic-v0")  # as if recorded on rlplug's torch-classic Pendulum
    metadata_file = torch_classic / "data" / "metadata.json"
    metadata = json.loads(metadata_file.read_text())
    metadata_file.write_text(json.dumps({**metadata, "rlplug_env": json.dumps({"use": "torch-classic",
                                                                               "id": "Pendulum-v1"})}))
    with pytest.raises(UserError, match=r"the env acts in \[-2\] to \[2\]") as refused:
        built("bc", torch_classic, tmp_path / "recorded-env", "dataset.rescale_actions=true")
    assert refused.value.path == "dataset.rescale_actions"
    run = built("bc", torch_classic, tmp_path / "unit-env", "dataset.rescale_actions=true",
                f'env={{use="gym", id="Pendulum-v1", wrappers=[{UNIT_WRAPPER}]}}')
    try:
        assert run.algorithm.replay.transitions.get("action").abs().max().item() <= 1.0
    finally:
        run.close(abandon=True)


def test_cqls_actor_clones_the_data_for_its_first_bc_steps(tmp_path):
    """Known input: with bc_steps = 1 the first gradient step trains the actor on CQLLoss's loss_actor_bc (the
    data's log-likelihood) and not on loss_actor (the critics' values), and the second on loss_actor; the
    critics' terms the same in both. The sample is fixed and torch's generator seeded alike for each call."""
    dataset = synthetic(tmp_path / "random-v0")
    run = built("cql", dataset, tmp_path, "algorithm.bc_steps=1")
    try:
        algorithm = run.algorithm
        loss = algorithm.loss_module
        sample = algorithm.replay.transitions[:64]
        actor = [p for p in loss.actor_network_params.values(True, True) if p.requires_grad]

        def expected(actor_term: str) -> list[torch.Tensor]:
            torch.manual_seed(1)
            out = loss(sample.clone())
            total = out[actor_term] + out["loss_qvalue"] + out["loss_cql"] + out["loss_alpha"]
            return [torch.zeros_like(p) if g is None else g
                    for p, g in zip(actor, torch.autograd.grad(total, actor, allow_unused=True), strict=True)]

        def taken() -> list[torch.Tensor]:
            torch.manual_seed(1)
            algorithm.backward(sample.clone())
            return [torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in actor]

        cloning, valuing = expected("loss_actor_bc"), expected("loss_actor")
        assert any(not torch.allclose(a, b) for a, b in zip(cloning, valuing, strict=True))
        for got, want in zip(taken(), cloning, strict=True):
            torch.testing.assert_close(got, want)
        algorithm.steps = 1
        for got, want in zip(taken(), valuing, strict=True):
            torch.testing.assert_close(got, want)
    finally:
        run.close(abandon=True)


def test_discrete_cqls_td_targets_come_from_its_target_network(tmp_path):
    """Known input: the target network's weights zeroed, so that it values every next action at 0, the TD term of
    discrete-cql is half the mean squared distance from the online Q-value of the data's action to the reward
    alone. TorchRL's DiscreteCQLLoss hands its target parameters to the estimator under a name it ignores, and
    took the next values from the online network instead (rlplug's discrete_cql passes them on)."""
    import gymnasium as gym

    from rlplug import recipe as recipes
    from rlplug.plugins.datasets.minari_format import write_dataset
    from rlplug.run.trainer import Run

    folder = tmp_path / "cartpole-v0"
    folder.mkdir()
    generator = np.random.default_rng(0)
    episodes = [{"observations": generator.normal(size=(41, 4)).astype(np.float32),
                 "actions": generator.integers(0, 2, 40), "rewards": generator.normal(size=40),
                 "terminations": np.arange(40) == 39, "truncations": np.zeros(40, bool)} for _ in range(2)]
    env = gym.make("CartPole-v1")
    write_dataset(folder, episodes, observation_space=env.observation_space, action_space=env.action_space,
                  env_spec=env.spec, metadata={"dataset_id": folder.name})
    recipe = recipes.load(ROOT / "recipes" / "cartpole-offline-discrete-cql.toml",
                          [f"dataset.path={folder}", "algorithm.batch_size=80"])
    run = Run.build(recipe, tmp_path / "run")
    try:
        loss = run.algorithm.loss_module
        sample = run.algorithm.replay.transitions.clone()
        for value in loss.target_value_network_params.values(True, True):
            value.data.zero_()
        with torch.no_grad(), loss.value_network_params.to_module(loss.value_network):
            values = loss.value_network(sample.select("observation").clone()).get("action_value")
            following = loss.value_network(sample.get("next").select("observation").clone()).get("action_value")
        action = sample.get("action")  # one-hot where the env's actions are laid out so, else class indices
        chosen = (values * action).sum(-1) if action.shape == values.shape else \
            values.gather(-1, action.long().reshape(*values.shape[:-1], 1)).squeeze(-1)
        reward = sample.get(("next", "reward")).squeeze(-1)
        expected = 0.5 * ((chosen - reward) ** 2).mean()
        online = reward + 0.99 * following.max(-1).values * (~sample.get(("next", "terminated")).squeeze(-1))
        assert not torch.allclose(expected, 0.5 * ((chosen - online) ** 2).mean())  # the two tell apart
        with torch.no_grad():
            out = loss(sample.clone())
        torch.testing.assert_close(out["loss_qvalue"], expected)
    finally:
        run.close(abandon=True)


def test_dataset_mistakes_are_one_line_and_create_nothing(recorded, tmp_path):
    _, dataset = recorded
    out = tmp_path / "run"

    def refused(recipe: str, *flags: str, fragments: tuple[str, ...]):
        one_line_error(run_cli("run", str(RECIPES[recipe]), "--out", str(out), *SHORT, *flags), *fragments)
        assert not out.exists()

    refused("iql", fragments=("pendulum-offline-iql.toml: dataset.path: no Minari dataset at SET-ME",
                              "rlplug record"))
    empty = tmp_path / "empty-v0"
    shutil.copytree(dataset, empty)
    metadata = json.loads((empty / "data" / "metadata.json").read_text())
    (empty / "data" / "metadata.json").write_text(json.dumps({**metadata, "total_steps": 0}))
    refused("bc", f"--set=dataset.path={empty}", fragments=("dataset.path:", "the dataset is empty"))
    corrupt = tmp_path / "corrupt-v0"
    shutil.copytree(dataset, corrupt)
    data = corrupt / "data" / "main_data.hdf5"
    data.write_bytes(data.read_bytes()[:2000])
    refused("cql", f"--set=dataset.path={corrupt}", fragments=("dataset.path:", "do not read", "damaged"))
    (corrupt / "data" / "metadata.json").write_text("{not json")
    refused("cql", f"--set=dataset.path={corrupt}", fragments=("metadata.json: not a Minari dataset's metadata",))
    other_env = ["--set", "env.use=gym", "--set", "env.id=MountainCarContinuous-v0"]
    refused("td3bc", f"--set=dataset.path={dataset}", *other_env,
            fragments=("dataset: the dataset was recorded on Pendulum-v1", "MountainCarContinuous-v0"))
    discrete = synthetic(tmp_path / "discrete-v0", discrete=True)
    refused("iql", f"--set=dataset.path={discrete}",
            fragments=("dataset: the dataset's actions are discrete and the env's are continuous",))
    refused("iql", f"--set=dataset.path={discrete}", "--set=dataset.rescale_actions=true",
            fragments=("dataset.rescale_actions: the dataset's actions are not a Box",))
    unit_env = ["--set", 'env={use="gym", id="Pendulum-v1", wrappers=[{name="RescaleAction", kwargs={min_action=-1.0, '
                'max_action=1.0}}]}']
    wide = synthetic(tmp_path / "wide-v0")  # actions over Pendulum's [-2, 2], into an env acting in [-1, 1]
    refused("iql", f"--set=dataset.path={wide}", *unit_env,
            fragments=("dataset: the dataset's actions reach", "bounds are [-1] to [1]", "rescale_actions"))
    nameless = synthetic(tmp_path / "nameless-v0", env=False)
    refused("iql", f"--set=dataset.path={nameless}", fragments=("dataset: the dataset names no env",))
    refused("iql", "--set=dataset.path=x", "--set=dataset.id=y-v0", fragments=("path or its id",))


def test_algorithms_and_datasets_that_do_not_go_together(recorded, tmp_path):
    _, dataset = recorded
    out = tmp_path / "run"
    without = tmp_path / "bc.toml"
    text = RECIPES["bc"].read_text()
    start, end = text.index("[dataset]"), text.index("[algorithm]")
    without.write_text(text[:start] + '[env]\nuse = "gym"\nid = "Pendulum-v1"\n\n' + text[end:])
    one_line_error(run_cli("run", str(without), "--out", str(out)),
                   "bc.toml: dataset: bc learns from a dataset only and this recipe has none")
    sac = ROOT / "recipes" / "pendulum-sac.toml"
    one_line_error(run_cli("run", str(sac), "--out", str(out), "--set", "dataset.use=minari",
                           "--set", f"dataset.path={dataset}"),
                   "pendulum-sac.toml: dataset: sac learns from the experience it collects, not from a dataset")
    assert not out.exists()


def online(recipe_name: str, folder) -> str:
    """The offline recipe ``recipe_name`` as an online one: ``[env]`` instead of ``[dataset]``."""
    text = RECIPES[recipe_name].read_text()
    start, end = text.index("[dataset]"), text.index("[algorithm]")
    path = folder / f"{recipe_name}-online.toml"
    path.write_text(text[:start] + '[env]\nuse = "gym"\nid = "Pendulum-v1"\n\n' + text[end:])
    return str(path)


@pytest.mark.parametrize("name", ["iql", "cql"])
def test_an_offline_run_goes_on_online_from_its_weights_with_the_dataset_in_its_replay(recorded, tmp_path, name):
    _, dataset = recorded
    offline = tmp_path / "offline"
    result = run_cli("run", str(RECIPES[name]), "--out", str(offline), "--set", f"dataset.path={dataset}", *SHORT)
    assert result.returncode == 0, result.stderr
    out = tmp_path / "online"
    # the cql recipe learned in [-1, 1] (dataset.rescale_actions): its env acts there too, and so does its prefill
    in_unit_range = ["--set", f"env.wrappers=[{UNIT_WRAPPER}]", "--set",
                     "algorithm.replay_buffer.prefill_rescale_actions=true"] if name == "cql" else []
    result = run_cli("run", online(name, tmp_path), "--out", str(out), "--init-from", str(offline),
                     "--set", "algorithm.replay_buffer.use=uniform", *in_unit_range,
                     "--set", f"algorithm.replay_buffer.prefill={dataset}", "--set", "algorithm.learning_starts=0",
                     "--set", "run.total_frames=4", *SHORT[2:])
    assert result.returncode == 0, result.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["frames"] == 4 and summary["init_from"]["frames"] == 512
    rows = (out / "metrics.csv").read_text().splitlines()
    header = rows[0].split(",")
    assert float(rows[1].split(",")[header.index("buffer_size")]) == 601  # the dataset's 600 steps, then one more
    source = torch.load(offline / "checkpoint.pt", weights_only=True)["algorithm"]["loss"]
    first = next(key for key in source if "actor_network_params" in key)
    state = torch.load(out / "checkpoint.pt", weights_only=True)["algorithm"]["loss"]
    assert not torch.equal(state[first], torch.zeros_like(state[first])) and first in state


def test_prefill_mistakes_are_one_line(recorded, tmp_path):
    _, dataset = recorded
    out = tmp_path / "run"
    recipe = online("iql", tmp_path)
    uniform = ["--out", str(out), "--set", "algorithm.replay_buffer.use=uniform"]
    one_line_error(run_cli("run", recipe, *uniform, "--set", f"algorithm.replay_buffer.prefill={out}"),
                   "algorithm.replay_buffer.prefill: no Minari dataset at")
    one_line_error(run_cli("run", recipe, *uniform, "--set", f"algorithm.replay_buffer.prefill={dataset}",
                           "--set", "env.id=MountainCarContinuous-v0"),
                   "algorithm.replay_buffer.prefill: the dataset's observations are of shape [3]")
    wide = synthetic(tmp_path / "wide-v0")  # Pendulum's [-2, 2] into an env acting in [-1, 1]
    one_line_error(run_cli("run", recipe, *uniform, "--set", f"algorithm.replay_buffer.prefill={wide}",
                           "--set", f"env.wrappers=[{UNIT_WRAPPER}]"),
                   "algorithm.replay_buffer.prefill: the dataset's actions reach",
                   "algorithm.replay_buffer.prefill_rescale_actions = true maps them onto [-1, 1]")
    one_line_error(run_cli("run", recipe, *uniform, "--set", f"algorithm.replay_buffer.prefill={wide}",
                           "--set", 'env.wrappers=[{name="RescaleAction", kwargs={min_action=-0.5, max_action=0.5}}]'),
                   "algorithm.replay_buffer.prefill: the dataset's actions reach", "record it on this env")
    one_line_error(run_cli("run", recipe, *uniform, "--set", "algorithm.replay_buffer.prefill_rescale_actions=true"),
                   "algorithm.replay_buffer.prefill_rescale_actions: there is no prefill dataset to rescale")
    one_line_error(run_cli("run", recipe, *uniform, "--set", f"algorithm.replay_buffer.prefill={wide}",
                           "--set", "algorithm.replay_buffer.prefill_rescale_actions=true"),
                   "algorithm.replay_buffer.prefill_rescale_actions: the dataset's actions are mapped onto [-1, 1] "
                   "and the env acts in [-2] to [2]")
    assert not out.exists()


@pytest.mark.parametrize("buffer", ["uniform", "prioritized"])
def test_prefill_rescale_actions_maps_the_recorded_range_onto_the_env_acting_in_unit_range(tmp_path, buffer):
    """A run that learned in [-1, 1] (dataset.rescale_actions) going on online keeps its Pendulum dataset, recorded
    in [-2, 2], in its replay: each action halved, as RescaleAction maps the env's; nothing else changed."""
    from rlplug.plugins.datasets.minari_format import MinariData

    dataset = synthetic(tmp_path / "wide-v0")
    env = rlplug.make("env", "gym", id="Pendulum-v1", wrappers=[{"name": "RescaleAction",
                      "kwargs": {"min_action": -1.0, "max_action": 1.0}}])
    made = rlplug.make("replay_buffer", buffer, prefill=str(dataset), prefill_rescale_actions=True, capacity=1000,
                       run_dir=tmp_path / "replay", seed=0, device="cpu", observation_spec=env.observation_spec,
                       action_spec=env.action_spec)
    recorded = MinariData(dataset, "prefill").transitions("cpu")
    held = TensorDict.from_dict(made.state_dict()["data"])  # the transitions in the order written
    assert len(made) == len(recorded) == 300
    assert recorded["action"].abs().max() > 1.5  # the test's own premise: the data reach beyond [-1, 1]
    torch.testing.assert_close(held["action"], recorded["action"] / 2)
    for key in ("observation", ("next", "observation"), ("next", "reward")):
        torch.testing.assert_close(held.get(key), recorded.get(key))


def test_show_describes_a_dataset_and_plot_takes_offline_runs(recorded, tmp_path):
    run, dataset = recorded
    result = run_cli("show", str(dataset))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"dataset: {dataset} (Minari id pendulum-sac-v0)" and lines[1] == "env: Pendulum-v1"
    assert lines[2] == "size: 3 episodes, 600 steps" and lines[3].startswith("return: mean -")
    assert "recorded by: rlplug:sac" in lines
    shown = json.loads(run_cli("show", str(dataset), "--json").stdout)
    assert shown["episodes"] == 3 and shown["steps"] == 600 and shown["env"] == "Pendulum-v1"
    assert shown["return_min"] <= shown["return_mean"] <= shown["return_max"] < 0
    damaged = tmp_path / "damaged-v0"
    shutil.copytree(dataset, damaged)
    (damaged / "data" / "main_data.hdf5").write_bytes(b"")
    one_line_error(run_cli("show", str(damaged)), "damaged-v0: the dataset's episodes do not read")
    out = tmp_path / "run"
    result = run_cli("run", str(RECIPES["bc"]), "--out", str(out), "--set", f"dataset.path={dataset}", *SHORT)
    assert result.returncode == 0, result.stderr
    result = run_cli("plot", str(out), "-o", str(tmp_path / "curve.png"))  # evaluations: no training episodes
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "curve.png").stat().st_size > 0


def test_discrete_cql_and_iql_learn_from_a_recorded_dqn_policy(tmp_path):
    dqn = tmp_path / "dqn"
    result = run_cli("run", str(ROOT / "recipes" / "cartpole-dqn.toml"), "--out", str(dqn),
                     "--set", "run.total_frames=500", "--set", "eval.every_frames=0", "--set", "eval.episodes=1")
    assert result.returncode == 0, result.stderr
    dataset = tmp_path / "cartpole-dqn-v0"
    result = run_cli("record", str(dqn), "--episodes", "2", "--epsilon", "0.2", "--out", str(dataset))
    assert result.returncode == 0, result.stderr
    for name, flags, terms in (("cql", ["--set", "algorithm.target_update_interval=16"], {"loss_qvalue", "loss_cql"}),
                               ("iql", [], {"loss_actor", "loss_qvalue", "loss_value"})):
        out = tmp_path / name
        recipe = ROOT / "recipes" / f"cartpole-offline-discrete-{name}.toml"
        result = run_cli("run", str(recipe), "--out", str(out), "--set", f"dataset.path={dataset}",
                         "--set", "algorithm.batch_size=8", "--set", "run.total_frames=64", *flags, *SHORT[2:])
        assert result.returncode == 0, result.stderr
        assert json.loads((out / "summary.json").read_text())["frames"] == 64
        header = (out / "metrics.csv").read_text().splitlines()[0].split(",")
        assert terms <= set(header)
        assert tomllib.loads((out / "recipe.toml").read_text())["env"]["id"] == "CartPole-v1"
    # continuous actions' algorithms refuse it in one line
    one_line_error(run_cli("run", str(RECIPES["iql"]), "--out", str(out / "x"), "--set", f"dataset.path={dataset}"),
                   "iql is for continuous actions")


def test_seeds_of_an_offline_recipe_one_after_another_not_together(recorded, tmp_path):
    _, dataset = recorded
    out = tmp_path / "seeds"
    flags = ["--set", f"dataset.path={dataset}", "--set", "run.total_frames=512", "--set", "eval.every_frames=256",
             "--set", "eval.episodes=1"]
    result = run_cli("run", str(RECIPES["bc"]), "--out", str(out), "--seeds", "0-1", *flags)
    assert result.returncode == 0, result.stderr
    assert (out / "aggregate.json").is_file() and (out / "curve.png").is_file()  # the evaluations' curves
    one_line_error(run_cli("run", str(RECIPES["bc"]), "--out", str(tmp_path / "b"), "--seeds", "0-1", "--batched",
                           *flags), "dataset: an offline run ([dataset]) collects nothing")
    assert not (tmp_path / "b").exists()


def test_a_dataset_recorded_in_rescaled_actions_is_learned_and_evaluated_in_them(tmp_path):
    """docs/offline.md's road to CQLLoss's [-1, 1]: gymnasium's RescaleAction on the recorded run; the dataset's
    actions and the offline run's evaluation env are then the wrapped env's."""
    import minari

    wrapper = '[{name = "RescaleAction", kwargs = {min_action = -1.0, max_action = 1.0}}]'
    run, dataset = tmp_path / "sac", tmp_path / "unit-v0"
    result = run_cli("run", str(ROOT / "recipes" / "pendulum-sac.toml"), "--out", str(run), "--set",
                     "run.total_frames=300", "--set", "eval.every_frames=0", "--set", "eval.episodes=1",
                     "--set", f"env.wrappers={wrapper}")
    assert result.returncode == 0, result.stderr
    result = run_cli("record", str(run), "--episodes", "2", "--stochastic", "--out", str(dataset))
    assert result.returncode == 0, result.stderr
    data = minari.load_dataset(str(dataset))
    actions = np.concatenate([episode.actions for episode in data.iterate_episodes()])
    assert np.abs(actions).max() <= 1.0 and np.abs(actions).max() > 0.5  # the policy's [-1, 1], not Pendulum's [-2, 2]
    assert list(data.action_space.high) == [1.0]
    recovered = data.recover_environment()  # plain minari makes the env the data was recorded on, wrapper and all
    assert list(recovered.action_space.high) == [1.0]
    recovered.close()
    out = tmp_path / "cql"
    result = run_cli("run", str(RECIPES["cql"]), "--out", str(out), "--set", f"dataset.path={dataset}", *SHORT)
    assert result.returncode == 0, result.stderr
    env = tomllib.loads((out / "recipe.toml").read_text())["env"]
    assert env["wrappers"] == [{"name": "RescaleAction", "kwargs": {"min_action": -1.0, "max_action": 1.0}}]
