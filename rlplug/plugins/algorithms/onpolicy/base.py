"""What every collect-then-learn policy-gradient algorithm shares, written once.

An algorithm here is a config dataclass (:mod:`rlplug.plugins.algorithms.onpolicy.config`: its fields are its
recipe table) and a subclass of :class:`OnPolicy`; what differs between PPO, A2C, VPG and the surrogate is their
loss (``config.loss``: a TorchRL ``LossModule``, TorchRL's ``ClipPPOLoss`` and kin on request, rlplug's own by
default: a subclass of :class:`OnPolicyLoss`, below, in the algorithm's module, ``ppo.py`` or ``pg.py``, which
gives its policy objective). One update, top to bottom:

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

import math
import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase

from rlplug.core.acting import ActorView, tensor_function
from rlplug.core.recurrent import RecurrentNetwork, is_recurrent, stepped_values
from rlplug.core.training import (
    FlatParameters,
    MetricMean,
    clip_and_step,
    compile_in_place,
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
from rlplug.plugins.algorithms import parameters
from rlplug.plugins.algorithms.acting import OnPolicyActing
from rlplug.plugins.algorithms.networks import build_network
from rlplug.plugins.algorithms.onpolicy.config import OnPolicyConfig
from rlplug.plugins.algorithms.onpolicy.loss import (  # noqa: F401 (imported from here by ppo.py, pg.py, plugins)
    FORMER_BUFFERS,
    OnPolicyLoss,
    approx_kl,
    asked_for,
    entropy,
    log_prob_and_entropy,
)
from rlplug.registry import protocols


class OnPolicy(OnPolicyActing):
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
        #: the policy's distribution as a function of what it reads: its core's features where it is recurrent
        policy = self.policy
        self.actor = ActorView.of(policy.head if isinstance(policy, RecurrentNetwork) else policy)
        self.observation_key = policy.observation_key if isinstance(policy, RecurrentNetwork) \
            else self.actor.observation_key
        #: a recurrent critic's state at the end of the last batch, where the next batch of the same envs goes on
        self.critic_carry: list[torch.Tensor] | None = None
        if self.critic is not None and config.shared_body:
            try:
                share_body(self.policy, self.critic)
            except ValueError as error:
                raise UserError(str(error), path="algorithm.shared_body") from None
        self.value = tensor_function(self.critic, [self.observation_key]) \
            if self.critic and not is_recurrent(self.critic) else None
        #: (estimator, the keys taken from it): the advantage estimator may give a value target too (``mc``,
        #: ``td-lambda``...), used unless a ``value_target`` estimator is set, which never changes the advantage.
        self.estimators = [(e.build(), keys) for e, keys in ((config.advantage, ("advantage", "value_target")),
                                                             (config.value_target, ("value_target",))) if e is not None]
        modules = [self.policy, *([self.critic] if self.critic else [])]
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

    def check_recurrence(self) -> bool:
        """Whether the policy is recurrent; what recurrent networks need of the recipe, as one-line errors."""
        recurrent = is_recurrent(self.policy)
        if self.critic is not None and is_recurrent(self.critic) and not recurrent:
            raise UserError("a recurrent critic needs a recurrent policy (episodes are told apart by the policy's "
                            "collection): set use = 'lstm' or 'gru' here too", path="algorithm.policy")
        if recurrent and not self.learns_sequences:
            raise UserError(f"{type(self).__name__.lower()} does not learn from the sequences of recurrent networks "
                            f"(lstm, gru) yet; use ppo, a2c, vpg, surrogate or ppo-kl", path="algorithm.policy")
        if recurrent and self.config.shared_body:
            raise UserError("recurrent networks (lstm, gru) do not share a body; set shared_body = false",
                            path="algorithm.shared_body")
        return recurrent

    # -- 1. estimates ---------------------------------------------------------------------------------

    @torch.no_grad()
    def estimate(self, batch: TensorDictBase) -> TensorDictBase:
        """Critic values for each step and its successor (one call), then the estimators in order."""
        if self.value is not None:
            key = self.observation_key
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
        gradient workers prepare their own share of a batch the same way."""
        if self.recurrent:
            return self.prepare_sequences(batch, minibatch_size)
        flat = self.estimate(batch).reshape(-1)
        actor = self.actor
        keys = [self.observation_key, actor.action_key, actor.log_prob_key, "advantage"]
        if self.critic:
            keys += ["value_target", "state_value"]
        data = {key: flat.get(key) for key in keys}
        variance = explained_variance(data["state_value"], data["value_target"]) if self.critic else None
        return Prepared(data, minibatch_size, variance)

    def prepare_sequences(self, batch: TensorDictBase, minibatch_size: int) -> Prepared:
        """:meth:`prepare` for a recurrent policy: the estimates along each env's row, then the rows cut into
        sequences of ``sequence_length`` steps, each with the states its first step started from; a minibatch
        holds ``minibatch_size // sequence_length`` whole sequences (at least one)."""
        rows = batch.reshape(-1, batch.batch_size[-1]) if batch.ndim != 2 else batch  # one env: one row
        rows = self.estimate(rows)
        steps = rows.batch_size[1]
        length = self.config.sequence_length or steps
        if steps % length:
            raise UserError(f"must divide the steps each env collects per batch (frames_per_batch / num_envs = "
                            f"{steps}), got {length}", path="algorithm.sequence_length")
        actor = self.actor
        keys = [self.observation_key, "is_init", *getattr(self.policy, "state_keys", []), actor.action_key,
                actor.log_prob_key, "advantage"]
        if self.critic is not None:
            keys += ["value_target", "state_value", *getattr(self.critic, "state_keys", [])]
        data = {}
        for key in keys:
            value = rows.get(key)
            data[key] = value.reshape(-1, length, *value.shape[2:])
        variance = explained_variance(data["state_value"].reshape(-1), data["value_target"].reshape(-1)) \
            if self.critic else None
        return Prepared(data, max(1, minibatch_size // length), variance, sequence_length=length)

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
        result = {**metrics.means(), "lr": lr, **self.extra_metrics()}
        if explained_variance is not None:
            result["explained_variance"] = explained_variance
        return result

    def networks(self) -> dict[str, torch.nn.Module]:
        """The trained networks by name, for loggers that record weights."""
        return {"policy": self.policy, **({"critic": self.critic} if self.critic is not None else {})}

    # -- distributed training (pytorchrl's Algorithm protocol; the gradient workers of
    #    rlplug.plugins.runners.ray.collection) ----------------------------------------------------------------

    def get_weights(self) -> TensorDictBase:
        """Every trained parameter (policy and critic, a shared body once) keyed by position: copies built
        from one recipe list their parameters in the same order."""
        return TensorDict({str(i): p.detach() for i, p in enumerate(self.parameters)}, []).consolidate()

    @torch.no_grad()
    def set_weights(self, weights: TensorDictBase) -> None:
        for i, p in enumerate(self.parameters):
            p.copy_(weights.get(str(i)))

    def compute_gradients(self, batch: TensorDictBase,
                          grads_to_cpu: bool = True) -> tuple[TensorDictBase, dict[str, torch.Tensor]]:
        """The gradient of the loss on one minibatch (as :meth:`prepare` makes them) for every parameter, keyed as
        :meth:`get_weights`, on the CPU where asked (to travel between processes), and every scalar the loss
        reports, with the total under ``loss``. Nothing steps: the gradients stay in place too, for
        ``apply_gradients()``."""
        total, reported = self.loss(batch, diagnostics=True)
        self.zero_grad()
        total.backward()
        gradients = TensorDict({str(i): p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p)
                                for i, p in enumerate(self.parameters)}, [])
        reported = {"loss": total.detach(), **reported}
        if grads_to_cpu:
            return gradients.to("cpu"), {key: value.cpu() for key, value in reported.items()}
        return gradients, reported

    def apply_gradients(self, gradients: TensorDictBase | None = None) -> dict[str, torch.Tensor]:
        """The optimiser step with ``gradients`` (:meth:`compute_gradients`'s, from anywhere; None: those the last
        :meth:`compute_gradients` left in place), the global norm clipped as in :meth:`update`; that norm before
        clipping as ``grad_norm`` (when clipping)."""
        if gradients is not None:
            self.zero_grad()
            with torch.no_grad():
                for i, p in enumerate(self.parameters):
                    p.grad.copy_(gradients.get(str(i)))
        norm = clip_and_step(self.optimiser, self.trained, self.config.max_grad_norm)
        return {} if norm is None else {"grad_norm": norm}

    def zero_grad(self) -> None:
        if isinstance(self.trained, FlatParameters):
            self.trained.zero_grad()
        else:
            for p in self.parameters:
                p.grad = torch.zeros_like(p)

    def batched_update(self, algorithms: list[OnPolicy], seeds: list[int]):
        """The seeds' copies of this algorithm learning together (``--seeds --batched``)."""
        from rlplug.plugins.algorithms.onpolicy.batched import OnPolicyTogether

        return OnPolicyTogether(algorithms, seeds)

    def compile_update(self) -> None:
        """``run.compile``: the loss, where each minibatch's time goes (the optimiser steps one flat tensor)."""
        compile_in_place(self.loss_module, self.device)

    # -- what algorithms define -----------------------------------------------------------------------

    def before_update(self, progress: float) -> None:
        """Called with the run's progress (0..1) before each update: for schedules of the algorithm's own."""

    def extra_metrics(self) -> dict[str, float]:
        return {}

    def update_algorithm_parameter(self, name: str, value: Any) -> None:
        """pytorchrl's: change ``name`` of this algorithm's table (``lr``...) from the next update on
        (:mod:`rlplug.plugins.algorithms.parameters`: what may change, and what it reaches)."""
        parameters.update(self, name, value)

    # -- checkpoints ----------------------------------------------------------------------------------

    def state_dict(self) -> dict:
        """The networks, the optimiser, the frames seen, and the loss's own state (PPO-KL's beta)."""
        state = {"policy": self.policy.state_dict(), "optimiser": self.optimiser.state_dict(), "frames": self.frames,
                 "loss": self.loss_module.state_dict()}
        if self.critic:
            state["critic"] = self.critic.state_dict()
        if self.critic_carry is not None:
            state["critic_carry"] = self.critic_carry
        return state

    def load_state_dict(self, state: dict) -> None:
        self.policy.load_state_dict(state["policy"])
        if self.critic:
            self.critic.load_state_dict(state["critic"])
        load_optimiser_state(self.optimiser, state["optimiser"])
        self.loss_module.load_state_dict(state["loss"])
        self.frames = operator.index(state["frames"])  # a count: TypeError for anything else
        self.critic_carry = state.get("critic_carry")


@dataclass
class Prepared:
    """A batch made ready for the epochs: the flat tensors the loss reads, split into a fresh random partition
    of minibatches each epoch (the last may be smaller; one minibatch as large as the batch is the batch)."""

    data: dict[str, torch.Tensor]
    minibatch_size: int
    #: of the critic's values at collection time against the value targets (None without a critic)
    explained_variance: float | None
    order: list[torch.Tensor] = field(default_factory=list, repr=False)
    #: the steps of each sequence where the data are sequences (``[sequences, steps, ...]``: a recurrent policy's)
    sequence_length: int | None = None

    def rows(self, size: int) -> list[int]:
        """The TensorDict batch size of ``size`` rows: a sequence's steps are a second batch dim."""
        return [size] if self.sequence_length is None else [size, self.sequence_length]

    @property
    def length(self) -> int:
        return len(self.data["advantage"])

    @property
    def steps(self) -> int:
        """Minibatches per epoch."""
        return math.ceil(self.length / self.minibatch_size)

    def minibatch(self, index: int) -> TensorDictBase:
        """The epoch's minibatch ``index`` as a TensorDict; index 0 starts an epoch with a new partition."""
        if self.minibatch_size >= self.length:
            return TensorDict(self.data, batch_size=self.rows(self.length))
        if index == 0:
            device = self.data["advantage"].device
            self.order = list(torch.randperm(self.length, device=device).split(self.minibatch_size))
        indices = self.order[index]
        return TensorDict({key: value[indices] for key, value in self.data.items()}, batch_size=self.rows(len(indices)))


@torch.no_grad()
def explained_variance(prediction: torch.Tensor, target: torch.Tensor) -> float:
    """1 - Var(target - prediction) / Var(target): 1 is a perfect critic, 0 no better than a constant."""
    variance = target.var()
    return float("nan") if variance == 0 else (1 - (target - prediction).var() / variance).item()
