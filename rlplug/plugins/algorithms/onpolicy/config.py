"""What every on-policy algorithm's config is built from: :class:`OnPolicyConfig` (networks, estimators, batches and
epochs, optimisation, the loss's weights), with the option types the algorithms share. Kept free of torch so that
listing and validating recipes stay quick. Each algorithm's own config (its fields are its recipe table, its
docstring the summary ``rlplug list`` shows) is in its folder (``rlplug/plugins/algorithms/<name>/__init__.py``);
the shared update and loss terms are :mod:`rlplug.plugins.algorithms.onpolicy.base`.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, TypeAlias

from rlplug.errors import RlplugWarning, UserError
from rlplug.plugins.algorithms.common import (
    OPTIMIZERS,
    SCHEDULES,
    Count,
    NonNegative,
    Positive,
    Rate,
    SampleFreq,
    named,
)
from rlplug.plugins.algorithms.intrinsic import intrinsic_problems
from rlplug.plugins.algorithms.parameters import ON_POLICY, Entry
from rlplug.plugins.limits import Limit
from rlplug.registry.components import Estimator, Intrinsic, Loss, Network
from rlplug.registry.schema import Range

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
    # each algorithm redeclares it with its own check, Annotated[Loss, Check(loss_fits(name))]: a loss serving it
    #: what is minimised: rlplug's own loss for the algorithm, or TorchRL's (ClipPPOLoss, KLPENPPOLoss,
    #: A2CLoss, ReinforceLoss), built with these networks; its unset keys follow this table's settings
    loss: Loss = named(Loss, "policy-gradient-loss")
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
    #: generalised state-dependent exploration (gSDE) for a Gaussian policy: collect with mean + z(s) @ theta, z(s)
    #: the policy's last hidden features and theta ~ N(0, sigma^2) a learned-scale matrix kept for several steps
    #: (the policy table's log_std_init is log sigma's initial value)
    use_sde: bool = False
    #: gSDE: env steps between new exploration matrices; -1: one at the start of each batch only
    sde_sample_freq: SampleFreq = -1
    #: an intrinsic reward (exploration bonus: rnd, re3) added to the env's reward before the estimators, with its
    #: coef, schedule and decay (unset: none)
    intrinsic: Intrinsic | None = None
    #: learn from the intrinsic reward alone (rllte's pretraining); episode returns and evaluation stay the env's
    pretraining: bool = False

    def __post_init__(self) -> None:
        """What the table alone tells (the intrinsic reward's keys; sequences), checked as the algorithm is built
        (before the run directory is made), not at the first update: a sequence is cut from each env's share of
        the batch."""
        intrinsic_problems(self.intrinsic, self.pretraining)
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
