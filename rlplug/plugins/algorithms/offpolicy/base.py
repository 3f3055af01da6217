"""What every off-policy algorithm shares, written once: replay, the update loop, targets, precision.

An algorithm here is a config dataclass (:mod:`rlplug.plugins.algorithms.offpolicy.config`: its fields are its
recipe table) and a subclass of :class:`OffPolicy` that builds its networks and says what one gradient step
does (:meth:`OffPolicy.gradient_step`). One update, top to bottom:

1. :meth:`~OffPolicy.store`: the collected ``[envs, time]`` batch is shaped (``reward_scale``,
   ``reward_offset``, ``reward_clip``) and added to the replay buffer; the observation preprocessor's
   statistics take in the new observations; exploration noise restarts where an episode ended;
2. schedules follow the frames collected: learning rates, the noise's schedule, the end of the random-action
   phase, and what the algorithm schedules itself (:meth:`~OffPolicy.before_update`: DQN's epsilon);
3. from ``learning_starts`` on, ``gradient_steps`` times: sample ``batch_size`` transitions (preprocessed,
   as tensors) and take one gradient step; a prioritised buffer gets each sample's new priority.

The acting policy (what the collector runs under random exploration and evaluation under deterministic) is
the actor behind the preprocessor, then the noise, then uniformly random actions for the first
``random_frames`` frames. The update calls the networks' own torch modules on tensors.

Target networks are deep copies moved towards the online ones by :func:`polyak_update`.

With recurrent networks (DDPG, TD3: :mod:`rlplug.core.recurrent`) the store also writes each transition's
episode id, step and ``is_init``, and a sample is ``batch_size / sequence_length`` sequences of one
episode's consecutive steps: the observations become an :class:`~rlplug.core.recurrent.ObservationSequence` and
every other tensor is ``[sequences, steps, ...]`` from the burn-in on, so the gradient steps do not change.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase, TensorDictSequential
from torch import nn

from rlplug.core.recurrent import ObservationSequence
from rlplug.core.tensordicts import trusted
from rlplug.core.training import MetricMean
from rlplug.errors import UserError
from rlplug.networks import is_discrete, observation_key
from rlplug.plugins.algorithms.offpolicy.config import OffPolicyConfig
from rlplug.plugins.algorithms.offpolicy.parts import (Learner, RandomActions, behind_preprocessor,
                                                      mixed_precision_context)
from rlplug.registry import protocols
from rlplug.registry.protocols import capability

#: The transition keys stored in the replay buffer (TorchRL's layout); ``observation`` stands for the
#: env's observation key.
TRANSITION_KEYS = ("observation", "action", ("next", "observation"), ("next", "reward"), ("next", "terminated"))


# -- the shared algorithm --------------------------------------------------------------------------------

class OffPolicy:
    """The shared update; subclasses build their networks (:meth:`build`) and define :meth:`gradient_step`."""

    #: "continuous" or "discrete": the actions the algorithm acts in
    actions = "continuous"

    def __init__(self, config: OffPolicyConfig, *, observation_spec, action_spec, device: str, total_frames: int,
                 seed: int = 0, run_dir=None):
        self.config, self.device, self.total_frames = config, device, total_frames
        self.observation_spec, self.action_spec = observation_spec, action_spec
        self.check_actions(action_spec)
        self.observation_key = observation_key(observation_spec)
        env_dims = observation_spec.ndim
        self.frames_per_batch = max(1, observation_spec.shape.numel()) * config.steps_per_update
        self.specs = {"observation_spec": observation_spec, "action_spec": action_spec, "device": device}
        self.replay = config.replay_buffer.build(device=device, seed=seed, run_dir=run_dir, total_frames=total_frames)
        self.replay_step = capability(self.replay, protocols.ReplayBuffer.step)
        self.preprocessor = None
        if config.observation_preprocessor is not None:
            self.preprocessor = config.observation_preprocessor.build(observation_spec=observation_spec, device=device)
            self.preprocessor.eval()  # statistics change only in store(), in train mode
        self.autocast = mixed_precision_context(config.mixed_precision, device)
        self.learners: dict[str, Learner] = {}
        self.noise = None
        self.sequences = False  # build() says whether the networks learn from sequences (recurrent ones)

        actor = self.build()  # the subclass's networks and learners; the actor that acts
        stages = [behind_preprocessor(actor, self.preprocessor, action_spec), *self.exploration_stages()]
        self.random_actions = RandomActions(action_spec, env_dims) if config.random_frames > 0 else None
        if self.random_actions is not None:
            stages.append(self.random_actions)
        self.policy: TensorDictModuleBase = stages[0] if len(stages) == 1 else TensorDictSequential(*stages)
        self.frames = 0
        self.steps = 0  # gradient steps taken

    # -- what algorithms define -----------------------------------------------------------------------

    def check_actions(self, action_spec) -> None:
        if (self.actions == "discrete") != is_discrete(action_spec):
            other = "dqn" if self.actions == "continuous" else "ddpg, td3 or sac"
            raise UserError(f"{type(self).__name__.lower()} is for {self.actions} actions and this env's are not; "
                            f"use {other}, or an on-policy algorithm (ppo)", path="algorithm")

    def build(self) -> TensorDictModuleBase:
        """Build the networks, their targets and :attr:`learners`; return the actor the policy acts with."""
        raise NotImplementedError

    def exploration_stages(self) -> list[TensorDictModuleBase]:
        """The modules after the actor in the acting policy (noise, epsilon-greedy)."""
        return []

    def gradient_step(self, data: dict[str, torch.Tensor], metrics: MetricMean) -> torch.Tensor | None:
        """One gradient step on a sample (tensors: ``observation``, ``action``, ``reward``,
        ``next_observation``, ``not_terminated``, ``weight``); adds its losses to ``metrics``; returns the
        per-sample TD error for prioritised replay (or None)."""
        raise NotImplementedError

    def before_update(self, frames_before: int) -> None:
        """Called after the batch is stored, before the gradient steps: for schedules of the algorithm's own."""

    def extra_metrics(self) -> dict[str, float]:
        return {}

    # -- 1. storing -----------------------------------------------------------------------------------

    @torch.no_grad()
    def store(self, batch: TensorDictBase) -> None:
        config, key = self.config, self.observation_key

        def flat(entry):  # [envs, time, ...] -> [envs * time, ...], tensor by tensor (cheaper than the TensorDict)
            return batch.get(entry).flatten(0, batch.batch_dims - 1)

        reward = flat(("next", "reward")) * config.reward_scale + config.reward_offset
        if config.reward_clip is not None:
            reward = reward.clamp(-config.reward_clip, config.reward_clip)
        observation = flat(key)
        transitions = trusted({
            "observation": observation, "action": flat("action"),
            "next": {"observation": flat(("next", key)), "reward": reward, "terminated": flat(("next", "terminated"))},
        }, batch_size=[batch.numel()])
        if self.sequences:
            transitions.update({"is_init": flat("is_init"), **self.episodes.label(batch.get("is_init"))})
        self.replay.extend(transitions)
        if self.preprocessor is not None:
            self.preprocessor.train()
            self.preprocessor(observation)
            self.preprocessor.eval()
        if self.noise is not None and capability(self.noise, protocols.Noise.reset):
            done = batch.get(("next", "done"))[..., -1, :]  # [envs, 1]: each env's last step of the batch
            if done.any():
                self.noise.reset(done)

    # -- 2. schedules ---------------------------------------------------------------------------------

    def follow_schedules(self) -> dict[str, float]:
        progress = self.frames / self.total_frames
        rates = {name: learner.set_progress(progress) for name, learner in self.learners.items()}
        if self.noise is not None:
            self.noise.step(self.frames)
        if self.replay_step:  # a prioritised buffer's importance-weight schedule
            self.replay_step(self.frames)
        if self.random_actions is not None:
            self.random_actions.active = self.frames < self.config.random_frames
        lrs = list(rates.values())
        return {"lr": lrs[0]} if len(set(lrs)) == 1 else {f"lr_{name}": lr for name, lr in rates.items()}

    # -- 3. learning ----------------------------------------------------------------------------------

    def update(self, batch: TensorDictBase) -> dict[str, float]:
        config = self.config
        frames_before = self.frames
        self.frames += batch.numel()
        self.store(batch)
        result = self.follow_schedules()
        self.before_update(frames_before)
        result["buffer_size"] = float(len(self.replay))
        if self.frames < config.learning_starts or len(self.replay) < config.batch_size:
            return {**result, **self.extra_metrics()}
        metrics = MetricMean()
        for data in self.samples():
            td_error = self.gradient_step(data, metrics)
            self.steps += 1
            if td_error is not None and "index" in data:
                self.replay.update_priority(data["index"], td_error.detach().abs().reshape(-1))
        return {**result, **metrics.means(), **self.extra_metrics()}

    @torch.no_grad()
    def samples(self) -> Iterator[dict[str, torch.Tensor]]:
        """``gradient_steps`` samples from the buffer as tensors, observations preprocessed."""
        if self.sequences:
            yield from self.sequence_samples()
            return
        for _ in range(self.config.gradient_steps):
            sample = self.replay.sample(self.config.batch_size)
            data = {
                "observation": self.preprocess(sample.get("observation")), "action": sample.get("action"),
                "reward": sample.get(("next", "reward")).float(),
                "next_observation": self.preprocess(sample.get(("next", "observation"))),
                "not_terminated": (~sample.get(("next", "terminated")).bool()).float(),
            }
            data["weight"] = sample.get("weight").reshape(-1, 1) if "weight" in sample.keys() else None
            if "index" in sample.keys():
                data["index"] = sample.get("index")
            yield data

    def sequence_samples(self) -> Iterator[dict]:
        """``gradient_steps`` samples of sequences: the observations as an ObservationSequence (the stored
        ones and the last one's next; ``is_init`` on the first, where the zero state starts, and wherever
        an episode starts), the rest ``[sequences, steps, ...]`` from ``burn_in`` on. Sampled sequences never
        cross an episode's end, so the next observations are the observations one step on."""
        length, start = self.config.sequence_length, self.config.burn_in
        for _ in range(self.config.gradient_steps):
            sample = self.replay.sample_sequences(self.config.batch_size, length)
            observations = torch.cat([sample.get("observation"), sample.get(("next", "observation"))[:, -1:]], 1)
            stored = sample.get("is_init").bool()
            is_init = torch.cat([torch.ones_like(stored[:, :1]), stored[:, 1:], torch.zeros_like(stored[:, :1])], 1)
            sequence = ObservationSequence(self.preprocess(observations), is_init, start, 0)
            yield {
                "observation": sequence, "next_observation": sequence.next(),
                "action": sample.get("action")[:, start:],
                "reward": sample.get(("next", "reward"))[:, start:].float(),
                "not_terminated": (~sample.get(("next", "terminated"))[:, start:].bool()).float(),
                "weight": None,
            }

    def preprocess(self, observation: torch.Tensor) -> torch.Tensor:
        observation = observation.float()
        return self.preprocessor(observation) if self.preprocessor is not None else observation

    # -- helpers for gradient steps -------------------------------------------------------------------

    def td_target(self, data: dict[str, torch.Tensor], next_value: torch.Tensor) -> torch.Tensor:
        """``reward + gamma * next_value``, the bootstrap dropped where the episode terminated."""
        return data["reward"] + self.config.gamma * data["not_terminated"] * next_value.float()

    @staticmethod
    def weighted_mean(loss: torch.Tensor, weight: torch.Tensor | None) -> torch.Tensor:
        """Per-sample losses averaged, with prioritised replay's importance weights where there are some."""
        return (loss * weight).mean() if weight is not None else loss.mean()

    # -- checkpoints ----------------------------------------------------------------------------------

    def modules(self) -> dict[str, nn.Module]:
        """Every network (targets too) by name, for checkpoints; subclasses add theirs."""
        return {}

    def networks(self) -> dict[str, nn.Module]:
        """The trained networks by name (no target copies), for loggers that record weights."""
        return {name: module for name, module in self.modules().items() if not name.startswith("target")}

    @property
    def parameters(self) -> list[nn.Parameter]:
        """The learned parameters (checked for NaN after each update)."""
        return [p for learner in self.learners.values() for p in learner.parameters]

    def state_dict(self) -> dict:
        state = {
            "frames": self.frames, "steps": self.steps,
            "networks": {name: module.state_dict() for name, module in self.modules().items()},
            "learners": {name: learner.state_dict() for name, learner in self.learners.items()},
            "replay_buffer": self.replay.state_dict(),
        }
        if self.preprocessor is not None:
            state["preprocessor"] = self.preprocessor.state_dict()
        if self.noise is not None:
            state["noise"] = self.noise.state_dict()
        if self.sequences:
            state["episodes"] = self.episodes.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        self.frames, self.steps = state["frames"], state["steps"]
        for name, module in self.modules().items():
            module.load_state_dict(state["networks"][name])
        for name, learner in self.learners.items():
            learner.load_state_dict(state["learners"][name])
        self.replay.load_state_dict(state["replay_buffer"])
        if self.preprocessor is not None:
            self.preprocessor.load_state_dict(state["preprocessor"])
        if self.noise is not None:
            self.noise.load_state_dict(state["noise"])
        if self.sequences:
            self.episodes.load_state_dict(state["episodes"])
        self.follow_schedules()
