"""On-policy algorithm configs: each dataclass's fields are an algorithm's recipe table, its docstring the summary
``rlplug list`` shows. Kept free of torch so that listing and validating recipes stay quick; the algorithms
themselves live beside it (``base``: the shared update and loss terms; ``ppo``, ``pg``: each algorithm with its
rlplug loss; ``impala``).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, TypeAlias

from rlplug.errors import RlplugWarning, UserError
from rlplug.plugins.algorithms.common import OPTIMIZERS, SCHEDULES, Count, NonNegative, Positive, Rate, loss_fits, named
from rlplug.plugins.algorithms.parameters import ON_POLICY, Entry
from rlplug.plugins.limits import Limit
from rlplug.registry.components import Estimator, Loss, Network
from rlplug.registry.schema import Check, Range

#: each algorithm's ``loss`` key: a loss that serves it
A2C_LOSS: TypeAlias = Annotated[Loss, Check(loss_fits("a2c"))]
PPO_LOSS: TypeAlias = Annotated[Loss, Check(loss_fits("ppo"))]
PPO_KL_LOSS: TypeAlias = Annotated[Loss, Check(loss_fits("ppo-kl"))]
VPG_LOSS: TypeAlias = Annotated[Loss, Check(loss_fits("vpg"))]
SURROGATE_LOSS: TypeAlias = Annotated[Loss, Check(loss_fits("surrogate"))]
IMPALA_LOSS: TypeAlias = Annotated[Loss, Check(loss_fits("impala"))]
#: passes over each batch: an update of more holds the run for hours on one batch (PPO takes 3 to 30)
Epochs: TypeAlias = Annotated[int, Range(ge=1), Limit(10_000, "each update would make that many passes over one "
                                                       "batch, hours of gradient steps on the same frames (PPO "
                                                       "takes 3 to 30)")]
#: the entropy bonus's weight: far above the return's scale it is all the loss optimises, and it overflows
EntropyCoef: TypeAlias = Annotated[float, Range(ge=0.0), Limit(100, "the entropy bonus would outweigh any return "
                                                                    "and overflow the loss (typical: 0 to 0.1)")]


@dataclass(frozen=True)
class OnPolicyConfig:
    """Options every on-policy algorithm takes; subclasses change defaults and add their own."""

    #: what ``rlplug set`` may change during a run, and what each name reaches (not a recipe key)
    live_parameters: ClassVar[dict[str, Entry]] = ON_POLICY

    #: the policy network
    policy: Network = named(Network, "mlp")
    #: the value network (writes state_value)
    critic: Network = named(Network, "mlp")
    #: what is minimised: rlplug's own loss for the algorithm, or TorchRL's (ClipPPOLoss, KLPENPPOLoss,
    #: A2CLoss, ReinforceLoss), built with these networks; its unset keys follow this table's settings
    loss: A2C_LOSS = named(Loss, "policy-gradient-loss")
    #: the critic computes its value from the policy's hidden layers (one body, two heads; the critic
    #: network's own hidden layers must match and are dropped); value_coef weighs the two losses on it
    shared_body: bool = False
    #: the estimator that writes `advantage` (and a value target, if it makes one)
    advantage: Estimator = named(Estimator, "gae")
    # Optional here because vpg and impala leave it unset; the others redeclare it as an estimator (no unset)
    #: an estimator for `value_target`, run after the advantage one (never changes the advantage);
    #: unset: the advantage estimator's value target is used
    value_target: Estimator | None = named(Estimator, "from_advantage")
    #: frames collected (over all envs) for each update
    frames_per_batch: Count = 2048
    #: passes over each batch per update
    epochs: Epochs = 10
    #: frames per minibatch; ``num_minibatches``, when given, decides instead
    minibatch_size: Count = 64
    #: split each batch into this many minibatches (overrides minibatch_size)
    num_minibatches: Count | None = None
    #: the torch optimiser
    optimizer: OPTIMIZERS = "adam"
    #: more keyword arguments for the optimiser (betas, eps, weight_decay, ...)
    optimizer_kwargs: dict[str, Any] | None = None
    #: learning rate
    lr: Rate = 3e-4
    #: how the learning rate goes over total_frames: constant, linear to 0, or cosine to 0
    lr_schedule: SCHEDULES = "constant"
    #: shorthand for ``lr_schedule = "linear"`` (rl-baselines3-zoo's ``lin_`` learning rates)
    anneal_lr: bool = False
    #: clip the global gradient norm to this (unset: no clipping)
    max_grad_norm: Positive | None = 0.5
    #: weight of the entropy bonus in the loss
    entropy_coef: EntropyCoef = 0.0
    #: weight of the critic's value loss in the loss
    value_coef: NonNegative = 0.5
    #: clip the new value prediction to within this distance of the value at collection time
    value_clip: Positive | None = None
    #: standardise advantages (per minibatch, or per batch when it is one minibatch)
    normalize_advantages: bool = True
    #: recurrent policies (lstm, gru) only: steps per sequence each env's batch row is cut into (it must divide
    #: frames_per_batch / num_envs; unset: the whole row); minibatches hold minibatch_size / sequence_length
    #: whole sequences
    sequence_length: Count | None = None

    def __post_init__(self) -> None:
        """What the table alone tells of sequences, checked as the algorithm is built (before the run directory
        is made), not at the first update: a sequence is cut from each env's share of the batch."""
        length = self.sequence_length
        if length is not None and self.frames_per_batch % length:
            raise UserError(f"must divide frames_per_batch ({self.frames_per_batch}; each env's share of it, "
                            f"frames_per_batch / num_envs, is cut into sequences of this many steps), got {length}",
                            path="algorithm.sequence_length")

    def schedule(self) -> str:
        if self.anneal_lr and self.lr_schedule not in ("constant", "linear"):
            raise UserError(f"anneal_lr = true means lr_schedule = 'linear', but lr_schedule is "
                            f"'{self.lr_schedule}'; set only one", path="anneal_lr")
        return "linear" if self.anneal_lr else self.lr_schedule

    def minibatch_length(self) -> int:
        """Frames per minibatch. More minibatches than frames is refused; a minibatch larger than the batch
        (frames_per_batch lowered alone, say) is the whole batch, with a warning, as it may be meant."""
        if self.num_minibatches is not None:
            if self.num_minibatches > self.frames_per_batch:
                raise UserError(f"{self.num_minibatches} minibatches cannot be cut from a batch of "
                                f"frames_per_batch = {self.frames_per_batch} frames; use at most that many",
                                path="algorithm.num_minibatches")
            return math.ceil(self.frames_per_batch / self.num_minibatches)
        if self.minibatch_size > self.frames_per_batch:
            warnings.warn(RlplugWarning(f"algorithm.minibatch_size = {self.minibatch_size} is larger than the batch "
                                        f"(frames_per_batch = {self.frames_per_batch}): each minibatch is the whole "
                                        f"batch"), stacklevel=2)
        return self.minibatch_size


@dataclass(frozen=True)
class PPOConfig(OnPolicyConfig):
    """Proximal policy optimisation with the clipped surrogate objective."""

    loss: PPO_LOSS = named(Loss, "ppo-loss")
    value_target: Estimator = named(Estimator, "from_advantage")
    #: the clip range of the probability ratio
    clip_epsilon: Positive = 0.2
    #: shrink the clip range linearly to 0 over the run (rl-baselines3-zoo's ``lin_`` clip ranges)
    anneal_clip: bool = False


@dataclass(frozen=True)
class PPOKLConfig(OnPolicyConfig):
    """PPO with an adaptive KL penalty instead of clipping (beta x2 above 1.5x the target, /2 below target/1.5)."""

    loss: PPO_KL_LOSS = named(Loss, "ppo-kl-loss")
    value_target: Estimator = named(Estimator, "from_advantage")
    #: the KL divergence (old policy to new) each minibatch should stay near
    kl_target: Positive = 0.01
    #: the penalty's starting coefficient (beta)
    kl_penalty: Positive = 1.0


@dataclass(frozen=True)
class VPGConfig(OnPolicyConfig):
    """REINFORCE: the score-function policy gradient, with a learned baseline unless baseline = false."""

    #: learn a critic and subtract its value from the return (false: plain REINFORCE)
    baseline: bool = True
    loss: VPG_LOSS = named(Loss, "policy-gradient-loss")
    advantage: Estimator = named(Estimator, "mc")
    value_target: Estimator | None = None
    epochs: Epochs = 1
    num_minibatches: Count | None = 1
    lr: Rate = 1e-3


@dataclass(frozen=True)
class A2CConfig(OnPolicyConfig):
    """Advantage actor-critic: one RMSprop policy-gradient step per short rollout (SB3's A2C defaults)."""

    frames_per_batch: Count = 40
    epochs: Epochs = 1
    num_minibatches: Count | None = 1
    optimizer: OPTIMIZERS = "rmsprop"
    lr: Rate = 7e-4
    normalize_advantages: bool = False
    value_target: Estimator = named(Estimator, "from_advantage")


@dataclass(frozen=True)
class SurrogateConfig(OnPolicyConfig):
    """The unclipped importance-ratio surrogate objective (PPO without the clip), over several epochs."""

    loss: SURROGATE_LOSS = named(Loss, "surrogate-loss")
    value_target: Estimator = named(Estimator, "from_advantage")


@dataclass(frozen=True)
class ImpalaConfig(OnPolicyConfig):
    """IMPALA (Espeholt et al. 2018): a learner fed by asynchronous actors, V-trace correcting for their lag.

    Under ``[runner] use = "ray"`` each worker collects ``frames_per_batch`` frames with the weights it last
    received and the learner takes one update per rollout, first come, first served; under the local runner
    it is an on-policy actor-critic whose V-trace weights are all 1. The advantage estimator must be
    ``vtrace`` (or another that reads ``target_log_prob``), which also gives the value target.
    """

    #: V-trace: reads the behaviour log-prob the worker recorded and the learner's, clips their ratio
    advantage: Estimator = named(Estimator, "vtrace")
    #: unset: the value target is V-trace's v_s
    value_target: Estimator | None = None
    loss: IMPALA_LOSS = named(Loss, "policy-gradient-loss")
    frames_per_batch: Count = 256
    #: passes over each rollout (the paper: 1)
    epochs: Epochs = 1
    num_minibatches: Count | None = 1
    optimizer: OPTIMIZERS = "rmsprop"
    lr: Rate = 6e-4
    max_grad_norm: Positive | None = 40.0
    entropy_coef: EntropyCoef = 0.01
    value_coef: NonNegative = 0.5
    normalize_advantages: bool = False
