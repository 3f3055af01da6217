"""What every off-policy algorithm's config is built from: :class:`OffPolicyConfig` (replay, update cadence,
optimisation, reward shaping), :class:`ActorCriticConfig`, and the mixins (:class:`PolyakTargets`,
:class:`DelayedActorConfig`, :class:`EntropyConfig`, :class:`SequencesConfig`) that give each algorithm only the
keys it reads; with the option types they share. Torch-free, like :mod:`rlplug.plugins.algorithms.onpolicy.config`.
Each algorithm's own config (its fields are its recipe table, its docstring the summary ``rlplug list`` shows) is in
its folder (``rlplug/plugins/algorithms/<name>/__init__.py``), on these; the shared update is
:mod:`rlplug.plugins.algorithms.offpolicy.base`. :class:`DQNConfig` is here too: the kit hands it out as the base
of value-based algorithms (C51's), and the shared update reads its ``tau`` (``dqn/`` registers it).

Every option of skrl's ``DDPG_CFG`` is a key of the same meaning, under rlplug's names where rlplug
already has one (the on-policy algorithms' ``lr``, ``lr_schedule``, ``max_grad_norm``); the mapping, option
by option, is in ``docs/from-skrl.md``.

rlplug adds ``steps_per_update`` (env steps per update: ``frames_per_batch = num_envs x steps_per_update``),
``n_steps`` (n-step returns: :mod:`rlplug.plugins.algorithms.offpolicy.n_step`),
``optimizer`` and ``optimizer_kwargs`` (as the on-policy algorithms have them), and for DDPG, TD3 and SAC with
recurrent networks (``lstm``, ``gru``: :mod:`rlplug.core.recurrent`) ``sequence_length`` and ``burn_in``: each
gradient step samples ``batch_size / sequence_length`` sequences of consecutive steps of one episode, and
learns from all but their first ``burn_in`` steps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, TypeAlias

from rlplug.plugins.algorithms.common import (
    OPTIMIZERS,
    SCHEDULES,
    Count,
    Fraction,
    Frames,
    Positive,
    Rate,
    SampleFreq,
    loss_fits,
    named,
    rate_problem,
)
from rlplug.plugins.algorithms.intrinsic import intrinsic_problems
from rlplug.plugins.algorithms.parameters import OFF_POLICY, Entry
from rlplug.plugins.limits import Limit
from rlplug.registry.components import Intrinsic, Loss, Network, Noise, Preprocessor, ReplayBuffer
from rlplug.registry.schema import Check, Range


def learning_rate_problem(value: Any) -> str | None:
    """What is wrong with ``lr``: a positive number, or a pair of them ``[actor, critic]``."""
    rates = value if isinstance(value, list) else [value]
    if isinstance(value, list) and len(value) != 2:
        return f"must be a number or a pair [actor, critic], got a list of {len(value)}"
    if any(rate <= 0 for rate in rates):
        return f"learning rates must be > 0, got {value!r}"
    return next(filter(None, map(rate_problem, rates)), None)


LearningRate: TypeAlias = Annotated[float | list[float], Check(learning_rate_problem)]
#: gradient steps per update: far more holds the run on one update for hours (DQN recipes take 1 to a few hundred)
GradientSteps: TypeAlias = Annotated[int, Range(ge=1), Limit(100_000, "one update would take that many gradient "
                                                                      "steps, hours on one batch of frames")]
#: rewards summed per stored transition: each env holds its last n - 1 steps back until the batch that ends their sums
NSteps: TypeAlias = Annotated[int, Range(ge=1), Limit(1_000, "each env would hold that many steps back from the "
                                                             "replay, and gamma ** n leaves almost nothing of the "
                                                             "bootstrap (typical: 3 to 10)")]
#: critic steps per actor step: far more and the actor is almost never updated
PolicyDelay: TypeAlias = Annotated[int, Range(ge=1), Limit(1_000, "the actor would be updated once every that many "
                                                                  "critic steps, so almost never (typical: 1 to 3)")]


@dataclass(frozen=True)
class OffPolicyConfig:
    """Options every off-policy algorithm takes: replay, update cadence, optimisation, reward shaping."""

    #: what ``rlplug set`` may change during a run, and what each name reaches (not a recipe key)
    live_parameters: ClassVar[dict[str, Entry]] = OFF_POLICY

    #: where transitions are kept and sampled from
    replay_buffer: ReplayBuffer = named(ReplayBuffer, "uniform")
    #: env steps (per env) collected between updates: frames_per_batch = num_envs x steps_per_update
    steps_per_update: Count = 1
    #: gradient steps per update
    gradient_steps: GradientSteps = 1
    #: transitions sampled for each gradient step
    batch_size: Count = 64
    #: discount factor
    gamma: Fraction = 0.99
    #: n-step returns: each stored transition sums up to n discounted rewards and bootstraps with gamma ** k from
    #: the observation k <= n steps on; an episode's end inside the n steps stops the sum (1: one-step targets)
    n_steps: NSteps = 1
    # a number or a pair here, as the actor-critics take it; dqn redeclares it as a number
    #: learning rate (a schedule scales it)
    lr: LearningRate = 1e-3
    #: how the learning rate goes over total_frames: constant, linear to 0, or cosine to 0
    lr_schedule: SCHEDULES = "constant"
    #: the torch optimiser
    optimizer: OPTIMIZERS = "adam"
    #: more keyword arguments for the optimiser (betas, eps, weight_decay, ...)
    optimizer_kwargs: dict[str, Any] | None = None
    #: clip the global gradient norm of each network to this (unset: no clipping)
    max_grad_norm: Positive | None = None
    #: a preprocessor for observations (e.g. running-standard-scaler), updated with the frames collected;
    #: transitions are stored raw and preprocessed when sampled
    observation_preprocessor: Preprocessor | None = None
    #: frames (over all envs) of uniformly random actions at the start of the run
    random_frames: Frames = 0
    #: frames collected before the first gradient step
    learning_starts: Frames = 0
    #: stored reward = clip(reward * reward_scale + reward_offset, -reward_clip, reward_clip)
    reward_scale: float = 1.0
    #: added to the scaled reward before it is stored
    reward_offset: float = 0.0
    #: clip stored rewards to [-reward_clip, reward_clip] (unset: no clipping)
    reward_clip: Positive | None = None
    #: automatic mixed precision in the update: bfloat16 autocast on the CPU, float16 with a gradient
    #: scaler on CUDA
    mixed_precision: bool = False
    #: an intrinsic reward (exploration bonus: rnd, re3) added to the env's reward before it is shaped and stored
    #: (and before n-step sums), with its coef, schedule and decay (unset: none)
    intrinsic: Intrinsic | None = None
    #: learn from the intrinsic reward alone (rllte's pretraining); episode returns and evaluation stay the env's
    pretraining: bool = False

    def __post_init__(self) -> None:
        intrinsic_problems(self.intrinsic, self.pretraining)

    if TYPE_CHECKING:
        # what each gradient step minimises: every algorithm's config declares its own ``loss`` field (its default,
        # and the check that the loss serves it, Annotated[Loss, Check(loss_fits(name))]) where it sits among its
        # keys; declared here for the type checker only, so that the family's update may read it
        loss: Loss = named(Loss, "loss")


@dataclass(frozen=True)
class ActorCriticConfig(OffPolicyConfig):
    """An actor and Q-critics of (observation, action) for continuous actions."""

    #: the actor network
    policy: Network = named(Network, "mlp")
    #: the Q-network, a critic of the observation and the action (writes state_action_value)
    critic: Network = named(Network, "mlp")
    #: learning rate: a number, or a pair [actor, critic]
    lr: LearningRate = 1e-3
    #: the noise added to actions while collecting (unset: none)
    exploration_noise: Noise | None = named(Noise, "gaussian")
    #: generalised state-dependent exploration (gSDE), for a Gaussian actor (sac's, not ddpg's or td3's): collect
    #: with mean + z(s) @ theta, z(s) the actor's last hidden features and theta ~ N(0, sigma^2) a learned-scale
    #: matrix kept for several steps (the policy table's log_std_init is log sigma's initial value)
    use_sde: bool = False
    #: gSDE: env steps between new exploration matrices; -1: one at the start of each batch
    #: (every steps_per_update steps) only
    sde_sample_freq: SampleFreq = -1
    #: gSDE: act with it during random_frames too, instead of uniformly random actions
    use_sde_at_warmup: bool = False


@dataclass(frozen=True)
class SequencesConfig:
    """Recurrent networks (lstm, gru) learning from sequences of one episode's steps (DDPG's, TD3's, SAC's)."""

    #: recurrent networks (lstm, gru) only: steps per sampled sequence; batch_size counts steps and must be
    #: a multiple of it (batch_size / sequence_length sequences per gradient step)
    sequence_length: Count = 16
    #: recurrent networks only: the first steps of each sequence only warm up the hidden state (no loss)
    burn_in: Frames = 0


@dataclass(frozen=True)
class PolyakTargets:
    """Target networks that follow the online ones by polyak averaging after every gradient step."""

    #: polyak coefficient of the target networks, updated after every gradient step
    tau: Fraction = 0.005


@dataclass(frozen=True)
class DelayedActorConfig:
    """An actor updated less often than the critics."""

    #: update the actor (and any target networks) once every this many critic steps
    policy_delay: PolicyDelay = 2


@dataclass(frozen=True)
class EntropyConfig(ActorCriticConfig):
    """A stochastic actor and an entropy coefficient tuned towards a target entropy (SAC's, CrossQ's)."""

    #: the entropy coefficient (alpha) to start from
    initial_entropy_coef: Positive = 1.0
    #: tune the entropy coefficient so that the policy's entropy stays near target_entropy
    learn_entropy_coef: bool = True
    #: the entropy to keep (unset: minus the number of action dimensions)
    target_entropy: float | None = None
    #: learning rate of the entropy coefficient (unset: the critic's)
    entropy_lr: Rate | None = None
    #: the actor explores by sampling its policy: no added noise unless set
    exploration_noise: Noise | None = None


@dataclass(frozen=True)
class DQNConfig(OffPolicyConfig):
    """Deep Q-learning for discrete actions: epsilon-greedy, a target network, Huber loss, optional double DQN."""

    #: the Q-network: one value per action (writes action_value)
    q_network: Network = named(Network, "mlp")
    #: what each gradient step minimises: rlplug's DQN loss, or TorchRL's DQNLoss (built with this network)
    loss: Annotated[Loss, Check(loss_fits("dqn"))] = named(Loss, "dqn-loss")
    #: target = (1 - tau) * target + tau * online every target_update_interval frames (1.0: a hard copy)
    tau: Fraction = 1.0
    #: frames (over all envs) between target network updates
    target_update_interval: Count = 10_000
    #: double DQN: the online network chooses the next action, the target network values it
    double: bool = False
    #: the exploration probability at the start
    epsilon_start: Fraction = 1.0
    #: the exploration probability after exploration_fraction of the run
    epsilon_end: Fraction = 0.05
    #: the fraction of total_frames over which epsilon goes linearly from epsilon_start to epsilon_end
    exploration_fraction: Fraction = 0.1
    # Stable-Baselines3's DQN defaults
    steps_per_update: Count = 4
    learning_starts: Frames = 100
    lr: Rate = 1e-4
    batch_size: Count = 32
    max_grad_norm: Positive | None = 10.0


#: any off-policy algorithm's config, as the family's shared update reads it (each algorithm narrows it to its own)
OffPolicyConfigs: TypeAlias = OffPolicyConfig
