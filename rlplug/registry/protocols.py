"""What a component of each kind must be: one ``typing.Protocol`` per kind, typed for mypy, checked when the
component is built, and the source of the plugin guide's contract sections (:mod:`rlplug.registry.guide`).

Members marked :func:`optional` are called where an object has them (a capability: running statistics, an array
step, a video hook...), read with :func:`capability`, never by probing names; every other member is required, and
:func:`conform` stops a run whose component lacks one, in one line naming it, its plugin and the member. torch and
TorchRL types are imported for the type checker only: listing and validating recipes never load torch."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from rlplug.registry.callbacks import Callback
from rlplug.registry.conformance import (
    ContractError,
    capability,
    checked_metrics,
    conform,
    has_member,
    members,
    optional,
    optional_name,
)
from rlplug.registry.env_protocol import Env

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping, Sequence
    from pathlib import Path

    import torch
    from tensordict import TensorDictBase
    from torch import nn
    from torchrl.data import TensorSpec

    from rlplug.core.acting import ArrayActor
    from rlplug.core.episodes import EpisodeTracker

#: handed out here too (``protocols.capability``...)
__all__ = ["ContractError", "Env", "capability", "checked_metrics", "conform", "has_member", "members",
           "optional_name"]


class Algorithm(Protocol):
    """An algorithm: what collects (``policy``), how much per update, the update itself, and its state."""

    #: a TensorDict module writing ``action`` (and the log-probability, for on-policy learners)
    policy: nn.Module
    #: frames (over all envs) collected for each update
    frames_per_batch: int

    def update(self, batch: TensorDictBase) -> dict[str, float]:
        """Learn from a batch ``[envs, time]`` in TorchRL's layout; returns metrics (plain numbers)."""

    def state_dict(self) -> dict[str, Any]:
        """Plain tensors and numbers (checkpoints load with ``weights_only=True``)."""

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Put back what :meth:`state_dict` returned, into an algorithm built from the same recipe (resume)."""

    @property
    @optional
    def parameters(self) -> list[torch.Tensor]:
        """The tensors checked for NaN after every update (default: the policy's parameters)."""

    @property
    @optional
    def asynchronous(self) -> bool:
        """True when it learns from experience collected with older weights (IMPALA): the ``ray`` runner
        then hands it rollouts first come, first served."""

    @optional
    def networks(self) -> dict[str, nn.Module]:
        """The networks by name, for loggers that record weights (default: ``policy`` and ``critic``)."""

    @optional
    def get_weights(self) -> TensorDictBase:
        """pytorchrl's protocol (Ray's gradient mode): all a gradient depends on (networks, targets, step count)."""

    @optional
    def set_weights(self, weights: TensorDictBase) -> None:
        """Put in what :meth:`get_weights` returned, in place (a gradient worker's copy of the algorithm)."""

    @optional
    def compute_gradients(self, batch: TensorDictBase, grads_to_cpu: bool = True) -> tuple[TensorDictBase, dict]:
        """Every stepped learner's gradients on ``batch`` (left in place too) and the loss's scalars; no step."""

    @optional
    def apply_gradients(self, gradients: TensorDictBase | None = None) -> dict[str, torch.Tensor]:
        """A step with ``gradients`` (None: those left in place), targets moved as in ``update``; grad norms."""

    @optional
    def compile_update(self) -> None:
        """``run.compile = true``: compile what the update computes (torch.compile), in place, before training."""

    @optional
    def batched_update(self, algorithms: list[Algorithm], seeds: list[int]) -> BatchedUpdate:
        """Seeds trained together (``rlplug run --seeds --batched``): the update of ``algorithms`` (this one
        first; copies built from one recipe, one per seed of ``seeds``) computed at once, a
        :class:`BatchedUpdate`. Raises ``UserError`` where this configuration cannot be (its loss, say)."""

    @optional
    def update_algorithm_parameter(self, name: str, value: Any) -> tuple[Any, Any]:
        """pytorchrl's: change ``name`` of the algorithm's table (``lr``...) from the next update on; returns the
        value before and the value now (converted). ``rlplug set`` calls it for a name the factory's
        :class:`LiveParameters` took; it raises ``UserError`` where the built objects cannot take the value."""

    @optional
    def parameter_changes(self) -> dict[str, Any]:
        """The changes made by :meth:`update_algorithm_parameter` since the algorithm was built (name -> value, in
        order): a checkpoint keeps them, and a rebuilt run makes them again before loading its state."""

    @optional
    def data_parallel(self, copies: int) -> DataParallel:
        """Its update computed by ``copies`` copies of it at once, each on its share of the data (Ray's gradient
        workers, ``runner.mode = "gradients"``; several learners, ``runner.learners``): a :class:`DataParallel`.
        The kit's families (:mod:`rlplug.algorithms`) have it."""

    @optional
    def replay_storage(self) -> ReplayStorage:
        """Its replay as storages elsewhere hold it (Ray's ``runner.storages``): a :class:`ReplayStorage`. The
        kit's off-policy family has it."""

    @optional
    def learn_offline(self, transitions: TensorDictBase) -> None:
        """An offline run (a recipe's ``[dataset]``): learn from ``transitions`` alone, never from collected
        batches, which are then empty TensorDicts of the update's sample count (what ``run.total_frames``
        counts). ``transitions`` holds ``observation``, ``action`` and ``("next", "observation" | "reward" |
        "terminated" | "truncated" | "done")``. Called once after the algorithm is built, before any state
        is loaded; it may change ``frames_per_batch``."""

    @optional
    def rounded_cadence(self, unit: int) -> str | None:
        """Where the frames of its update may change: ``frames_per_batch`` rounded up to a multiple of ``unit``
        (every Ray worker's envs stepping alike), whatever follows the frames (gradient steps) scaled with them;
        the change in words for the user, or None where the cadence is the recipe's to keep (an on-policy
        batch)."""

    # -- pytorchrl's acting half: every built-in algorithm's is rlplug.plugins.algorithms.acting's ---------------

    @optional
    def acting_step(self, obs: torch.Tensor | TensorDictBase, rhs: TensorDictBase | None, done: torch.Tensor,
                    deterministic: bool = False
                    ) -> tuple[torch.Tensor, torch.Tensor, TensorDictBase, dict[str, torch.Tensor]]:
        """The acting policy on ``obs`` (``[*batch, ...]``): the action, the action clipped to the action space,
        the recurrent state after the step (``rhs`` in: the one returned last, None for zeros; restarted where
        ``done`` marks a new episode; empty without recurrent networks) and the other predictions (``log_prob``,
        ``value``, where it has them). ``deterministic``: the distribution's mode, as evaluation acts."""

    @property
    @optional
    def gamma(self) -> float | None:
        """The discount factor (an on-policy algorithm's is its advantage estimator's)."""

    @property
    @optional
    def num_epochs(self) -> int:
        """Passes over each collected batch (1 for an off-policy learner, which samples its replay)."""

    @property
    @optional
    def mini_batch_size(self) -> int:
        """Frames (or sampled transitions) per gradient step."""

    @property
    @optional
    def num_mini_batch(self) -> int:
        """Gradient steps per epoch of an update."""

    @property
    @optional
    def num_test_episodes(self) -> int | None:
        """Episodes per evaluation (the run's ``eval.episodes``; None for one built outside a run)."""

    @property
    @optional
    def start_steps(self) -> int:
        """Frames of uniformly random actions at the start of the run (0 for on-policy learners)."""

    @property
    @optional
    def test_every(self) -> int | None:
        """Updates between evaluations (from the run's ``eval.every_frames``; 0: only at the end)."""

    @property
    @optional
    def update_every(self) -> int:
        """Frames collected (over all envs) between updates."""


class LiveParameters(Protocol):
    """What of an algorithm may change during a run (``rlplug set``), read before anything is built: an algorithm
    factory's ``live_parameters`` attribute (every factory :func:`rlplug.algorithms.factory_for` makes has one;
    an algorithm without it takes no changes). ``values``: the algorithm's recipe values, validated."""

    def names(self, values: Mapping[str, Any]) -> list[str]:
        """The names that may change for an algorithm of these recipe values."""

    def annotation(self, values: Mapping[str, Any], name: str) -> Any:
        """The type ``name``'s value is checked against; ``UserError`` naming what can change where ``name`` cannot."""

    def check(self, values: Mapping[str, Any], name: str, value: Any) -> Any:
        """``value`` for ``name`` checked by the recipe's rules and converted, or ``UserError`` at
        ``algorithm.NAME``."""


def live_parameters(factory: Any) -> LiveParameters | None:
    """An algorithm factory's :class:`LiveParameters`, or None where it takes no changes during a run."""
    found = getattr(factory, "live_parameters", None)
    return found if found is not None and all(hasattr(found, m) for m in ("names", "annotation", "check")) else None


class BatchedUpdate(Protocol):
    """What :meth:`Algorithm.batched_update` returns: several seeds' copies of one algorithm learning at once,
    each exactly its own algorithm (parameters, optimiser state and random stream)."""

    def actor(self) -> ArrayActor:
        """An :class:`rlplug.core.acting.ArrayActor` acting for every seed at once on ``[seeds, envs, ...]``."""

    def update(self, batches: list[TensorDictBase]) -> list[dict[str, float]]:
        """One batch per seed learned from; each seed's metrics (plain numbers), in the same order."""

    def finite(self) -> list[bool]:
        """Whether each seed's parameters are all finite (NaN and infinity stop that seed alone)."""

    def keep(self, indices: list[int]) -> None:
        """Go on with only the seeds at these positions (the others stopped)."""

    def sync(self) -> None:
        """Each seed's algorithm brought up to date (its optimiser's state), before its checkpoint."""

    def restart(self, seeds: list[int]) -> None:
        """Each seed's own random stream (its minibatch order) starts again from these seeds, where the runs
        restart their envs (a checkpoint): a resumed run goes on as the uninterrupted one."""


class DataParallel(Protocol):
    """An algorithm's update computed by copies of it, each on its share of the data, every gradient step taken
    with the mean of their gradients (:meth:`Algorithm.data_parallel`). A runner moves the data and averages; this
    says what a copy's share is and how the update's steps go. Three roles call it: a gradient worker (a copy
    with its own rollouts: :meth:`take`, then :meth:`gradients` per step), the driver of gradient workers
    (:meth:`learn`, each step's gradients from the workers) and a learner (all three, the mean taken over the
    learners)."""

    @property
    def whole_batch(self) -> bool:
        """True where every learner takes the whole collected batch (each stores it and samples its share of
        each step); False where the batch is split among the learners by env rows."""

    def problem(self, what: str, instead: str) -> str | None:
        """Why the algorithm as configured cannot train so (``what``: the runner's setting; ``instead``: the one
        that trains it), in one sentence; None where it can."""

    def take(self, batch: TensorDictBase, frames: int) -> dict[str, float]:
        """A copy's data: ``batch`` (its rollout ``[envs, time]``, or a learner's shard) taken in with its current
        weights (stored, or its estimates computed); ``frames``: the run's frames once this batch is counted.
        What the driver tracks of the copy (``buffer_size``, ``explained_variance``...), plain numbers."""

    def gradients(self, step: int) -> tuple[TensorDictBase, dict[str, torch.Tensor]]:
        """A copy's gradients for step ``step`` of the update (counting from 0 in each epoch) on its share of
        what it took, with its current weights (:meth:`Algorithm.compute_gradients`), and what the loss
        reported; nothing is stepped."""

    def learn(self, frames: int, step: Callable[[int], tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]
                                                 | None], taken: Mapping[str, Sequence[float]]) -> dict[str, float]:
        """The update of ``frames`` collected frames, each gradient step made by ``step(index)``: the mean of the
        copies' :meth:`gradients` applied, returning what they reported and the gradient norms (None: a copy was
        lost, and the update ends there). ``taken``: what each copy's :meth:`take` answered, by key, one value per
        copy. Its metrics, as :meth:`Algorithm.update`'s."""

    def follow(self, frames: int) -> None:
        """The driver's copy after learners made the update of ``frames`` frames: the frames counted and the
        schedules followed as its own update would (its weights then come from a learner)."""

    def become_learner(self, replay: ReplayBuffer | None) -> None:
        """This copy made a learner: it never acts (exploration stays the driver's), and learns from ``replay``
        where one is given (replay storages the learners share, which the workers fill)."""


class ReplayStorage(Protocol):
    """An algorithm's replay as storages elsewhere hold it (:meth:`Algorithm.replay_storage`): Ray's replay
    storages, each a buffer of the recipe's ``algorithm.replay_buffer``, filled by the workers."""

    #: the recipe's ``algorithm.replay_buffer``: each storage builds one of it
    buffer: Any
    #: the capacity of the algorithm's own buffer, shared among the storages
    capacity: int

    def problem(self) -> str | None:
        """Why this replay cannot live in storages (its kind, its storage, a preprocessor learning from what the
        algorithm stores), in one sentence; None where it can."""

    def writer(self) -> Callable[[TensorDictBase], TensorDictBase]:
        """What a worker turns its rollout ``[envs, time]`` into before it writes it: the transitions as the
        algorithm's own replay stores them. Picklable (it travels to the workers)."""

    def install(self, replay: ReplayBuffer) -> None:
        """Learn from ``replay`` (the storages as one buffer) instead of its own, which the workers fill: the
        batches the algorithm then gets hold only what exploration needs (rewards and dones)."""


class Estimator(Protocol):
    """An advantage or value-target estimator: a TensorDict module over ``[*batch, time]`` data."""

    def __call__(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Writes ``advantage`` and/or ``value_target`` into the batch and returns it."""


class Network(Protocol):
    """A network: a TensorDict module (``TensorDictModuleBase``) for the role it was built for."""

    #: the entries it reads (``observation``; ``q_value`` critics add ``action``)
    in_keys: list[Any]
    #: the entries it writes (what ``rlplug.networks.wrap`` makes of the role)
    out_keys: list[Any]

    def __call__(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Reads ``in_keys``, writes ``out_keys``."""

    def parameters(self) -> Iterator[nn.Parameter]:
        """What its learner trains."""

    def state_dict(self) -> dict[str, Any]:
        """Its weights, saved in checkpoints."""

    def load_state_dict(self, state: dict[str, Any]) -> Any:
        """Put back what :meth:`state_dict` returned."""


class Logger(Protocol):
    """A logger: called after every update and evaluation, closed once however the run ends."""

    def log(self, metrics: dict[str, float], frames: int) -> None:
        """One update's or evaluation's metrics (plain numbers) at ``frames`` frames collected."""

    def close(self, summary: dict[str, Any]) -> None:
        """The run ended (finished, stopped or failed); ``summary`` is what ``summary.json`` holds."""

    @optional
    def log_video(self, path: Path, frames: int) -> None:
        """Called with each evaluation video (``eval.video = true``)."""


class ReplayBuffer(Protocol):
    """A replay buffer of transitions. A sample holds TorchRL's keys: ``observation``, ``action``, ``("next",
    "observation" | "reward" | "terminated" | "done")``; ``index`` and ``weight`` from a prioritised buffer."""

    def extend(self, batch: TensorDictBase) -> Any:
        """Store a batch of transitions (flattened to ``[frames]``), the oldest overwritten when full."""

    def sample(self, batch_size: int) -> TensorDictBase:
        """``batch_size`` transitions, on the run's device."""

    def __len__(self) -> int:
        """How many transitions it holds."""

    def state_dict(self) -> dict[str, Any]:
        """Its contents and position, saved in checkpoints (plain tensors and numbers)."""

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Put back what :meth:`state_dict` returned."""

    @optional
    def update_priority(self, index: torch.Tensor, priority: torch.Tensor) -> None:
        """Prioritised buffers: new priorities for a sample's ``index`` (samples then also hold ``weight``)."""

    @optional
    def step(self, frames: int) -> None:
        """Schedules of the buffer's own (a prioritised buffer's importance-weight exponent)."""

    @optional
    def sample_sequences(self, batch_size: int, length: int) -> TensorDictBase:
        """Sequences of one episode's consecutive steps, for recurrent networks."""

    @optional
    def sample_many(self, batch_size: int, count: int) -> Iterator[TensorDictBase]:
        """``count`` samples of ``batch_size``, each what :meth:`sample` would give at the time it is taken: an
        update's samples drawn at once, for a buffer where a call costs more than its draws (one held in other
        processes)."""


class Noise(Protocol):
    """Exploration noise: a TensorDict module adding noise to ``action`` while exploring."""

    def __call__(self, tensordict: TensorDictBase) -> TensorDictBase:
        """The ``action`` entry made noisy, within the action spec."""

    def step(self, frames: int) -> None:
        """``frames`` more frames collected: schedules (an annealed scale) move."""

    def state_dict(self) -> dict[str, Any]:
        """Its schedule's position, saved in checkpoints."""

    def load_state_dict(self, state: dict[str, Any]) -> Any:
        """Put back what :meth:`state_dict` returned."""

    @optional
    def reset(self, done: torch.Tensor) -> None:
        """Restart the noise of the envs whose episode ended (temporally correlated noise)."""

    @optional
    def act_on(self, action: torch.Tensor) -> torch.Tensor:
        """The noisy action for an action tensor: lets collection skip the TensorDict per step, and ``--batched``
        act for every seed at once (a policy with a stage lacking it is refused there)."""

    @property
    @optional
    def one_hot(self) -> bool:
        """True for a stage whose actions are one-hot vectors (Discrete actions in TorchRL's layout): with
        :meth:`act_on`, the env is then handed their index."""


class Preprocessor(Protocol):
    """An observation preprocessor: a module from a tensor to a tensor, learning its statistics in train mode."""

    def __call__(self, observation: torch.Tensor) -> torch.Tensor:
        """The observation as the networks read it."""

    def train(self, mode: bool = True) -> Any:
        """Statistics learned from what it sees (True) or frozen (False)."""

    def eval(self) -> Any:
        """``train(False)``: statistics frozen."""

    def state_dict(self) -> dict[str, Any]:
        """Its statistics, saved in checkpoints."""

    def load_state_dict(self, state: dict[str, Any]) -> Any:
        """Put back what :meth:`state_dict` returned."""


class Runner(Protocol):
    """Where experience is collected: the runner gives the run its :class:`Collector`."""

    def collector(self, env: Env, policy: nn.Module, frames_per_batch: int, seed: int, **context: Any) -> Collector:
        """A :class:`Collector`; ``context`` holds ``recipe`` and ``algorithm``, for runners whose workers
        build envs of their own or need to know the algorithm."""


class Collector(Protocol):
    """What a runner's ``collector(...)`` returns: batches in TorchRL's ``[envs, time]`` layout."""

    #: episode returns as they come (``episodes``, ``recent_return()``)
    tracker: EpisodeTracker

    def collect(self) -> TensorDictBase:
        """The next batch; :class:`rlplug.errors.WorkersLost` where collection elsewhere cannot go on (the run
        stops with a checkpoint)."""

    def restart(self, seed: int) -> None:
        """Every env starts a new episode from ``seed`` at the next collection."""

    def sync_weights(self) -> None:
        """After every update: the policy's new weights reach wherever collection happens."""

    def shutdown(self) -> None:
        """When training ends, however it ends; a later ``collect()`` may start again."""

    @optional
    def metrics(self) -> dict[str, float]:
        """Logged with each update (policy lag, restarts...)."""

    @optional
    def statistics(self) -> dict[str, Any]:
        """The envs' statistics where they live elsewhere (Ray workers)."""

    @optional
    def load_statistics(self, state: dict[str, Any]) -> None:
        """Put back what :meth:`statistics` returned, into the envs where they live."""

    @optional
    def update(self, algorithm: Algorithm, batch: TensorDictBase) -> dict[str, float]:
        """The update done its own way (Ray's gradient workers), instead of ``algorithm.update(batch)``."""

    @optional
    def before_checkpoint(self, algorithm: Algorithm) -> None:
        """Before each checkpoint: ``algorithm`` given its whole state back from wherever it trains (Ray's
        learners)."""


class Loss(Protocol):
    """A loss: a TorchRL ``LossModule`` (a TensorDict in, a TensorDict of ``loss_*`` terms and diagnostics out;
    the algorithm minimises the sum of the ``loss_*`` terms). A loss for the off-policy algorithms (``ddpg``,
    ``td3``, ``sac``, ``dqn``) also says which optimiser trains what (``parameter_groups``, ``term_learners``)
    and how its targets move (``update_targets``, or ``no_targets``): checked when the algorithm is built."""

    def __call__(self, tensordict: TensorDictBase) -> TensorDictBase:
        """The terms for a batch: on-policy, a minibatch of the collected batch with the estimator's
        ``advantage`` and ``value_target``; off-policy, a replay sample (:class:`ReplayBuffer`). An off-policy
        loss may write ``td_error`` (one per transition) into it, for a prioritised buffer's new priorities."""

    def parameters(self) -> Iterator[nn.Parameter]:
        """Everything it trains (the on-policy algorithms' one optimiser)."""

    def state_dict(self) -> dict[str, Any]:
        """Its networks, target copies and coefficients; every key exists once it is built (a key that
        appears during training stops the run after the first gradient step)."""

    def load_state_dict(self, state: dict[str, Any]) -> Any:
        """Put back what :meth:`state_dict` returned."""

    @property
    @optional
    def diagnostics(self) -> bool:
        """Whether to compute the diagnostics; the algorithm turns them off on minibatches it does not report."""

    @property
    @optional
    def adapts_per_minibatch(self) -> bool:
        """True when a coefficient follows each minibatch (a KL penalty's beta): Ray's gradient workers, computing
        gradients apart, cannot agree on it."""

    @property
    @optional
    def parameter_groups(self) -> dict[str, list[torch.Tensor]]:
        """Off-policy (required there): each learner's parameters by the algorithm's learner names (``actor``,
        ``critic``; ``sac`` adds ``entropy``; ``dqn`` has ``q``), each trained with that learner's learning
        rate; a name the algorithm does not have is refused."""

    @property
    @optional
    def term_learners(self) -> dict[str, str]:
        """Off-policy (required there): which learner each ``loss_*`` term trains (``{"loss_actor": "actor",
        ...}``), among ``parameter_groups``."""

    @property
    @optional
    def target_parameters(self) -> dict[str, list[torch.Tensor]]:
        """Each learner's target copies (``{"critic": [...]}``) in the order of ``parameter_groups[name]``: what
        ``update_targets`` moves towards them; seeds trained together move their stacked copies by it."""

    @property
    @optional
    def with_actor(self) -> bool:
        """Whether to compute the actor's term (TD3's algorithm turns it off on the steps it does not move it)."""

    @property
    @optional
    def batchable(self) -> bool:
        """Whether it may run under ``torch.vmap`` with each seed's parameters swapped in (seeds trained together):
        no ``.item()``, no state of its own changed per minibatch."""

    @optional
    def update_targets(self, tau: float) -> None:
        """``target = (1 - tau) target + tau online``, after each gradient step; an off-policy loss defines it
        or declares ``no_targets``."""

    @property
    @optional
    def no_targets(self) -> bool:
        """True for an off-policy loss that keeps no target networks (CrossQ's); one with neither is refused."""

    @property
    @optional
    def n_step_targets(self) -> bool:
        """True for an off-policy loss whose bootstrap discounts by ``gamma ** steps_to_next_obs``, the sample's
        entry with n-step returns (``algorithm.n_steps > 1``; rlplug's ``Sample.target`` does it); without it,
        ``n_steps > 1`` is refused."""


class Intrinsic(Protocol):
    """An intrinsic reward (an exploration bonus: random network distillation, RE3): a reward for each collected
    transition from what the module makes of its observations, which the algorithm adds to the env's reward
    (``coef`` times it, the weight on its ``schedule``; with ``algorithm.pretraining`` it is the whole reward). The
    on-policy family adds it before its estimators, the off-policy family before its reward shaping and n-step
    sums; the env's own returns (``episode_return``, evaluation) never include it."""

    def rewards(self, batch: TensorDictBase) -> torch.Tensor:
        """One intrinsic reward per transition of a collected batch (``[envs, time]``, TorchRL's keys:
        ``observation``, ``action``, ``("next", "observation" | "reward" | "done")``), shaped like the batch
        (``[envs, time]``), float32, without gradient; running statistics of its own may take the batch in."""

    def learn(self, batch: TensorDictBase) -> dict[str, float]:
        """Its own networks trained on the batch, after :meth:`rewards` (a predictor's step; nothing for a fixed
        encoder); its metrics, plain numbers (logged beside the algorithm's, e.g. ``rnd_loss``)."""

    def state_dict(self) -> dict[str, Any]:
        """Its networks, optimiser and statistics (plain tensors and numbers), saved in checkpoints: resume goes on
        from them."""

    def load_state_dict(self, state: dict[str, Any]) -> Any:
        """Put back what :meth:`state_dict` returned."""


class Dataset(Protocol):
    """Recorded experience an offline run learns from (a recipe's ``[dataset]``)."""

    def env_table(self) -> dict[str, Any] | None:
        """The recipe ``[env]`` table of the env the data was recorded on, which an offline run evaluates on
        where the recipe has no ``[env]``; None where the data names no env."""

    def transitions(self, device: str) -> TensorDictBase:
        """Every recorded step as ``[N]`` transitions: ``observation``, ``action`` (class indices, int64
        ``[N]``, for discrete actions: the run lays them out as its env's spec does), ``("next", "observation" |
        "reward" | "terminated" | "truncated" | "done")``, rewards and flags shaped ``[N, 1]``."""

    @optional
    def describe(self) -> dict[str, Any]:
        """What ``rlplug show`` prints of it: its size, its episodes' returns, its env."""


class Transform(Protocol):
    """An env transform: a TorchRL ``Transform``."""

    #: the entries it reads, a reward among them for a transform that reshapes the reward (None: none)
    in_keys: list[Any] | None
    #: the entries it writes (None: none)
    out_keys: list[Any] | None

    def transform_observation_spec(self, observation_spec: TensorSpec) -> TensorSpec:
        """The observation spec as the transform leaves it."""


PROTOCOLS: dict[str, type] = {  # kind -> the protocol its components follow
    "env": Env, "algorithm": Algorithm, "estimator": Estimator, "logger": Logger, "network": Network,
    "replay_buffer": ReplayBuffer, "noise": Noise, "preprocessor": Preprocessor, "runner": Runner, "loss": Loss,
    "transform": Transform, "callback": Callback, "intrinsic": Intrinsic, "dataset": Dataset,
}
