"""What every off-policy algorithm shares, written once: replay, the update loop, the loss's optimisers, precision.

An algorithm here is a config dataclass (in its folder, ``rlplug/plugins/algorithms/<name>/``, on the family's
configs in :mod:`rlplug.plugins.algorithms.offpolicy.config`: its fields are its recipe table) and a subclass
of :class:`OffPolicy` that builds its networks; what one gradient step minimises is its loss (``config.loss``: a
TorchRL ``LossModule``, rlplug's own by default, TorchRL's ``DDPGLoss``, ``TD3Loss``, ``SACLoss`` or ``DQNLoss`` on
request), which also owns the target networks. One update, top to bottom:

1. :meth:`~OffPolicy.store`: the collected ``[envs, time]`` batch is shaped (``reward_scale``,
   ``reward_offset``, ``reward_clip``) and added to the replay buffer; the observation preprocessor's
   statistics take in the new observations; exploration noise restarts where an episode ended;
2. schedules follow the frames collected: learning rates, the noise's schedule, the end of the random-action
   phase, and what the algorithm schedules itself (:meth:`~OffPolicy.before_update`: DQN's epsilon and target
   updates);
3. from ``learning_starts`` on, ``gradient_steps`` times: sample ``batch_size`` transitions (preprocessed),
   the loss gives its terms, one backward pass of their sum, each learner (one per parameter group of the
   loss) steps, the targets move (:meth:`~OffPolicy.gradient_step`); a prioritised buffer gets each sample's
   new priority from the TD error the loss wrote.

The acting policy (what the collector runs under random exploration and evaluation under deterministic) is
the actor behind the preprocessor, then the noise, then uniformly random actions for the first
``random_frames`` frames.

With recurrent networks (DDPG, TD3: :mod:`rlplug.core.recurrent`) the store also writes each transition's
episode id, step and ``is_init``, and a sample is ``batch_size / sequence_length`` sequences of one
episode's consecutive steps (:meth:`~OffPolicy.sequence_samples`).
"""

from __future__ import annotations

import functools
import operator
import warnings
from collections.abc import Iterator
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase, TensorDictSequential
from torch import nn

from rlplug.core.masks import MASK
from rlplug.core.observations import CRITIC_OBSERVATION
from rlplug.core.training import MetricMean, compile_in_place, summed, updates_stopped
from rlplug.errors import RlplugWarning, UserError
from rlplug.networks import is_discrete, observation_key
from rlplug.plugins.algorithms.acting import OffPolicyActing
from rlplug.plugins.algorithms.intrinsic_rewards import IntrinsicRewards, refused
from rlplug.plugins.algorithms.networks import build_network, state_dependent_actor
from rlplug.plugins.algorithms.offpolicy.config import DQNConfig, OffPolicyConfigs, PolyakTargets, SequencesConfig
from rlplug.plugins.algorithms.offpolicy.contract import check_loss_contract, check_state_kept, plugin_mistake
from rlplug.plugins.algorithms.offpolicy.gradients import GradientsInterface
from rlplug.plugins.algorithms.offpolicy.n_step import NStepReturns
from rlplug.plugins.algorithms.offpolicy.parts import (
    EpisodeLabels,
    FlatTargets,
    Learners,
    RandomActions,
    behind_preprocessor,
    mixed_precision_context,
)
from rlplug.plugins.algorithms.parameters import ChangesDuringRun
from rlplug.registry import protocols
from rlplug.registry.networks import OffPolicyNetworks
from rlplug.registry.protocols import capability

#: The names batch normalisation gives its running statistics (torch.nn.BatchNorm1d's buffers).
STATISTICS = ("running_mean", "running_var", "num_batches_tracked")

#: The transition keys stored in the replay buffer (TorchRL's layout); ``observation`` stands for the
#: env's observation key.
TRANSITION_KEYS = ("observation", "action", ("next", "observation"), ("next", "reward"), ("next", "terminated"))


# -- the shared algorithm --------------------------------------------------------------------------------

class OffPolicy(OffPolicyActing, GradientsInterface, ChangesDuringRun):
    """The shared update; subclasses build their networks (:meth:`build`) and define :meth:`gradient_step`."""

    #: "continuous" or "discrete": the actions the algorithm acts in
    actions = "continuous"
    #: the algorithm's settings (each algorithm narrows the type to its own config)
    config: OffPolicyConfigs
    #: each stored transition's episode and step; set by build() where the networks are recurrent
    episodes: EpisodeLabels

    def __init__(self, config: OffPolicyConfigs, *, observation_spec, action_spec, device: str,
                 total_frames: int, seed: int = 0, run_dir=None, eval_episodes: int | None = None,
                 eval_every_frames: int | None = None):
        self.config, self.device, self.total_frames = config, device, total_frames
        self.eval_episodes, self.eval_every_frames = eval_episodes, eval_every_frames
        self.observation_spec, self.action_spec = observation_spec, action_spec
        self.check_actions(action_spec)
        if CRITIC_OBSERVATION in observation_spec.keys():
            raise UserError("the off-policy family's critics learn from the observations its replay stores, the "
                            "policy's; an asymmetric critic (in_keys) is read by the on-policy family (ppo, a2c, "
                            "vpg, impala...) for now", path="algorithm.critic.in_keys")
        self.observation_key = observation_key(observation_spec)
        env_dims = observation_spec.ndim
        self.frames_per_batch = max(1, observation_spec.shape.numel()) * config.steps_per_update
        self.specs = {"observation_spec": observation_spec, "action_spec": action_spec, "device": device}
        self.replay = config.replay_buffer.build(device=device, seed=seed, run_dir=run_dir, total_frames=total_frames,
                                                 observation_spec=observation_spec, action_spec=action_spec)
        self.replay_step = capability(self.replay, protocols.ReplayBuffer.step)
        self.replay_sample_many = capability(self.replay, protocols.ReplayBuffer.sample_many)
        if getattr(self.replay, "capacity", config.batch_size) < config.batch_size:  # it would never learn
            raise UserError(f"a replay buffer of capacity {self.replay.capacity} never holds a batch of batch_size = "
                            f"{config.batch_size}, so nothing would be learned; raise the capacity",
                            path="algorithm.replay_buffer.capacity")
        self.preprocessor = None
        if config.observation_preprocessor is not None:
            self.preprocessor = build_network(config.observation_preprocessor, observation_spec=observation_spec,
                                              device=device)
            self.preprocessor.eval()  # statistics change only in store(), in train mode
        self.autocast = mixed_precision_context(config.mixed_precision, device)
        self.noise = None
        self.sequences = False  # build() says whether the networks learn from sequences (recurrent ones)

        actor = self.build()  # the subclass's networks; the actor that acts
        sde = bool(getattr(config, "use_sde", False))  # the actor-critics' keys (ActorCriticConfig)
        if getattr(config, "use_sde_at_warmup", False) and not sde:
            raise UserError("acts with gSDE during random_frames, so it needs use_sde = true",
                            path="algorithm.use_sde_at_warmup")
        if sde:  # the built actor gets gSDE's scale in place (the loss trains it); this one explores around it
            actor = state_dependent_actor(actor, config, action_spec=action_spec, algorithm=type(self).__name__.lower(),
                                          steps_per_batch=config.steps_per_update, learn_features=True)
        self.loss_module = protocols.conform(protocols.Loss, config.loss.build(
            networks=self.trained_networks(), settings=config, observation_spec=observation_spec,
            action_spec=action_spec, device=device,
        ), config.loss.title)
        check_loss_contract(self.loss_module, config.loss.title, type(self).__name__.lower(), self.learner_names)
        #: what the replay stores of each batch with n-step returns (None: one-step transitions)
        self.n_step_writer = self.n_step_problems() if config.n_steps > 1 else None
        self.update_targets = protocols.capability(self.loss_module, protocols.Loss.update_targets)
        if self.update_targets is not None and not isinstance(config, (PolyakTargets, DQNConfig)):
            raise plugin_mistake(config.loss.title, f"it keeps target networks, and {type(self).__name__.lower()} "
                                                    f"has none (no tau to move them by)")
        #: the loss's state as built: a key that appears in training would make every checkpoint unloadable
        self.loss_state_keys = set(self.loss_module.state_dict())
        #: the loss's state that its forward pass changes: batch normalisation's running statistics (CrossQ's
        #: critics), which travel with gradients computed elsewhere
        self.statistics_keys = sorted(key for key in self.loss_state_keys if key.rsplit(".", 1)[-1] in STATISTICS)
        # recurrent layers keep their weights where cuDNN wants them: no flat parameters for them
        self.learners = Learners(self.loss_module.parameter_groups, self.learning_rates(), config, device,
                                 flat=not self.sequences)
        # the targets moved in one kernel per learner where they can be laid out as its flat parameters
        if self.update_targets is not None:
            fused = FlatTargets.where_possible(capability(self.loss_module, protocols.Loss.target_parameters),
                                               self.learners.trained, self.update_targets)
            self.update_targets = fused or self.update_targets
        stages = [behind_preprocessor(actor, self.preprocessor, action_spec), *self.exploration_stages()]
        random_phase = config.random_frames > 0 and not (sde and getattr(config, "use_sde_at_warmup", False))
        self.random_actions = RandomActions(action_spec, env_dims, masked=MASK in observation_spec.keys()) \
            if random_phase else None
        if self.random_actions is not None:
            stages.append(self.random_actions)
        self.policy: TensorDictModuleBase = stages[0] if len(stages) == 1 else TensorDictSequential(*stages)
        #: whether the collector's workers write the transitions into the replay themselves (:meth:`install_replay`)
        self.stored_elsewhere = False
        self.frames = 0
        self.steps = 0  # gradient steps taken
        #: ``[algorithm.intrinsic]``: a bonus added to the rewards before they are shaped and stored (None: none)
        self.intrinsic = IntrinsicRewards.of(config, observation_spec=observation_spec, action_spec=action_spec,
                                             device=device, total_frames=total_frames)
        #: the learners holding gradients that :meth:`apply_gradients` has not stepped yet
        self.pending: list[str] = []

    def n_step_problems(self) -> NStepWriter:
        """The n-step writer, once ``n_steps`` is known to fit the rest of the recipe (one-line errors)."""
        config, loss = self.config, self.loss_module
        if self.sequences:
            raise UserError("n-step returns sum rewards over single transitions; recurrent networks (lstm, gru) "
                            "learn from sequences: set n_steps = 1 or use an mlp", path="algorithm.n_steps")
        if config.gamma == 0:
            raise UserError("with gamma = 0 only the first reward counts, so n-step returns change nothing; set "
                            "n_steps = 1 or raise gamma", path="algorithm.n_steps")
        capacity = getattr(self.replay, "capacity", None)
        if capacity is not None and config.n_steps > capacity:
            raise UserError(f"must be at most the replay buffer's capacity ({capacity}), got {config.n_steps}",
                            path="algorithm.n_steps")
        if not protocols.capability(loss, protocols.Loss.n_step_targets):
            raise UserError(f"{config.loss.title} bootstraps one step on (it does not declare "
                            f"n_step_targets, discounting by gamma ** steps_to_next_obs); set n_steps = 1 or use "
                            f"another loss", path="algorithm.n_steps")
        return NStepWriter(config, self.observation_key)

    # -- what algorithms define -----------------------------------------------------------------------

    #: the learners (optimisers) this algorithm has, each with its learning rate: the names a loss's
    #: ``parameter_groups`` and ``term_learners`` may use
    learner_names: tuple[str, ...] = ()

    def check_actions(self, action_spec) -> None:
        if (self.actions == "discrete") != is_discrete(action_spec):
            other = "dqn" if self.actions == "continuous" else "ddpg, td3 or sac"
            raise UserError(f"{type(self).__name__.lower()} is for {self.actions} actions and this env's are not; "
                            f"use {other}, or an on-policy algorithm (ppo)", path="algorithm")

    def build(self) -> TensorDictModuleBase:
        """Build the networks; return the actor the policy acts with."""
        raise NotImplementedError

    def trained_networks(self) -> OffPolicyNetworks:
        """The networks the loss is built with, by role (:mod:`rlplug.registry.networks`)."""
        raise NotImplementedError

    def learning_rates(self) -> dict[str, float]:
        """Each of the loss's parameter groups' base learning rate."""
        lr = self.config.lr
        if isinstance(lr, list):  # a pair [actor, critic]: the actor-critics split it in their own learning_rates
            raise TypeError(f"{type(self).__name__} takes lr = {lr!r}, a pair, and must split it in learning_rates")
        return {name: lr for name in self.loss_module.parameter_groups}

    def exploration_stages(self) -> list[TensorDictModuleBase]:
        """The modules after the actor in the acting policy (noise, epsilon-greedy)."""
        return []

    def stepped_learners(self) -> set[str]:
        """The learners this gradient step moves (TD3 moves its actor every policy_delay steps only)."""
        return set(self.learners.groups)

    def moves_targets(self) -> bool:
        """Whether the targets follow the online networks after this gradient step (DQN moves them by frames)."""
        return True

    @property
    def tau(self) -> float:
        """The polyak coefficient the loss's targets move by (only an algorithm with targets has one: a loss
        keeping targets is refused at build for the others)."""
        config = self.config
        if not isinstance(config, (PolyakTargets, DQNConfig)):
            raise TypeError(f"{type(self).__name__} keeps no target networks, so it has no tau")
        return config.tau

    def before_update(self, frames_before: int) -> None:
        """Called after the batch is stored, before the gradient steps: for schedules of the algorithm's own."""

    def extra_metrics(self) -> dict[str, float]:
        return {}

    # -- 1. storing -----------------------------------------------------------------------------------

    @torch.no_grad()
    def store(self, batch: TensorDictBase) -> None:
        if not self.stored_elsewhere:
            if self.intrinsic is not None:  # before the shaping and the n-step sums, which then include it
                batch = self.intrinsic.added(batch)
            if self.n_step_writer is None:
                transitions = replay_transitions(batch, self.config, self.observation_key)
            else:  # the steps whose n-step windows this batch completes (none yet, in a run's first few steps)
                transitions = self.n_step_writer(batch, self.config)
            if self.sequences:
                flat_init = batch.get("is_init").flatten(0, batch.batch_dims - 1)
                transitions.update({"is_init": flat_init, **self.episodes.label(batch.get("is_init"))})
            self.replay.extend(transitions)
            if self.preprocessor is not None and transitions.numel():
                self.preprocessor.train()
                self.preprocessor(transitions.get("observation"))
                self.preprocessor.eval()
        if self.noise is not None and capability(self.noise, protocols.Noise.reset):
            done = batch.get(("next", "done"))[..., -1, :]  # [envs, 1]: each env's last step of the batch
            if done.any():
                self.noise.reset(done)

    def install_replay(self, replay: Any, *, stored_elsewhere: bool = False) -> None:
        """Learn from ``replay`` instead of the recipe's buffer (a runner's replay storages elsewhere, Ray's);
        ``stored_elsewhere``: the collector's workers write the transitions into it, and :meth:`store` keeps only
        the batch's effect on exploration (the batch it gets may hold only rewards and dones)."""
        self.replay = replay
        self.replay_step = capability(replay, protocols.ReplayBuffer.step)
        self.replay_sample_many = capability(replay, protocols.ReplayBuffer.sample_many)
        self.stored_elsewhere = stored_elsewhere

    # -- 2. schedules ---------------------------------------------------------------------------------

    def follow_schedules(self) -> dict[str, float]:
        progress = self.frames / self.total_frames
        rates = self.learners.set_progress(progress)
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
        result = self.start_update(batch)
        if not self.learning():
            return {**result, **self.extra_metrics()}
        metrics = MetricMean()
        for sample in self.samples():
            if updates_stopped():  # a signal: the update ends here, not after every gradient step
                break
            self.gradient_step(sample, metrics)  # counts the step
            if self.steps == 1:
                check_state_kept(self.loss_module, self.loss_state_keys, self.config.loss.title)
            self.new_priorities(sample, sample.get("td_error", None))
        return {**result, **metrics.means(), **self.extra_metrics()}

    def start_update(self, batch: TensorDictBase) -> dict[str, float]:
        """Steps 1 and 2 of an update: the batch stored, the schedules followed; their metrics."""
        self.store(batch)
        result = self.follow_frames(batch.numel())
        result["buffer_size"] = float(len(self.replay))
        if self.intrinsic is not None:
            result.update(self.intrinsic.report)
        return result

    def follow_frames(self, frames: int) -> dict[str, float]:
        """Step 2 of an update: ``frames`` more collected, the schedules followed; their metrics (also the
        learner's whole step 2 where Ray's gradient workers store the batches)."""
        frames_before = self.frames
        if frames_before == 0 and self.config.learning_starts > self.total_frames:  # a short trial may mean it
            warnings.warn(RlplugWarning(f"algorithm.learning_starts = {self.config.learning_starts} is beyond "
                                        f"run.total_frames = {self.total_frames}: no gradient step will be taken, so "
                                        f"nothing is learned; lower it or raise run.total_frames"), stacklevel=2)
        self.frames += frames
        result = self.follow_schedules()
        self.before_update(frames_before)
        return result

    def learning(self) -> bool:
        """Whether this update takes gradient steps (from ``learning_starts`` on, with a batch in the buffer)."""
        return self.frames >= self.config.learning_starts and len(self.replay) >= self.config.batch_size

    def new_priorities(self, sample: TensorDictBase, td_error: torch.Tensor | None) -> None:
        """A prioritised buffer's new priorities for ``sample``, from the TD errors the loss wrote."""
        if td_error is not None and "index" in sample.keys():
            self.replay.update_priority(sample.get("index"), td_error)

    def batched_update(self, algorithms: list[OffPolicy], seeds: list[int]):
        """Seeds trained together (:class:`~rlplug.plugins.algorithms.offpolicy.batched.OffPolicyTogether`)."""
        from rlplug.plugins.algorithms.offpolicy.batched import OffPolicyTogether

        if self.intrinsic is not None:
            raise refused("seeds trained together (--batched)")

        return OffPolicyTogether(algorithms, seeds)

    def data_parallel(self, copies: int):
        """Its update over ``copies`` copies (Ray's gradient workers, learners)."""
        from rlplug.plugins.algorithms.offpolicy.data_parallel import ReplayDataParallel

        if self.intrinsic is not None:
            raise refused("Ray's gradient workers and learners")

        return ReplayDataParallel(self, copies)

    def replay_storage(self):
        """Its replay as Ray's replay storages hold it."""
        from rlplug.plugins.algorithms.offpolicy.data_parallel import OffPolicyReplayStorage

        if self.intrinsic is not None:
            raise refused("Ray's replay storages")

        if self.config.n_steps > 1:  # a writer of its own, whose copy on each worker holds that worker's steps
            return OffPolicyReplayStorage(self, NStepWriter(self.config, self.observation_key))
        return OffPolicyReplayStorage(self, functools.partial(replay_transitions, config=self.config,
                                                              key=self.observation_key))

    def rounded_cadence(self, unit: int) -> str | None:
        """The frames of an update rounded to ``unit``, the gradient steps per frame kept."""
        from rlplug.plugins.algorithms.offpolicy.data_parallel import rounded_cadence

        return rounded_cadence(self, unit)

    def compile_update(self) -> None:
        """``run.compile``: the loss, every term of it in one compiled call."""
        compile_in_place(self.loss_module, self.device)

    def gradient_step(self, sample: TensorDictBase, metrics: MetricMean) -> None:
        """One gradient step on ``sample``: :meth:`backward`, then :meth:`apply_gradients` (the learners' steps,
        the targets moved). What the loss reports (scalars) and each gradient norm go to ``metrics``."""
        out = self.backward(sample)
        norms = self.apply_gradients()
        metrics.add(**{key: value for key, value in out.items() if value.numel() == 1}, **norms)

    def backward(self, sample: TensorDictBase) -> TensorDictBase:
        """The loss's terms on ``sample`` and one backward pass of the sum of those whose learners step now
        (TD3's and CrossQ's actor every ``policy_delay`` steps), the gradients left in those learners; the
        loss's output (it also writes ``td_error`` into ``sample``)."""
        stepped = self.stepped_learners()
        with self.autocast():
            out = self.loss_module(sample)
        learners = self.loss_module.term_learners
        terms = [value for key, value in out.items() if key in learners and learners[key] in stepped]
        self.learners.backward(summed(terms), stepped)
        self.pending = [name for name in self.learners.groups if name in stepped]
        return out

    @torch.no_grad()
    def samples(self) -> Iterator[TensorDictBase]:
        """``gradient_steps`` samples from the buffer, observations preprocessed."""
        if self.sequences:
            yield from self.sequence_samples()
            return
        yield from self.draw(self.config.batch_size)

    def draw(self, batch_size: int) -> Iterator[TensorDictBase]:
        """``gradient_steps`` samples of ``batch_size``, in one call where the buffer can draw them so."""
        if self.replay_sample_many is None:
            for _ in range(self.config.gradient_steps):
                yield self.sample(batch_size)
            return
        for sample in self.replay_sample_many(batch_size, self.config.gradient_steps):
            yield self.preprocessed(sample)

    @torch.no_grad()
    def sample(self, batch_size: int) -> TensorDictBase:
        """``batch_size`` transitions from the buffer, observations preprocessed."""
        return self.preprocessed(self.replay.sample(batch_size))

    @torch.no_grad()
    def preprocessed(self, sample: TensorDictBase) -> TensorDictBase:
        if self.preprocessor is not None or sample.get("observation").dtype != torch.float32:
            for key in ("observation", ("next", "observation")):
                sample.set(key, self.preprocess(sample.get(key)))
        return sample

    def sequence_samples(self) -> Iterator[TensorDictBase]:
        """``gradient_steps`` samples of sequences (``[sequences]``): the observations ``[sequences, L + 1,
        ...]`` (the stored ones and the last one's next) with ``is_init`` on the first (where the zero state
        starts) and wherever an episode starts; actions, rewards and terminations from ``burn_in`` on. Sampled
        sequences never cross an episode's end, so the next observations are the observations one step on."""
        config = self.config
        if not isinstance(config, SequencesConfig):  # only DDPG and TD3 learn from sequences
            raise TypeError(f"{type(self).__name__} learns from no sequences (its config has no sequence_length)")
        length, start = config.sequence_length, config.burn_in
        for _ in range(self.config.gradient_steps):
            sample = self.replay.sample_sequences(self.config.batch_size, length)
            observations = torch.cat([sample.get("observation"), sample.get(("next", "observation"))[:, -1:]], 1)
            stored = sample.get("is_init").bool()
            is_init = torch.cat([torch.ones_like(stored[:, :1]), stored[:, 1:], torch.zeros_like(stored[:, :1])], 1)
            yield TensorDict({
                "observation": self.preprocess(observations), "is_init": is_init,
                "action": sample.get("action")[:, start:],
                "next": {"reward": sample.get(("next", "reward"))[:, start:],
                         "terminated": sample.get(("next", "terminated"))[:, start:]},
            }, batch_size=[len(observations)])

    def preprocess(self, observation: torch.Tensor) -> torch.Tensor:
        observation = observation.float()
        return self.preprocessor(observation) if self.preprocessor is not None else observation

    # -- checkpoints ----------------------------------------------------------------------------------

    def networks(self) -> dict[str, nn.Module]:
        """The trained networks by name, for loggers that record weights."""
        networks: dict[str, object] = dict(self.trained_networks())
        return {name: network for name, network in networks.items() if isinstance(network, nn.Module)}

    @property
    def parameters(self) -> list[nn.Parameter]:
        """The learned parameters (checked for NaN after each update)."""
        return self.learners.parameters

    def state_dict(self) -> dict:
        state = {
            "frames": self.frames, "steps": self.steps,
            "loss": self.loss_module.state_dict(), "learners": self.learners.state_dict(),
            "replay_buffer": self.replay.state_dict(),
        }
        if self.preprocessor is not None:
            state["preprocessor"] = self.preprocessor.state_dict()
        if self.noise is not None:
            state["noise"] = self.noise.state_dict()
        if self.sequences:
            state["episodes"] = self.episodes.state_dict()
        if self.n_step_writer is not None:
            state["n_step"] = self.n_step_writer.returns.state_dict()
        if self.intrinsic is not None:
            state["intrinsic"] = self.intrinsic.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        self.frames, self.steps = operator.index(state["frames"]), operator.index(state["steps"])  # counts
        self.loss_module.load_state_dict(state["loss"])  # the networks and their targets
        self.learners.load_state_dict(state["learners"])
        replay = state["replay_buffer"]
        if ("shards" in replay) == bool(getattr(self.replay, "sharded", False)):
            self.replay.load_state_dict(replay)
        else:  # saved by Ray's replay storages and loaded by one buffer (or the other way round)
            warnings.warn(RlplugWarning("the checkpoint's replay buffer was kept in another layout (runner.storages "
                                        "differs): this run's buffer starts empty and fills again"), stacklevel=2)
        if self.preprocessor is not None:
            self.preprocessor.load_state_dict(state["preprocessor"])
        if self.noise is not None:
            self.noise.load_state_dict(state["noise"])
        if self.sequences:
            self.episodes.load_state_dict(state["episodes"])
        if self.n_step_writer is not None:  # a checkpoint of n_steps = 1 holds no steps
            self.n_step_writer.returns.load_state_dict(state.get("n_step", {}))
        if self.intrinsic is not None:
            self.intrinsic.load_state_dict(state["intrinsic"])
        self.follow_schedules()


def replay_transitions(batch: TensorDictBase, config: OffPolicyConfigs, key: str) -> TensorDictBase:
    """A collected ``[envs, time]`` batch as the replay stores it with one-step targets: ``[envs * time]``
    transitions, their rewards shaped (:func:`shaped_reward`); also what Ray's workers write into storages."""

    def flat(entry):  # [envs, time, ...] -> [envs * time, ...], tensor by tensor (cheaper than the TensorDict)
        return batch.get(entry).flatten(0, batch.batch_dims - 1)

    transitions = TensorDict({
        "observation": flat(key), "action": flat("action"),
        "next": {"observation": flat(("next", key)), "reward": shaped_reward(flat(("next", "reward")), config),
                 "terminated": flat(("next", "terminated"))},
    }, batch_size=[batch.numel()])
    if MASK in batch.keys():  # the env's allowed actions, now and next (what the policies and the targets read)
        transitions.update({MASK: flat(MASK), ("next", MASK): flat(("next", MASK))})
    return transitions


def shaped_reward(reward: torch.Tensor, config: OffPolicyConfigs) -> torch.Tensor:
    """``clip(reward * reward_scale + reward_offset, -reward_clip, reward_clip)``: the reward the replay keeps."""
    reward = reward * config.reward_scale + config.reward_offset
    if config.reward_clip is not None:
        reward = reward.clamp(-config.reward_clip, config.reward_clip)
    return reward


class NStepWriter:
    """What the replay stores of each collected batch with ``n_steps > 1``: its steps, rewards shaped, kept
    ``[envs, time]`` for :class:`~rlplug.plugins.algorithms.offpolicy.n_step.NStepReturns`, which holds each env's
    latest steps until the batch that completes their windows. Picklable: each of Ray's workers writes with its
    own copy, holding its own envs' steps."""

    def __init__(self, config: OffPolicyConfigs, key: str):
        self.config, self.key = config, key
        self.returns = NStepReturns(config.n_steps)

    def __call__(self, batch: TensorDictBase, config: OffPolicyConfigs | None = None) -> TensorDictBase:
        config = config or self.config  # the algorithm's config of now (rlplug set: gamma, reward shaping)
        key = self.key
        steps = TensorDict({
            "observation": batch.get(key), "action": batch.get("action"),
            "next": {"observation": batch.get(("next", key)),
                     "reward": shaped_reward(batch.get(("next", "reward")), config),
                     "terminated": batch.get(("next", "terminated")), "done": batch.get(("next", "done"))},
        }, batch_size=batch.batch_size)
        if MASK in batch.keys():  # allowed actions: the window's first step's, and those after its last step
            steps.update({MASK: batch.get(MASK), ("next", MASK): batch.get(("next", MASK))})
        if steps.ndim == 1:  # one env without a batch dim: [time]
            steps = steps.unsqueeze(0)
        return self.returns(steps, config.gamma)
