"""What every collect-then-learn policy-gradient algorithm shares, written once.

An algorithm here is a config dataclass (in its folder, ``rlplug/plugins/algorithms/<name>/``, on
:class:`~rlplug.plugins.algorithms.onpolicy.config.OnPolicyConfig`: its fields are its recipe table) and a subclass
of :class:`OnPolicy`; what differs between PPO, A2C, VPG and the surrogate is their loss (``config.loss``: a TorchRL
``LossModule``, TorchRL's ``ClipPPOLoss`` and kin on request, rlplug's own by default: a subclass of
:class:`OnPolicyLoss`, below, in the algorithm's folder or the family's :mod:`~.losses`, which gives its policy
objective). One update, top to bottom:

1. the critic values every step and its successor; the estimators write ``advantage`` and ``value_target``;
2. ``epochs`` passes over shuffled minibatches (TensorDicts in TorchRL's keys): the loss gives its ``loss_*``
   terms, their sum is minimised, one optimiser step each with the global gradient norm clipped;
3. the learning rate follows its schedule over the run's frame budget.

With a recurrent policy (``lstm``, ``gru``: :mod:`rlplug.core.recurrent`) each env's row of the ``[envs, time]``
batch is cut into sequences of ``sequence_length`` steps (unset: the whole row), and minibatches are made of whole
sequences. Each sequence starts from the hidden state its first step had when it was collected (kept in the
batch), not from zeros: the policy then gives exactly the collection's log-probabilities before the first step
(a ratio of 1), and it sees the memory it acted with, however far back the episode began. GAE runs along each
env's row, as without recurrence.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase
from torch.distributions import Distribution
from torch.nn import functional
from torchrl.objectives import LossModule

from rlplug.core.acting import ActorView, tensor_function, value_input
from rlplug.core.recurrent import RecurrentNetwork, is_recurrent, stepped_values
from rlplug.core.training import (
    FlatParameters,
    MetricMean,
    Prepared,
    compile_in_place,
    explained_variance,
    forget_former_buffers,
    load_optimiser_state,
    make_optimizer,
    optimiser_step,
    scheduled_lr,
    set_learning_rate,
    summed,
    updates_stopped,
)
from rlplug.errors import UserError
from rlplug.networks import share_body
from rlplug.plugins.algorithms.acting import OnPolicyActing
from rlplug.plugins.algorithms.intrinsic_rewards import IntrinsicRewards, refused
from rlplug.plugins.algorithms.networks import build_network, state_dependent_actor
from rlplug.plugins.algorithms.onpolicy.config import OnPolicyConfig
from rlplug.plugins.algorithms.onpolicy.gradients import GradientsInterface
from rlplug.plugins.algorithms.onpolicy.sequences import Sequences
from rlplug.plugins.algorithms.parameters import ChangesDuringRun
from rlplug.registry import protocols


def refuse_estimators_reading_values(built: list) -> None:
    """Without a critic (vpg's ``baseline = false``) an estimator that reads its values would fail at the first
    update; refused at build, naming the key."""
    from tensordict.utils import unravel_key

    for name, spec, estimator, _ in built:
        reads = {unravel_key(key) for key in getattr(estimator, "in_keys", ())}
        if reads & {"state_value", ("next", "state_value")}:
            raise UserError(f"{spec.title} reads the critic's values, and the algorithm learns no critic here "
                            f"(as vpg with baseline = false): choose an estimator that needs none, such as "
                            f'{{use = "mc", bootstrap = false}}', path=f"algorithm.{name}")


class OnPolicy(OnPolicyActing, Sequences, GradientsInterface, ChangesDuringRun):
    """The shared update; subclasses replace :meth:`policy_loss` and may adapt after each minibatch."""

    uses_critic = True
    #: whether the algorithm can learn from the sequences of a recurrent policy (IMPALA's V-trace cannot yet)
    learns_sequences = True

    def __init__(self, config: OnPolicyConfig, *, observation_spec, action_spec, device: str, total_frames: int,
                 eval_episodes: int | None = None, eval_every_frames: int | None = None):
        self.config, self.device, self.total_frames = config, device, total_frames
        self.observation_spec, self.action_spec = observation_spec, action_spec
        self.eval_episodes, self.eval_every_frames = eval_episodes, eval_every_frames
        self.frames_per_batch = config.frames_per_batch
        self.schedule, self.minibatch_size = config.schedule(), config.minibatch_length()
        specs = {"observation_spec": observation_spec, "action_spec": action_spec, "device": device}
        self.policy: TensorDictModuleBase = build_network(config.policy, role="policy", **specs)
        self.critic = build_network(config.critic, role="value", **specs) if self.uses_critic else None
        self.recurrent = self.check_recurrence()
        asymmetric = value_input(self.critic, None) is not None  # the critic reads entries of its own
        if asymmetric and (is_recurrent(self.critic) or config.shared_body):
            raise UserError("an asymmetric critic (in_keys) reads other entries than the policy: it shares no body "
                            "with it and is not recurrent (leave shared_body unset, choose a feed-forward critic)",
                            path="algorithm.critic.in_keys")
        if self.critic is not None and config.shared_body:
            try:
                share_body(self.policy, self.critic)
            except ValueError as error:
                raise UserError(str(error), path="algorithm.shared_body") from None
        #: the policy the loss trains and checkpoints keep; :attr:`policy` acts (the same one, but with ``use_sde``
        #: the actor exploring around it with gSDE, sharing its parameters)
        self.trained_policy = policy = self.policy
        if config.use_sde:
            envs = max(1, observation_spec.shape.numel())
            self.policy = state_dependent_actor(policy, config, action_spec=action_spec,
                                                algorithm=type(self).__name__.lower(),
                                                steps_per_batch=max(1, config.frames_per_batch // envs),
                                                learn_features=False)
        #: the policy's distribution as a function of what it reads: its core's features where it is recurrent
        self.actor = ActorView.of(policy.head if isinstance(policy, RecurrentNetwork) else policy)
        self.observation_key = policy.observation_key if isinstance(policy, RecurrentNetwork) \
            else self.actor.observation_key
        #: a recurrent critic's state at the end of the last batch, where the next batch of the same envs goes on
        self.critic_carry: list[torch.Tensor] | None = None
        #: what the critic reads: the policy's observation, or an asymmetric critic's own entries
        self.critic_key = value_input(self.critic, self.observation_key)
        self.value = tensor_function(self.critic, [self.critic_key]) \
            if self.critic and not is_recurrent(self.critic) else None
        #: (estimator, the keys taken from it): the advantage estimator may give a value target too (``mc``,
        #: ``td-lambda``...), used unless a ``value_target`` estimator is set, which never changes the advantage.
        built = [(name, spec, spec.build(), keys) for name, spec, keys in (
            ("advantage", config.advantage, ("advantage", "value_target")),
            ("value_target", config.value_target, ("value_target",))) if spec is not None]
        if self.critic is None:
            refuse_estimators_reading_values(built)
        self.estimators = [(estimator, keys) for _, _, estimator, keys in built]
        modules = [self.trained_policy, *([self.critic] if self.critic else [])]
        self.parameters = list({id(p): p for m in modules for p in m.parameters()}.values())
        #: the parameters in one tensor where they fit (what the optimiser steps), else the list itself
        self.trained = FlatParameters.where_possible(self.parameters)
        self.optimiser = make_optimizer(config.optimizer, self.trained, config.lr, config.optimizer_kwargs)
        # built once the parameters sit where they will stay: a loss may keep views of them
        self.loss_module = protocols.conform(protocols.Loss, config.loss.build(
            networks=self.networks(), settings=config, observation_spec=observation_spec, action_spec=action_spec,
            device=device,
        ), config.loss.title)
        if self.recurrent and not isinstance(self.loss_module, OnPolicyLoss):
            raise UserError(f"{config.loss.title} reads single steps; a recurrent policy (lstm, gru) learns from "
                            f"sequences with the algorithm's own loss: leave algorithm.loss unset",
                            path="algorithm.loss")
        self.reports_diagnostics = protocols.has_member(self.loss_module, protocols.Loss.diagnostics)
        #: a loss that keeps a copy of the collecting policy (TorchRL's KLPENPPOLoss) refreshes it before each update
        self.refresh_targets = protocols.capability(self.loss_module, protocols.Loss.update_targets)
        self.frames = 0
        #: ``[algorithm.intrinsic]``: a bonus added to the rewards before the estimators (None: none)
        self.intrinsic = IntrinsicRewards.of(config, observation_spec=observation_spec, action_spec=action_spec,
                                             device=device, total_frames=total_frames)

    # -- 1. estimates ---------------------------------------------------------------------------------

    @torch.no_grad()
    def estimate(self, batch: TensorDictBase) -> TensorDictBase:
        """Critic values for each step and its successor (one call), then the estimators in order."""
        if self.value is not None:
            key = self.critic_key
            observations = batch.get(key)
            values = self.value(torch.cat([observations, batch.get(("next", key))]))
            batch.set("state_value", values[: len(observations)])
            batch.set(("next", "state_value"), values[len(observations):])
        elif isinstance(self.critic, RecurrentNetwork):  # rows [envs, time]: stepped along them
            envs = batch.batch_size[0]
            carry = self.critic_carry if self.critic_carry and len(self.critic_carry[0]) == envs else None
            values, next_values, self.critic_carry = stepped_values(self.critic, batch, carry)
            batch.set("state_value", values)
            batch.set(("next", "state_value"), next_values)
        for estimator, keys in self.estimators:
            written = estimator(batch.copy())
            for key in keys:
                if key in written.keys():
                    batch.set(key, written.get(key))
        needed = ["advantage"] + (["value_target"] if self.critic else [])
        missing = [k for k in needed if k not in batch.keys()]
        if missing:
            raise UserError(f"no estimator wrote {' and '.join(missing)}; choose algorithm.advantage and "
                            f"algorithm.value_target estimators that do", path="algorithm")
        return batch

    # -- 2. learning ----------------------------------------------------------------------------------

    def update(self, batch: TensorDictBase) -> dict[str, float]:
        lr = self.start_update(batch.numel())
        prepared = self.prepare(batch, self.minibatch_size)

        def step(index: int, diagnostics: bool) -> tuple[dict[str, torch.Tensor], torch.Tensor | None]:
            total, reported = self.loss(prepared.minibatch(index), diagnostics)
            return reported, optimiser_step(self.optimiser, total, self.trained, self.config.max_grad_norm)

        return self.learn(prepared.steps, step, lr, prepared.explained_variance)

    def start_update(self, frames: int) -> float:
        """Count the batch's frames, set the learning rate its schedule gives now; returns that rate."""
        self.frames += frames
        lr = scheduled_lr(self.config.lr, self.schedule, self.frames / self.total_frames)
        set_learning_rate(self.optimiser, lr)
        self.before_update(self.frames / self.total_frames)
        if self.refresh_targets:
            self.refresh_targets(1.0)
        return lr

    def prepare(self, batch: TensorDictBase, minibatch_size: int) -> Prepared:
        """The estimates for ``batch``, then the flat tensors the loss reads, under TorchRL's keys (the
        observation, ``action``, the log-probability, ``advantage``, ``value_target``, ``state_value``). Ray's
        gradient workers prepare their own share of a batch the same way. An intrinsic reward is added to the
        batch's rewards first (a copy of the batch: the collected one keeps the env's)."""
        if self.intrinsic is not None:
            batch = self.intrinsic.added(batch)
        if self.recurrent:
            return self.prepare_sequences(batch, minibatch_size)
        flat = self.estimate(batch).reshape(-1)
        actor = self.actor
        keys = [self.observation_key, actor.action_key, actor.log_prob_key, "advantage"]
        if actor.mask_key:  # the loss's distribution is the collection's: masked alike
            keys.append(actor.mask_key)
        if self.critic:
            keys += ["value_target", "state_value", *([self.critic_key] if self.critic_key not in keys else [])]
        data = {key: flat.get(key) for key in keys}
        variance = explained_variance(data["state_value"], data["value_target"]) if self.critic else None
        return Prepared(data, minibatch_size, variance)

    def loss(self, minibatch: TensorDictBase, diagnostics: bool) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The sum of the loss's ``loss_*`` terms (what is minimised), and, where ``diagnostics`` (the
        minibatches that report), every scalar it gives, detached."""
        if self.reports_diagnostics:
            self.loss_module.diagnostics = diagnostics
        out = self.loss_module(minibatch)
        total = summed([value for key, value in out.items() if key.startswith("loss_")])
        reported = {key: value.detach() for key, value in out.items() if value.numel() == 1} if diagnostics else {}
        return total, reported

    def learn(self, steps: int, step: Callable[[int, bool], tuple[dict[str, torch.Tensor], torch.Tensor | None]],
              lr: float, explained_variance: float | None) -> dict[str, float]:
        """``epochs`` passes of ``steps`` optimiser steps; ``step(index, diagnostics)`` takes the step on the
        epoch's minibatch ``index`` and returns what it reports and its gradient norm (here, :meth:`update`'s;
        on Ray, gradients computed by workers). The last epoch reports. A stop (a signal) ends it between steps."""
        metrics = MetricMean()
        # a generator, not itertools.product, which would first make a tuple of every epoch
        pairs = ((epoch, index) for epoch in range(self.config.epochs) for index in range(steps))
        for epoch, index in pairs:
            if updates_stopped():
                break
            reported, grad_norm = step(index, epoch == self.config.epochs - 1)
            if reported:
                metrics.add(grad_norm=grad_norm, **reported)
        result = {**metrics.means(), "lr": lr, **(self.intrinsic.report if self.intrinsic else {}),
                  **self.extra_metrics()}
        if explained_variance is not None:
            result["explained_variance"] = explained_variance
        return result

    def networks(self) -> dict[str, torch.nn.Module]:
        """The trained networks by name, for loggers that record weights."""
        return {"policy": self.trained_policy, **({"critic": self.critic} if self.critic is not None else {})}

    def batched_update(self, algorithms: list[OnPolicy], seeds: list[int]):
        """The seeds' copies of this algorithm learning together (``--seeds --batched``)."""
        from rlplug.plugins.algorithms.onpolicy.batched import OnPolicyTogether

        if self.intrinsic is not None:
            raise refused("seeds trained together (--batched)")

        return OnPolicyTogether(algorithms, seeds)

    def compile_update(self) -> None:
        """``run.compile``: the loss, where each minibatch's time goes (the optimiser steps one flat tensor)."""
        compile_in_place(self.loss_module, self.device)

    def data_parallel(self, copies: int):
        """Its update over ``copies`` copies (Ray's gradient workers, learners)."""
        from rlplug.plugins.algorithms.onpolicy.data_parallel import EpochsDataParallel

        if self.intrinsic is not None:
            raise refused("Ray's gradient workers and learners")

        return EpochsDataParallel(self, copies)

    # -- what algorithms define -----------------------------------------------------------------------

    def before_update(self, progress: float) -> None:
        """Called with the run's progress (0..1) before each update: for schedules of the algorithm's own."""

    def extra_metrics(self) -> dict[str, float]:
        return {}

    # -- checkpoints ----------------------------------------------------------------------------------

    def state_dict(self) -> dict:
        """The networks, the optimiser, the frames seen, and the loss's own state (PPO-KL's beta)."""
        state = {"policy": self.trained_policy.state_dict(), "optimiser": self.optimiser.state_dict(),
                 "frames": self.frames, "loss": self.loss_module.state_dict()}
        if self.critic:
            state["critic"] = self.critic.state_dict()
        if self.critic_carry is not None:
            state["critic_carry"] = self.critic_carry
        if self.intrinsic is not None:
            state["intrinsic"] = self.intrinsic.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        self.trained_policy.load_state_dict(state["policy"])
        if self.critic:
            self.critic.load_state_dict(state["critic"])
        load_optimiser_state(self.optimiser, state["optimiser"])
        self.loss_module.load_state_dict(state["loss"])
        self.frames = operator.index(state["frames"])  # a count: TypeError for anything else
        self.critic_carry = state.get("critic_carry")
        if self.intrinsic is not None:
            self.intrinsic.load_state_dict(state["intrinsic"])


# -- rlplug's on-policy losses: what they share --------------------------------------------------------------


#: the buffers every rlplug on-policy loss held when one class computed every objective: the checkpoints of runs
#: from then hold both, and each loss now has only its own
FORMER_BUFFERS = ("clip_epsilon", "beta")


def approx_kl(ratio: torch.Tensor, log_ratio: torch.Tensor) -> torch.Tensor:
    """``mean((r - 1) - log r)``: an unbiased, non-negative estimate of KL(old || new) from the ratios."""
    return ((ratio - 1) - log_ratio).mean()


def log_prob_and_entropy(view: ActorView, observation: torch.Tensor, action: torch.Tensor,
                         with_entropy: bool = False, mask: torch.Tensor | None = None
                         ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The log-probability of the taken ``action`` under the policy now (differentiable), and its entropy when
    asked for: what the losses and IMPALA's V-trace read. A categorical head's come from its logits directly;
    ``mask``: the allowed actions where the head is masked (the collection's, so the ratio compares like with
    like)."""
    if view.categorical:
        log_probs = view.logits(observation, mask).log_softmax(-1)
        index = action.argmax(-1, keepdim=True) if view.one_hot else action.unsqueeze(-1)
        log_prob = log_probs.gather(-1, index).squeeze(-1)
        return log_prob, (-(log_probs.exp() * log_probs).sum(-1) if with_entropy else None)
    if view.tanh_normal is not None:  # TanhNormal's numbers without building it (its entropy: one sample's)
        loc, scale = view.params_module(observation)
        log_prob = view.tanh_normal.log_prob(loc, scale, action)
        return log_prob, (-view.tanh_normal.rsample_and_log_prob(loc, scale)[1] if with_entropy else None)
    dist = view.distribution(observation, mask)
    return dist.log_prob(action), (entropy(dist) if with_entropy else None)


def entropy(dist: Distribution) -> torch.Tensor:
    """The exact entropy where the distribution has one, else a one-sample estimate (tanh-squashed Gaussians)."""
    try:
        return dist.entropy()
    except NotImplementedError:
        return -dist.log_prob(dist.rsample())


def asked_for(entropy: torch.Tensor | None) -> torch.Tensor:
    """The entropy :func:`log_prob_and_entropy` computed when asked (``with_entropy``): never None where read."""
    if entropy is None:
        raise RuntimeError("the policy's entropy was read without being asked for (with_entropy = False)")
    return entropy


class OnPolicyLoss(LossModule):
    """What rlplug's on-policy losses share: a TorchRL ``LossModule`` (a TensorDict in, ``loss_*`` terms and
    diagnostics out, TorchRL's key names) that calls the policy and the critic on the minibatch's tensors
    directly (:class:`ActorView`), where TorchRL's losses build a distribution from a TensorDict per call.

    Each subclass gives its policy objective (:meth:`policy_objective`, on advantages ``A``, normalised per
    minibatch when asked, and ``r = pi(a|s) / pi_old(a|s)``); the terms beside it are the same for all:
    ``loss_critic`` is ``value_coef`` times the squared error of the critic against ``value_target`` (or, with
    ``value_clip``, the larger of it and the clipped prediction's, PPO-style), ``loss_entropy`` is
    ``-entropy_coef`` times the policy's entropy. The update minimises their sum.
    """

    #: several seeds at once under ``torch.vmap``: no state of its own changes per minibatch
    batchable = True
    #: no coefficient follows each minibatch (Ray's gradient workers may compute it apart)
    adapts_per_minibatch = False

    @dataclass
    class _AcceptedKeys:
        """The TensorDict keys read (TorchRL's PPO names; ``set_keys`` changes them)."""

        advantage: str = "advantage"
        value_target: str = "value_target"
        value: str = "state_value"
        sample_log_prob: str = "action_log_prob"
        action: str = "action"

    def __init__(self, actor, critic=None, *, entropy_coef: float = 0.0, value_coef: float = 0.5,
                 value_clip: float | None = None, normalize_advantage: bool = True):
        super().__init__()
        self.actor_network, self.critic_network = actor, critic
        #: a recurrent policy's and critic's cores run over each minibatch's sequences; their heads read the features
        self.cores = [network for network in (actor, critic) if isinstance(network, RecurrentNetwork)]
        self.view = ActorView.of(actor.head if isinstance(actor, RecurrentNetwork) else actor)
        self.value_key = critic.features_key if isinstance(critic, RecurrentNetwork) \
            else value_input(critic, self.view.observation_key)
        head = critic.head if isinstance(critic, RecurrentNetwork) else critic
        self.value = tensor_function(head, [self.value_key]) if critic is not None else None
        self.entropy_coef, self.value_coef = entropy_coef, value_coef
        self.value_clip, self.normalize_advantage = value_clip, normalize_advantage
        #: whether to compute the diagnostics (entropy, KL, clip fraction): the update turns them off on the
        #: minibatches it does not report
        self.diagnostics = True
        self.set_keys(sample_log_prob=self.view.log_prob_key, action=self.view.action_key)
        forget_former_buffers(self, FORMER_BUFFERS)

    @classmethod
    def from_settings(cls, networks: dict, settings: OnPolicyConfig, **options: Any) -> OnPolicyLoss:
        """The loss with the algorithm's policy and critic, its terms' weights the algorithm's keys; ``options``
        are the subclass's own (PPO's clip range)."""
        return cls(networks["policy"], networks.get("critic"), entropy_coef=settings.entropy_coef,
                   value_coef=settings.value_coef, value_clip=settings.value_clip,
                   normalize_advantage=settings.normalize_advantages, **options)

    def _forward_value_estimator_keys(self, **kwargs) -> None:
        pass  # advantages and value targets come from rlplug's estimators, before the loss

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        if self.cores:  # [sequences, steps]: the cores' features along them, then every step alike
            for network in self.cores:
                tensordict.set(network.features_key, network.sequence_outputs(tensordict))
            tensordict = tensordict.reshape(-1)
        keys = self.tensor_keys
        observation = tensordict.get(self.view.observation_key)
        advantage = tensordict.get(keys.advantage).reshape(-1)
        if self.normalize_advantage and advantage.numel() > 1:
            advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-8)
        mask = tensordict.get(self.view.mask_key) if self.view.mask_key else None
        log_prob, entropy = log_prob_and_entropy(self.view, observation, tensordict.get(keys.action),
                                                 with_entropy=self.entropy_coef > 0 or self.diagnostics, mask=mask)
        log_ratio = log_prob - tensordict.get(keys.sample_log_prob)
        out: dict[str, torch.Tensor] = {"loss_objective": self.policy_objective(log_prob, log_ratio, advantage)}
        if self.value is not None:
            out["loss_critic"] = self.value_coef * self.value_error(tensordict)
        if self.entropy_coef:
            out["loss_entropy"] = -self.entropy_coef * asked_for(entropy).mean()
        if self.diagnostics:
            with torch.no_grad():
                ratio = log_ratio.exp()
                out.update(entropy=asked_for(entropy).mean(), kl_approx=approx_kl(ratio, log_ratio),
                           **self.own_diagnostics(ratio))
        return TensorDict(out, batch_size=[])

    def policy_objective(self, log_prob: torch.Tensor, log_ratio: torch.Tensor,
                         advantage: torch.Tensor) -> torch.Tensor:
        """What the policy's gradient descends, from the minibatch's log-probabilities and advantages."""
        raise NotImplementedError

    def own_diagnostics(self, ratio: torch.Tensor) -> dict[str, torch.Tensor]:
        """The subclass's own reported scalars (PPO's clip fraction), from the minibatch's ratios."""
        return {}

    def value_error(self, tensordict: TensorDictBase) -> torch.Tensor:
        if self.value is None:
            raise RuntimeError("value_error needs a critic, and this loss was built without one")
        keys = self.tensor_keys
        value = self.value(tensordict.get(self.value_key))
        target = tensordict.get(keys.value_target)
        if self.value_clip is None:
            return functional.mse_loss(value, target)  # one node where (value - target)^2 mean are three
        old = tensordict.get(keys.value)
        clipped = old + (value - old).clamp(-self.value_clip, self.value_clip)
        return torch.max((value - target).pow(2), (clipped - target).pow(2)).mean()
