"""Image and Dict observations: the gym env keeps them as they are (named entries under ``observation``,
final observations of ended episodes included), the ``cnn`` network reads them as envs give them in every
role, and image, image-plus-vector tasks are learned through the CLI."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
import torch
import toy_spaces
from conftest import rlplug_cli
from tensordict import TensorDict
from test_cli import write_recipe
from torchrl.data import Bounded, Composite, OneHot
from torchrl.envs import ToTensorImage

import rlplug
from rlplug.core.images import NATURE, SMALL, ImageInput, ImageShape, image_encoder

PIXEL, DICT = "RlplugToy/BrightPixel-v0", "RlplugToy/ImageAndVector-v0"


def cnn(observation_spec, action_spec, role: str, **params):
    return rlplug.make("network", "cnn", observation_spec=observation_spec, action_spec=action_spec, role=role,
                       **params)


def image_specs(shape=(6, 6, 1), envs: int = 2) -> Composite:
    return Composite(observation=Bounded(0, 255, (envs, *shape), dtype=torch.uint8), shape=(envs,))


# -- reading images as envs give them ----------------------------------------------------------------------

@pytest.mark.parametrize("shape, dtype, channels_last, chw", [
    ((6, 6, 1), torch.uint8, True, (1, 6, 6)),          # gymnasium's H x W x C
    ((210, 160, 3), torch.uint8, True, (3, 210, 160)),  # Atari's frames
    ((4, 84, 84), torch.uint8, False, (4, 84, 84)),     # stacked grey frames
    ((84, 84), torch.uint8, False, (1, 84, 84)),        # one grey frame
    ((3, 64, 64), torch.float32, False, (3, 64, 64)),   # after ToTensorImage
    ((10, 10, 10), torch.bool, True, (10, 10, 10)),     # MinAtar's Seaquest: a tie, integers: channels last
    ((4, 84, 84, 3), torch.uint8, True, (12, 84, 84)),  # four stacked RGB frames
])
def test_image_layouts_are_read_from_the_shape(shape, dtype, channels_last, chw):
    image = ImageShape.of(shape, dtype)
    assert image.channels_last == channels_last and (image.channels, image.height, image.width) == chw
    x = torch.zeros(5, *shape, dtype=dtype)
    assert ImageInput(image)(x).shape == (5, *chw)


def test_a_gymnasium_image_and_its_to_tensor_image_are_read_alike():
    """The same network reads the uint8 H x W x C image and what TorchRL's ToTensorImage makes of it alike."""
    hwc = torch.randint(0, 256, (2, 6, 6, 3), dtype=torch.uint8)
    chw = ToTensorImage(in_keys=["observation"])(TensorDict(observation=hwc, batch_size=[2])).get("observation")
    assert chw.shape == (2, 3, 6, 6) and chw.dtype == torch.float32
    from_gym = ImageInput(ImageShape.of((6, 6, 3), torch.uint8))(hwc)
    from_torchrl = ImageInput(ImageShape.of((3, 6, 6), torch.float32))(chw)
    torch.testing.assert_close(from_gym, from_torchrl)
    assert 0 <= from_gym.min() and from_gym.max() <= 1


def test_the_encoder_is_sized_from_the_image():
    atari, _ = image_encoder(image_specs((84, 84, 4)), "observation")
    convolutions = [m for m in atari.modules() if isinstance(m, torch.nn.Conv2d)]
    assert [(c.in_channels, c.out_channels, c.kernel_size[0], c.stride[0]) for c in convolutions] == [
        (4, 32, 8, 4), (32, 64, 4, 2), (64, 64, 3, 1)]
    assert atari.out_features == 64 * 7 * 7
    minatar, chosen = image_encoder(image_specs((10, 10, 4)), "observation")
    assert chosen == SMALL and minatar.out_features == 16 * 8 * 8
    assert image_encoder(image_specs((84, 84, 4)), "observation")[1] == NATURE
    wide, chosen = image_encoder(image_specs((84, 84, 4)), "observation", channels=[8, 8])
    assert (chosen.kernels, chosen.strides, chosen.hidden) == ((3, 3), (1, 1), NATURE.hidden)
    assert wide.out_features == 8 * 80 * 80


# -- every role, Dict observations -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def pixel_env():
    return rlplug.make("env", "gym", id=PIXEL, num_envs=2)


@pytest.fixture(scope="module")
def dict_env():
    return rlplug.make("env", "gym", id=DICT, num_envs=2, max_episode_steps=3)


@pytest.mark.parametrize("env_name", ["pixel_env", "dict_env"])
def test_cnn_serves_policy_value_and_q_values(request, env_name):
    env = request.getfixturevalue(env_name)
    state = env.reset()
    policy = cnn(env.observation_spec, env.action_spec, "policy")
    data = policy(state.clone())
    assert data.get("action").shape == (2, 2) and data.get("action_log_prob").shape == (2,)
    assert cnn(env.observation_spec, env.action_spec, "value")(state.clone()).get("state_value").shape == (2, 1)
    assert cnn(env.observation_spec, env.action_spec, "q_values")(state.clone()).get("action_value").shape == (2, 2)


def test_cnn_serves_critics_of_an_image_and_a_box_action():
    observation_spec = image_specs((8, 8, 3))
    action_spec = Bounded(-1.0, 1.0, (2, 2))
    data = observation_spec.rand().set("action", action_spec.rand())
    critic = cnn(observation_spec, action_spec, "q_value")
    assert critic(data.clone()).get("state_action_value").shape == (2, 1)
    actor = cnn(observation_spec, action_spec, "deterministic_policy")
    assert actor(data.clone()).get("action").abs().max() <= 1


def test_every_entry_of_a_dict_observation_counts(dict_env):
    network = cnn(dict_env.observation_spec, dict_env.action_spec, "value")
    observation = dict_env.reset().get("observation")
    value = network.module(observation)
    image_changed, vector_changed = observation.clone(), observation.clone()
    image_changed.set("image", 255 - observation.get("image"))
    vector_changed.set("vector", -observation.get("vector"))
    assert not torch.allclose(network.module(image_changed), value)
    assert not torch.allclose(network.module(vector_changed), value)


def test_a_dict_observation_keeps_its_entries_and_final_observations(dict_env):
    spec = dict_env.observation_spec["observation"]
    assert set(spec.keys()) == {"image", "vector"} and spec["image"].dtype == torch.uint8
    assert not dict_env.supports_tensor_steps  # the array road would hand out the packed vector
    dict_env.set_seed(0)
    data = dict_env.rollout(7, break_when_any_done=False)
    images, vectors = data.get(("next", "observation", "image")), data.get(("next", "observation", "vector"))
    assert images.dtype == torch.uint8 and images.shape == (2, 7, 6, 6, 1)
    ended = data.get(("next", "done")).squeeze(-1)
    assert ended[:, 2].all() and ended[:, 5].all()
    # the last observation of an ended episode is the env's (TorchRL's own reader leaves a Dict's at zero)
    assert (images[ended].amax((-1, -2, -3)) == 255).all() and (vectors[ended] != 0).all()
    torch.testing.assert_close(data.get(("observation", "vector"))[:, 1:3], vectors[:, 0:2])


def test_frames_of_a_dict_observation_stack_entry_by_entry():
    env = rlplug.make("env", "gym", id=DICT, num_envs=2, frame_stack=3)
    spec = env.observation_spec["observation"]
    assert spec["image"].shape == (2, 3, 6, 6, 1) and spec["vector"].shape == (2, 6)
    policy = cnn(env.observation_spec, env.action_spec, "policy")
    assert policy(env.reset()).get("action").shape == (2, 2)


class DictWithSequence(gym.Env):
    """A Dict observation with a Sequence entry: no fixed number of features to pack."""

    def __init__(self):
        spaces = gym.spaces
        self.observation_space = spaces.Dict({"vector": spaces.Box(-1.0, 1.0, (2,), np.float32),
                                              "items": spaces.Sequence(spaces.Discrete(3))})
        self.action_space = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return {"vector": np.zeros(2, np.float32), "items": (0, 1)}, {}

    def step(self, action):
        return {"vector": np.zeros(2, np.float32), "items": (2,)}, 0.0, False, False, {}


def test_a_dict_entry_of_no_fixed_size_is_one_line_naming_its_space():
    # flatten_space hands a Sequence back as a Sequence: it once failed with an AttributeError on its bounds
    gym.register("RlplugTest/DictWithSequence-v0", DictWithSequence)
    try:
        with pytest.raises(rlplug.UserError, match="entry of type Sequence cannot be flattened"):
            rlplug.make("env", "gym", id="RlplugTest/DictWithSequence-v0")
    finally:
        del gym.registry["RlplugTest/DictWithSequence-v0"]


def test_shared_body_shares_the_convolutions(tmp_path):
    agent = rlplug.Agent.from_recipe({
        "env": {"use": "gym", "id": PIXEL, "num_envs": 2},
        "algorithm": {"use": "ppo", "frames_per_batch": 16, "minibatch_size": 16, "shared_body": True,
                      "policy": {"use": "cnn"}, "critic": {"use": "cnn"}}, "loggers": []}, out=tmp_path / "run")
    convolutions = [{id(m.weight) for m in net.modules() if isinstance(m, torch.nn.Conv2d)}
                    for net in (agent.run.algorithm.policy, agent.run.algorithm.critic)]
    assert convolutions[0] and convolutions[0] == convolutions[1]


def test_dqn_keeps_uint8_images_in_its_replay_and_select_action_takes_dicts(tmp_path):
    agent = rlplug.Agent.from_recipe({
        "run": {"total_frames": 64}, "env": {"use": "gym", "id": DICT, "num_envs": 2},
        "algorithm": {"use": "dqn", "q_network": {"use": "cnn", "hidden": [16]}, "learning_starts": 32,
                      "batch_size": 16},
        "eval": {"episodes": 2}, "loggers": []}, out=tmp_path / "run")
    assert agent.train()["status"] == "finished"
    sample = agent.run.algorithm.replay.sample(4)
    assert sample.get(("observation", "image")).dtype == torch.uint8
    raw = toy_spaces.ImageAndVector()
    observation, _ = raw.reset(seed=0)
    assert int(agent.select_action(observation)) in (0, 1)
    batch = {key: np.stack([value, value]) for key, value in observation.items()}
    assert agent.select_action(batch).shape == (2,)


def test_a_to_tensor_image_recipe_trains(tmp_path):
    agent = rlplug.Agent.from_recipe({
        "run": {"total_frames": 32}, "env": {"use": "gym", "id": PIXEL, "num_envs": 2,
                                             "transforms": [{"use": "ToTensorImage", "in_keys": ["observation"]}]},
        "algorithm": {"use": "ppo", "frames_per_batch": 16, "minibatch_size": 16,
                      "policy": {"use": "cnn", "channels": [4]}, "critic": {"use": "cnn", "channels": [4]}},
        "eval": {"episodes": 2}, "loggers": []}, out=tmp_path / "run")
    assert agent.run.env.observation_spec["observation"].dtype == torch.float32
    assert agent.train()["status"] == "finished"


# -- mistakes ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("observation_spec, params, fragments", [
    (Composite(observation=Bounded(-1.0, 1.0, (2, 4)), shape=(2,)), {},
     ["cnn encodes images", "'observation' [4]", "use mlp"]),
    (image_specs((6, 6, 1)), {"channels": [8, 8], "kernels": [3]},
     ["kernels has 1 values for 2 convolutions", "give one per convolution"]),
    (image_specs((6, 6, 1)), {"kernels": [8]}, ["6 x 6 image 'observation'", "kernel 8", "smaller kernels"]),
])
def test_cnn_mistakes_are_one_line(observation_spec, params, fragments):
    with pytest.raises(rlplug.UserError) as caught:
        cnn(observation_spec, OneHot(2, shape=(2, 2)), "policy", **params)
    message = str(caught.value)
    assert "\n" not in message and all(fragment in message for fragment in fragments), message


@pytest.mark.parametrize("name", ["mlp", "sequential"])
def test_networks_of_one_tensor_refuse_a_dict_observation_saying_what_to_do(dict_env, name):
    with pytest.raises(rlplug.UserError) as caught:
        rlplug.make("network", name, observation_spec=dict_env.observation_spec, action_spec=dict_env.action_spec,
                    role="policy")
    message = str(caught.value)
    assert f"{name} reads one observation tensor" in message and "image [6, 6, 1], vector [2]" in message
    assert "use cnn" in message and "flatten_observations = true" in message


# -- learning through the CLI ------------------------------------------------------------------------------

def learn(tmp_path, install, env_id: str, algorithm: str, *, frames: int = 4096, num_envs: int = 8) -> dict:
    """``python -m rlplug run`` on a toy env (the plugin that registers them installed); the run's summary."""
    where = install({"toyspaces": toy_spaces.SOURCE}, dist="toyspaces")
    recipe = write_recipe(tmp_path, f"""
        [run]
        total_frames = {frames}
        [env]
        use = "gym"
        id = "{env_id}"
        num_envs = {num_envs}
        {algorithm}
        [eval]
        episodes = 20
        [[loggers]]
        use = "csv"
    """)
    result = rlplug_cli("run", str(recipe), "--out", str(tmp_path / "run"), path=where, timeout=300)
    assert result.returncode == 0, result.stderr
    return json.loads((tmp_path / "run" / "summary.json").read_text())


@pytest.mark.slow
def test_cli_ppo_learns_where_the_bright_pixel_is(tmp_path, install):
    summary = learn(tmp_path, install, PIXEL, """
        [algorithm]
        use = "ppo"
        frames_per_batch = 256
        epochs = 4
        minibatch_size = 64
        policy = {use = "cnn"}
        critic = {use = "cnn"}
    """)
    assert summary["eval_return_mean"] >= 7.5, summary  # perfect 8, random 4


@pytest.mark.slow
def test_cli_dqn_learns_from_an_image_and_a_vector_together(tmp_path, install):
    summary = learn(tmp_path, install, DICT, toy_spaces.DQN_IMAGE_AND_VECTOR, num_envs=4)
    assert summary["eval_return_mean"] >= 7.0, summary  # perfect 8; the image alone or the vector alone: 4


def test_an_env_with_no_readable_entry_is_refused_naming_each_entry():
    from rlplug.core.observations import chosen_entries
    from rlplug.errors import UserError

    spec = Composite(count=Bounded(0, 5, shape=(2,), dtype=torch.int64),
                     flag=Bounded(0, 1, shape=(1,), dtype=torch.bool))
    with pytest.raises(UserError) as raised:
        chosen_entries(spec, None)
    assert "no observation entry of this env is one networks can read: entry 'count' holds int64 values of " \
           "shape [2]" in str(raised.value)
    assert "; entry 'flag' holds bool values of shape [1]" in str(raised.value)
    readable = Composite(count=Bounded(0, 5, shape=(2,), dtype=torch.int64),
                         position=Bounded(-1.0, 1.0, shape=(3,), dtype=torch.float32))
    assert chosen_entries(readable, None) == ["position"]


# -- a TorchRL env's pixels beside its state ---------------------------------------------------------------

TINY_CNN = {"channels": [4], "kernels": [8], "strides": [8], "hidden": [8]}


def test_a_torchrl_env_with_pixels_beside_its_observation_has_cnn_read_both():
    """TorchRL's ``GymEnv(from_pixels=True, pixels_only=False)`` renders ``pixels`` beside its state vector
    ``observation``: an env built as a run builds it gathers both into ``observation`` (the image as rendered,
    uint8), keeps TorchRL's spec contract, and ``cnn`` encodes the image and joins the state; a spec read before
    that is one line saying so. Before, the image was left out and ``cnn`` said the env observes none."""
    pytest.importorskip("pygame")  # classic control renders through it
    from torchrl.envs import GymEnv
    from torchrl.envs.utils import check_env_specs

    from rlplug.envs import one_observation

    raw = GymEnv("CartPole-v1", from_pixels=True, pixels_only=False)
    with pytest.raises(rlplug.UserError) as caught:
        cnn(raw.observation_spec, raw.action_spec, "value", **TINY_CNN)
    assert "'pixels' [400, 600, 3]" in str(caught.value) and "one_observation" in str(caught.value)
    env = one_observation(raw)
    spec = env.observation_spec["observation"]
    assert spec["pixels"].shape == (400, 600, 3) and spec["pixels"].dtype == torch.uint8
    assert spec["observation"].shape == (4,)
    check_env_specs(env, seed=0)
    state = env.reset()
    assert torch.equal(state.get(("observation", "pixels")), state.get("pixels"))
    value = cnn(env.observation_spec, env.action_spec, "value", **TINY_CNN)
    observation = state.get("observation")
    darker, moved = observation.clone(), observation.clone()
    darker.set("pixels", observation.get("pixels") // 2)
    moved.set("observation", observation.get("observation") + 1.0)
    values = [value.module(o) for o in (observation, darker, moved)]
    assert not torch.equal(values[0], values[1]) and not torch.equal(values[0], values[2])  # both read
    policy = cnn(env.observation_spec, env.action_spec, "policy", **TINY_CNN)
    assert env.rollout(3, policy).get(("next", "observation", "pixels")).shape == (3, 400, 600, 3)


def test_ppo_minibatches_of_a_dict_observation_are_drawn_as_its_tensors_are():
    """An epoch gathers its shuffled batch key by key: a Dict observation's TensorDict had no ``index_select``,
    so PPO with minibatches stopped with a traceback on image-plus-vector envs."""
    from rlplug.core.training import Prepared

    observation = TensorDict({"pixels": torch.arange(6, dtype=torch.uint8).reshape(6, 1, 1, 1).expand(6, 2, 2, 1),
                              "observation": torch.arange(6.0).reshape(6, 1)}, batch_size=[6])
    prepared = Prepared({"observation": observation, "advantage": torch.arange(6.0)}, 4, None)
    minibatches = [prepared.minibatch(index) for index in range(prepared.steps)]
    assert [len(minibatch) for minibatch in minibatches] == [4, 2]
    for minibatch in minibatches:  # each row's entries kept together
        rows = minibatch.get("advantage")
        assert torch.equal(minibatch.get(("observation", "observation")).reshape(-1), rows)
        assert torch.equal(minibatch.get(("observation", "pixels"))[:, 0, 0, 0], rows.to(torch.uint8))
    assert sorted(torch.cat([m.get("advantage") for m in minibatches]).tolist()) == list(range(6))


@pytest.mark.slow
def test_a_plugin_returning_a_torchrl_env_with_pixels_beside_its_state_trains_with_cnn(tmp_path, install):
    """Through the command line: PPO with ``cnn`` on TorchRL's ``GymEnv(from_pixels=True, pixels_only=False)``
    as a plugin returns it, its minibatches drawn from the Dict observation (a TensorDict, gathered as the
    tensors are)."""
    pytest.importorskip("pygame")
    where = install({"pixels": '''
        import rlplug

        def make_rendered_cartpole():
            from torchrl.envs import GymEnv
            return GymEnv("CartPole-v1", from_pixels=True, pixels_only=False)

        @rlplug.hookimpl
        def rlplug_register_envs(register):
            register("rendered-cartpole", make_rendered_cartpole)
    '''}, dist="rendered")
    network = "{use = \"cnn\", channels = [4], kernels = [8], strides = [8], hidden = [8]}"
    recipe = write_recipe(tmp_path, f"""
        [run]
        total_frames = 64
        [env]
        use = "rendered-cartpole"
        [algorithm]
        use = "ppo"
        frames_per_batch = 32
        minibatch_size = 16
        epochs = 1
        policy = {network}
        critic = {network}
        [eval]
        episodes = 1
    """)
    result = rlplug_cli("run", str(recipe), "--out", str(tmp_path / "run"), path=where, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["frames"] == 64, summary
