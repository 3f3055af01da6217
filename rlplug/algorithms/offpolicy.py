"""What every off-policy algorithm shares, written once: replay, the update loop, targets, precision.

An algorithm here is a config dataclass (:mod:`rlplug.algorithms.offpolicy_config`: its fields are its
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

With recurrent networks (DDPG, TD3: :mod:`rlplug.recurrent`) the store also writes each transition's
episode id, step and ``is_init``, and a sample is ``batch_size / sequence_length`` sequences of one
episode's consecutive steps: the observations become an :class:`~rlplug.recurrent.ObservationSequence` and
every other tensor is ``[sequences, steps, ...]`` from the burn-in on, so the gradient steps do not change.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from contextlib import nullcontext

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModule, TensorDictModuleBase, TensorDictSequential
from torch import nn
from torchrl.envs.utils import ExplorationType, exploration_type
from torchrl.modules import ProbabilisticActor

from rlplug.acting import ActorView
from rlplug.algorithms.offpolicy_config import OffPolicyConfig
from rlplug.errors import UserError
from rlplug.networks import is_discrete, observation_key
from rlplug.recurrent import ObservationSequence, is_recurrent, sequence_function
from rlplug.replay import SEQUENCES_NEED_UNIFORM
from rlplug.tensordicts import trusted
from rlplug.training import (FlatParameters, MetricMean, NonFiniteError, make_optimizer, optimiser_step, scheduled_lr,
                             set_learning_rate)

#: The transition keys stored in the replay buffer (TorchRL's layout); ``observation`` stands for the
#: env's observation key.
TRANSITION_KEYS = ("observation", "action", ("next", "observation"), ("next", "reward"), ("next", "terminated"))


# -- target networks -----------------------------------------------------------------------------------

@torch.no_grad()
def polyak_update(target: nn.Module | FlatParameters, online: nn.Module | FlatParameters | list[nn.Parameter],
                  tau: float) -> None:
    """``target = (1 - tau) * target + tau * online`` for every parameter, in place, in two foreach ops
    (``tau = 1``: a plain copy); over one tensor each where both are :class:`FlatParameters` (see
    :func:`flat_target`). Buffers are left alone (the networks here keep none that learn)."""
    targets, onlines = parameter_tensors(target), parameter_tensors(online)
    if tau == 1.0:
        torch._foreach_copy_(targets, onlines)
        return
    torch._foreach_mul_(targets, 1.0 - tau)
    torch._foreach_add_(targets, torch._foreach_mul(onlines, tau))


def parameter_tensors(parameters: nn.Module | FlatParameters | list[nn.Parameter]) -> list[torch.Tensor]:
    if isinstance(parameters, FlatParameters):
        return [parameters.flat]
    return list(parameters.parameters()) if isinstance(parameters, nn.Module) else list(parameters)


def flat_target(target: nn.Module, online: FlatParameters | list[nn.Parameter]) -> nn.Module | FlatParameters:
    """``target``'s parameters in one tensor laid out as ``online``'s where those are flat (a learner's
    :attr:`Learner.trained`), so each polyak update is a few kernels; else ``target`` itself."""
    if isinstance(online, FlatParameters):
        return FlatParameters(list(target.parameters()), trained=False)
    return target


def target_copy(network: nn.Module) -> nn.Module:
    """A frozen deep copy of ``network``, to be moved by :func:`polyak_update`."""
    target = copy.deepcopy(network)
    target.requires_grad_(False)
    return target


# -- networks as tensor functions ------------------------------------------------------------------------

def tensor_function(network: TensorDictModuleBase, in_keys: list) -> Callable[..., torch.Tensor]:
    """``network`` as a function of tensors (in ``in_keys`` order) returning its first output: its own torch
    module when it is a plain TensorDictModule reading exactly those keys, otherwise through a TensorDict."""
    if isinstance(network, TensorDictModule) and list(network.in_keys) == list(in_keys) \
            and not isinstance(network, TensorDictSequential):
        return network.module
    out_key = network.out_keys[0]

    def through_tensordict(*tensors: torch.Tensor) -> torch.Tensor:
        data = TensorDict(dict(zip(in_keys, tensors)), batch_size=tensors[0].shape[:-1])
        return network(data).get(out_key)

    return through_tensordict


class Preprocessed(nn.Module):
    """``module(preprocessor(observation), *rest)``: a network behind the observation preprocessor."""

    def __init__(self, preprocessor: nn.Module, module: nn.Module):
        super().__init__()
        self.preprocessor, self.module = preprocessor, module

    def forward(self, observation: torch.Tensor, *rest: torch.Tensor):
        return self.module(self.preprocessor(observation), *rest)


def behind_preprocessor(network: TensorDictModuleBase, preprocessor: nn.Module | None,
                        action_spec) -> TensorDictModuleBase:
    """The same network (its parameters shared) reading preprocessed observations, for acting."""
    if preprocessor is None:
        return network
    if isinstance(network, ProbabilisticActor):
        view = ActorView.of(network)
        params = TensorDictModule(Preprocessed(preprocessor, view.params_module), in_keys=[view.observation_key],
                                  out_keys=list(view.param_keys))
        return ProbabilisticActor(params, in_keys=list(view.param_keys), distribution_class=view.distribution_class,
                                  distribution_kwargs=view.distribution_kwargs, spec=action_spec,
                                  return_log_prob=True)
    if isinstance(network, TensorDictModule) and not isinstance(network, TensorDictSequential):
        return TensorDictModule(Preprocessed(preprocessor, network.module), in_keys=list(network.in_keys),
                                out_keys=list(network.out_keys))
    raise UserError(f"an observation preprocessor needs a policy network that is one TensorDictModule or a "
                    f"ProbabilisticActor, got {type(network).__name__}", path="algorithm.observation_preprocessor")


# -- exploration -----------------------------------------------------------------------------------------

def exploring() -> bool:
    """Whether actions are being collected for training (random exploration), not evaluated."""
    return exploration_type() == ExplorationType.RANDOM


class RandomActions(TensorDictModuleBase):
    """Replaces ``action`` by a uniformly random one while :attr:`active` and exploring (the first
    ``random_frames`` of a run); the algorithm switches it off as frames come in."""

    def __init__(self, action_spec, env_dims: int):
        super().__init__()
        self.in_keys, self.out_keys = ["action"], ["action"]
        self.spec = action_spec[(0,) * env_dims] if env_dims else action_spec  # one env's actions
        self.active = True

    def forward(self, data: TensorDictBase) -> TensorDictBase:
        data.set("action", self.act_on(data.get("action")))
        return data

    def act_on(self, action: torch.Tensor) -> torch.Tensor:
        """A random action of the same batch shape in place of ``action`` while active and exploring."""
        if self.active and exploring():
            return self.spec.rand(action.shape[: action.ndim - self.spec.ndim]).to(action.device)
        return action


# -- optimisation ----------------------------------------------------------------------------------------

class Learner:
    """One network's optimiser: its parameters, base learning rate and schedule, gradient clipping, and
    under CUDA float16 mixed precision a gradient scaler."""

    def __init__(self, parameters: list[nn.Parameter], lr: float, config: OffPolicyConfig, device: str,
                 flat: bool = True):
        self.parameters, self.lr, self.schedule = parameters, lr, config.lr_schedule
        self.max_grad_norm = config.max_grad_norm
        cuda = torch.device(device).type == "cuda"
        self.scaler = torch.amp.GradScaler("cuda") if config.mixed_precision and cuda else None
        #: one flat tensor where it fits and is asked for (not under a gradient scaler, which steps per-tensor
        #: gradients)
        self.trained = FlatParameters.where_possible(parameters, allowed=flat and self.scaler is None)
        self.optimiser = make_optimizer(config.optimizer, self.trained, lr, config.optimizer_kwargs)

    def set_progress(self, progress: float) -> float:
        lr = scheduled_lr(self.lr, self.schedule, progress)
        set_learning_rate(self.optimiser, lr)
        return lr

    def step(self, loss: torch.Tensor) -> torch.Tensor | None:
        """Backward, clip, step; the gradient norm before clipping (when clipping). Non-finite losses and
        gradient norms raise :class:`~rlplug.training.NonFiniteError`, except under a gradient scaler, which
        skips the step and lowers its scale (that is how float16 training finds its scale)."""
        if self.scaler is None:
            return optimiser_step(self.optimiser, loss, self.trained, self.max_grad_norm)
        if not torch.isfinite(loss):
            raise NonFiniteError("the loss")
        self.optimiser.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        self.scaler.unscale_(self.optimiser)
        norm = None
        if self.max_grad_norm:
            norm = nn.utils.clip_grad_norm_(self.parameters, self.max_grad_norm, foreach=True)
        self.scaler.step(self.optimiser)
        self.scaler.update()
        return norm

    def state_dict(self) -> dict:
        state = {"optimiser": self.optimiser.state_dict()}
        if self.scaler is not None:
            state["scaler"] = self.scaler.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        self.optimiser.load_state_dict(state["optimiser"])
        if self.scaler is not None and "scaler" in state:
            self.scaler.load_state_dict(state["scaler"])


def learning_rates(lr: float | list[float]) -> tuple[float, float]:
    """``lr`` as (actor, critic): one number for both, or the pair."""
    if isinstance(lr, (int, float)):
        return float(lr), float(lr)
    if len(lr) != 2:  # the recipe check says this already; here for configs built in code
        raise UserError(f"must be a number or a pair [actor, critic], got a list of {len(lr)}", path="algorithm.lr")
    return float(lr[0]), float(lr[1])


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
        if self.noise is not None and hasattr(self.noise, "reset"):
            done = batch.get(("next", "done"))[..., -1, :]  # [envs, 1]: each env's last step of the batch
            if done.any():
                self.noise.reset(done)

    # -- 2. schedules ---------------------------------------------------------------------------------

    def follow_schedules(self) -> dict[str, float]:
        progress = self.frames / self.total_frames
        rates = {name: learner.set_progress(progress) for name, learner in self.learners.items()}
        if self.noise is not None:
            self.noise.step(self.frames)
        if callable(getattr(self.replay, "step", None)):  # a prioritised buffer's importance-weight schedule
            self.replay.step(self.frames)
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


def build_network(component, **context) -> TensorDictModuleBase:
    """``component.build(**context)``, its errors located at the component's key in the algorithm's table
    (``algorithm.policy``)."""
    try:
        return component.build(**context)
    except UserError as error:
        raise (error if error.path else error.located(prefix=f"algorithm.{component.path}")) from None


class EpisodeLabels:
    """Each stored transition's episode id (unique over the run) and step within the episode, which the
    replay buffer's sequence sampler reads; an episode starts wherever the collector's ``is_init`` is set."""

    def __init__(self):
        self.next_id = 0
        self.episode: torch.Tensor | None = None  # [envs]: each env's current episode and step
        self.step: torch.Tensor | None = None

    def label(self, is_init: torch.Tensor) -> dict[str, torch.Tensor]:
        """``is_init`` ``[*envs, time, 1]`` -> ``episode`` and ``step``, flattened as the batch is."""
        starts = is_init.reshape(-1, is_init.shape[-2]).cpu()  # [envs, time]
        envs, steps = starts.shape
        if self.episode is None or len(self.episode) != envs:
            self.episode, self.step = torch.full((envs,), -1), torch.zeros(envs, dtype=torch.long)
        episode, step = torch.empty(envs, steps, dtype=torch.long), torch.empty(envs, steps, dtype=torch.long)
        for t in range(steps):
            new = starts[:, t]
            count = int(new.sum())
            if count:
                self.episode[new] = torch.arange(self.next_id, self.next_id + count)
                self.step[new] = 0
                self.next_id += count
            episode[:, t], step[:, t] = self.episode, self.step
            self.step += 1
        device = is_init.device
        return {"episode": episode.reshape(-1).to(device), "step": step.reshape(-1).to(device)}

    def state_dict(self) -> dict:
        state = {"next_id": self.next_id}
        if self.episode is not None:
            state.update(episode=self.episode.clone(), step=self.step.clone())
        return state

    def load_state_dict(self, state: dict) -> None:
        self.next_id = int(state["next_id"])
        self.episode, self.step = state.get("episode"), state.get("step")


def mixed_precision_context(enabled: bool, device: str) -> Callable[[], object]:
    """What the update's forward passes run in: autocast to bfloat16 on the CPU, float16 on CUDA, or nothing."""
    if not enabled:
        return nullcontext
    kind = torch.device(device).type
    dtype = torch.float16 if kind == "cuda" else torch.bfloat16
    return lambda: torch.autocast(kind, dtype=dtype)


# -- actor-critic for continuous actions (DDPG, TD3, SAC) --------------------------------------------------

class ActorCritic(OffPolicy):
    """An actor and ``critics`` Q-networks of (observation, action), each critic with a target copy, and a
    target actor unless :attr:`target_actor` is false; one learner for the actor, one for all critics."""

    critics = 1
    target_actor = True
    actor_role = "deterministic_policy"

    def build(self) -> TensorDictModuleBase:
        config, key = self.config, self.observation_key
        self.actor = build_network(config.policy, role=self.actor_role, **self.specs)
        self.critic_networks = nn.ModuleList(build_network(config.critic, role="q_value", **self.specs)
                                             for _ in range(self.critics))
        self.sequences = is_recurrent(self.actor) or is_recurrent(self.critic_networks)
        if self.sequences:
            if not is_recurrent(self.actor):  # episodes are told apart by the is_init of the actor's collection
                raise UserError("a recurrent critic needs a recurrent actor: set use = 'lstm' or 'gru' here too",
                                path="algorithm.policy")
            self.check_sequences()
            self.episodes = EpisodeLabels()
        function = sequence_function if self.sequences else tensor_function
        if self.actor_role == "deterministic_policy":
            self.mu = function(self.actor, [key])
        self.target_critics = target_copy(self.critic_networks)
        self.q = [function(c, [key, "action"]) for c in self.critic_networks]
        self.target_q = [function(c, [key, "action"]) for c in self.target_critics]
        if self.target_actor:
            self.actor_target = target_copy(self.actor)
            self.mu_target = function(self.actor_target, [key])
        actor_lr, critic_lr = learning_rates(config.lr)
        # recurrent layers keep their weights where cuDNN wants them: no flat parameters for them
        flat = not self.sequences
        self.learners = {"actor": Learner(list(self.actor.parameters()), actor_lr, config, self.device, flat=flat),
                         "critic": Learner(list(self.critic_networks.parameters()), critic_lr, config, self.device,
                                           flat=flat)}
        #: (target, online) pairs for :func:`polyak_update`
        self.targets = [(flat_target(self.target_critics, self.learners["critic"].trained),
                         self.learners["critic"].trained)]
        if self.target_actor:
            self.targets.append((flat_target(self.actor_target, self.learners["actor"].trained),
                                 self.learners["actor"].trained))
        low_high = self.action_bounds()
        self.action_scale = (low_high[1] - low_high[0]) / 2 if low_high else torch.ones(())
        self.action_low_high = low_high
        return self.actor

    def check_sequences(self) -> None:
        """What recurrent networks need of the rest of the recipe, as one-line errors naming the key."""
        config = self.config
        if config.burn_in >= config.sequence_length:
            raise UserError(f"must be less than sequence_length ({config.sequence_length}), got {config.burn_in}",
                            path="algorithm.burn_in")
        if config.batch_size % config.sequence_length:
            raise UserError(f"counts steps and must be a multiple of sequence_length ({config.sequence_length}) "
                            f"with recurrent networks, got {config.batch_size}", path="algorithm.batch_size")
        if self.preprocessor is not None:
            raise UserError("recurrent networks (lstm, gru) read the observations as the env gives them; use "
                            "the env's normalize_observations instead", path="algorithm.observation_preprocessor")
        if callable(getattr(self.replay, "update_priority", None)):
            raise UserError(SEQUENCES_NEED_UNIFORM, path="algorithm.replay_buffer")

    def exploration_stages(self) -> list[TensorDictModuleBase]:
        if self.config.exploration_noise is None:
            return []
        self.noise = self.config.exploration_noise.build(action_spec=self.action_spec, device=self.device,
                                                         total_frames=self.total_frames)
        return [self.noise]

    def action_bounds(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        from rlplug.networks import action_bounds

        bounds = action_bounds(self.observation_spec, self.action_spec)
        return None if bounds is None else (bounds[0].to(self.device), bounds[1].to(self.device))

    def critic_loss(self, data: dict[str, torch.Tensor], target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Sum over the critics of the (importance-weighted) squared TD errors; and the first critic's TD error."""
        losses, td_error = [], None
        for q in self.q:
            error = q(data["observation"], data["action"]).float() - target
            td_error = error if td_error is None else td_error
            losses.append(self.weighted_mean(error.pow(2), data["weight"]))
        return sum(losses), td_error

    def update_targets(self) -> None:
        for target, online in self.targets:
            polyak_update(target, online, self.config.tau)

    def modules(self) -> dict[str, nn.Module]:
        modules = {"actor": self.actor, "critics": self.critic_networks, "target_critics": self.target_critics}
        if self.target_actor:
            modules["target_actor"] = self.actor_target
        return modules
