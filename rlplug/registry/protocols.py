"""What a component of each kind must be: one ``typing.Protocol`` per kind, checked when the component is built.

Each protocol lists the members rlplug calls. Members marked :func:`optional` are called where an object has
them and skipped where it has not (a capability: running statistics, an array step, a video hook...);
code reads them with :func:`capability`, never by probing names of its own. Every other member is required:
when a factory returns an object without one, :func:`conform` stops the run before training with one line
naming the component, its plugin and the member. The hookspecs (:mod:`rlplug.registry.hookspecs`) point here.
Only typing is imported: signatures name torch and TorchRL types as strings."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from rlplug.errors import UserError, one_line


def optional(member: Callable) -> Callable:
    """Marks a protocol member as optional: rlplug uses it where an object has it."""
    setattr(member, "__rlplug_optional__", True)  # noqa: B010 (a marker mypy cannot know functions take)
    return member


def members(protocol: type) -> dict[str, bool]:
    """``name -> required`` for every member a protocol declares (methods, properties and annotated fields)."""
    found: dict[str, bool] = {}
    for klass in reversed(protocol.__mro__):
        if klass in (object, Protocol) or not getattr(klass, "_is_protocol", False):
            continue
        for name in getattr(klass, "__annotations__", {}):
            found[name] = True
        for name, value in vars(klass).items():
            if name.startswith("_") and name not in ("__call__", "__len__"):
                continue
            function = value.fget if isinstance(value, property) else value
            if callable(function):
                found[name] = not getattr(function, "__rlplug_optional__", False)
    return found


class Env(Protocol):
    """An env: a TorchRL ``EnvBase`` (batched or not) is one. rlplug steps it with TensorDicts
    (``reset``, ``step_and_maybe_reset``), or, where it offers the array step (``supports_tensor_steps``,
    ``reset_arrays``, ``step_arrays``), with numpy arrays and no TensorDict per step: the fast road, which any
    env may take (rlplug's ``gym`` env does; docs/writing-plugins.md). Networks read its ``observation``
    entry; an env declaring other entries has them concatenated into one (:mod:`rlplug.core.observations`)."""

    observation_spec: Any
    action_spec: Any
    batch_size: Any

    def set_seed(self, seed: int) -> Any: ...

    def reset(self, tensordict: Any = None) -> Any: ...

    def step_and_maybe_reset(self, tensordict: Any) -> tuple[Any, Any]: ...

    def close(self) -> None: ...

    @optional
    def statistics(self) -> dict[str, Any]:
        """What the env learns while it runs (running normalisation): plain tensors and numbers, saved in
        checkpoints and copied (frozen) into the evaluation env."""

    @optional
    def load_statistics(self, state: dict[str, Any]) -> None:
        """Put back what :meth:`statistics` returned (of an env built with the same options)."""

    @optional
    def set_training(self, training: bool) -> None:
        """False: statistics frozen and rewards in the env's own units (evaluation)."""

    @optional
    def normalize_observation(self, observation: Any) -> Any:
        """A numpy observation as the policy sees it (``Agent.select_action``)."""

    @optional
    def read_action(self, action: Any) -> Any:
        """Actions in the policy's layout (one-hot vectors, indices from 0) as numpy in the env's own format
        (gymnasium's: an index, a Discrete space's start added), for ``Agent.select_action``; TorchRL's
        gymnasium envs have it."""

    @optional
    def observation_normalizer(self) -> Any:
        """:meth:`normalize_observation` as a ``torch.nn.Module`` (float32 observations in and out) with the
        statistics as they are now, frozen; None when observations pass unchanged. ``rlplug export`` puts it
        in front of the policy; an env that normalises without it cannot be exported."""

    @property
    @optional
    def supports_tensor_steps(self) -> bool:
        """Whether :meth:`reset_arrays` and :meth:`step_arrays` may be used now: the array road, which
        collects and evaluates without a TensorDict per step. Its arrays must be what the TensorDict road
        would give: one ``observation`` entry (the spec's dtype, ``[envs, ...]``), the same episodes."""

    @optional
    def reset_arrays(self, seed: int | None = None) -> Any:
        """Every env reset (seeded when ``seed`` is given); the observations as one numpy array ``[envs, ...]``."""

    @optional
    def step_arrays(self, action: Any) -> Any:
        """One step of every env with a numpy action ``[envs, ...]`` in gymnasium's format (an integer index
        for discrete actions, floats for continuous ones); the 5-tuple ``(next_observation, reward,
        terminated, truncated, observation)`` of numpy arrays ``[envs, ...]``: ``reward`` float32,
        ``terminated``/``truncated`` bool, ``next_observation`` where the step led (an episode's last),
        ``observation`` where each env goes on from (a new episode's first where one ended: same-step
        autoreset)."""


class Algorithm(Protocol):
    """An algorithm: what collects (``policy``), how much per update, the update itself, and its state."""

    #: a TensorDict module writing ``action`` (and the log-probability, for on-policy learners)
    policy: Any
    #: frames (over all envs) collected for each update
    frames_per_batch: int

    def update(self, batch: Any) -> dict[str, float]:
        """Learn from a batch ``[envs, time]`` in TorchRL's layout; returns metrics (plain numbers)."""

    def state_dict(self) -> dict[str, Any]:
        """Plain tensors and numbers (checkpoints load with ``weights_only=True``)."""

    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    @property
    @optional
    def parameters(self) -> list:
        """The tensors checked for NaN after every update (default: the policy's parameters)."""

    @property
    @optional
    def asynchronous(self) -> bool:
        """True when it learns from experience collected with older weights (IMPALA): the ``ray`` runner
        then hands it rollouts first come, first served."""

    @optional
    def networks(self) -> dict[str, Any]:
        """The networks by name, for loggers that record weights (default: ``policy`` and ``critic``)."""

    @optional
    def get_weights(self) -> Any:
        """pytorchrl's protocol, for Ray's gradient workers: the trained parameters."""

    @optional
    def set_weights(self, weights: Any) -> None: ...

    @optional
    def compute_gradients(self, minibatch: Any, *args: Any, **kwargs: Any) -> Any: ...

    @optional
    def apply_gradients(self, gradients: Any) -> Any: ...

    @optional
    def compile_update(self) -> None:
        """``run.compile = true``: compile what the update computes (torch.compile), in place, before training."""

    @optional
    def batched_update(self, algorithms: list, seeds: list[int]) -> Any:
        """Seeds trained together (``rlplug run --seeds --batched``): the update of ``algorithms`` (this one
        first; copies built from one recipe, one per seed of ``seeds``) computed at once, a
        :class:`BatchedUpdate`. Raises ``UserError`` where this configuration cannot be (its loss, say)."""


class BatchedUpdate(Protocol):
    """What :meth:`Algorithm.batched_update` returns: several seeds' copies of one algorithm learning together,
    each exactly its own algorithm (its parameters, optimiser state and random stream), computed at once."""

    def actor(self) -> Any:
        """An :class:`rlplug.core.acting.ArrayActor` acting for every seed at once on ``[seeds, envs, ...]``."""

    def update(self, batches: list) -> list[dict[str, float]]:
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


class Estimator(Protocol):
    """An advantage or value-target estimator: a TensorDict module over ``[*batch, time]`` data writing
    ``advantage`` and/or ``value_target``."""

    def __call__(self, tensordict: Any) -> Any: ...


class Network(Protocol):
    """A network: a TensorDict module (``TensorDictModuleBase``) for the role it was built for."""

    in_keys: Any
    out_keys: Any

    def __call__(self, tensordict: Any) -> Any: ...

    def parameters(self) -> Any: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> Any: ...


class Logger(Protocol):
    """A logger: called after every update and evaluation, closed once however the run ends."""

    def log(self, metrics: dict[str, float], frames: int) -> None: ...

    def close(self, summary: dict[str, Any]) -> None: ...

    @optional
    def log_video(self, path: Any, frames: int) -> None:
        """Called with each evaluation video (``eval.video = true``)."""


class ReplayBuffer(Protocol):
    """A replay buffer of transitions."""

    def extend(self, batch: Any) -> Any: ...

    def sample(self, batch_size: int) -> Any: ...

    def __len__(self) -> int: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    @optional
    def update_priority(self, index: Any, priority: Any) -> None:
        """Prioritised buffers: new priorities for a sample's ``index`` (samples then also hold ``weight``)."""

    @optional
    def step(self, frames: int) -> None:
        """Schedules of the buffer's own (a prioritised buffer's importance-weight exponent)."""

    @optional
    def sample_sequences(self, batch_size: int, length: int) -> Any:
        """Sequences of one episode's consecutive steps, for recurrent networks."""


class Noise(Protocol):
    """Exploration noise: a TensorDict module adding noise to ``action`` while exploring."""

    def __call__(self, tensordict: Any) -> Any: ...

    def step(self, frames: int) -> None: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> Any: ...

    @optional
    def reset(self, done: Any) -> None:
        """Restart the noise of the envs whose episode ended (temporally correlated noise)."""

    @optional
    def act_on(self, action: Any) -> Any:
        """The noisy action for an action tensor: lets collection skip the TensorDict per step. A stage whose
        actions are one-hot vectors (Discrete actions in TorchRL's layout) says so: ``one_hot = True``."""


class Preprocessor(Protocol):
    """An observation preprocessor: a module from a tensor to a tensor, learning its statistics in train mode."""

    def __call__(self, observation: Any) -> Any: ...

    def train(self, mode: bool = True) -> Any: ...

    def eval(self) -> Any: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> Any: ...


class Runner(Protocol):
    """Where experience is collected: the runner gives the run its :class:`Collector`."""

    def collector(self, env: Any, policy: Any, frames_per_batch: int, seed: int, **context: Any) -> Any:
        """A :class:`Collector`; ``context`` holds ``recipe`` and ``algorithm``, for runners whose workers
        build envs of their own or need to know the algorithm."""


class Collector(Protocol):
    """What a runner's ``collector(...)`` returns: batches in TorchRL's ``[envs, time]`` layout."""

    #: episode returns as they come (``episodes``, ``recent_return()``): :class:`rlplug.core.episodes.EpisodeTracker`
    tracker: Any

    def collect(self) -> Any:
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
    def load_statistics(self, state: dict[str, Any]) -> None: ...

    @optional
    def update(self, algorithm: Any, batch: Any) -> dict[str, float]:
        """The update done its own way (Ray's gradient workers), instead of ``algorithm.update(batch)``."""


class Loss(Protocol):
    """A loss: a TorchRL ``LossModule`` (a TensorDict in, a TensorDict of ``loss_*`` terms and diagnostics out;
    the algorithm minimises the sum of the ``loss_*`` terms)."""

    def __call__(self, tensordict: Any) -> Any: ...

    def parameters(self) -> Any: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> Any: ...

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
    def parameter_groups(self) -> dict[str, list]:
        """Off-policy losses with several optimisers: each learner's parameters by name (actor, critic...)."""

    @property
    @optional
    def term_learners(self) -> dict[str, str]:
        """Which learner each ``loss_*`` term trains (``{"loss_actor": "actor", ...}``)."""

    @property
    @optional
    def target_parameters(self) -> dict[str, list]:
        """Each learner's target copies (``{"critic": [...]}``), parameter by parameter in the order of
        ``parameter_groups[name]``: what ``update_targets`` moves each towards. Seeds trained together move
        the stacked copies at once by it."""

    @property
    @optional
    def with_actor(self) -> bool:
        """Whether to compute the actor's term (TD3's algorithm turns it off on the steps it does not move it)."""

    @property
    @optional
    def batchable(self) -> bool:
        """Whether its forward may run under ``torch.vmap`` with each seed's parameters swapped in (seeds trained
        together): no ``.item()`` and no state of its own changed per minibatch."""

    @optional
    def update_targets(self, tau: float) -> None:
        """``target = (1 - tau) target + tau online``; an off-policy loss defines it or declares ``no_targets``."""

    @property
    @optional
    def no_targets(self) -> bool:
        """True for an off-policy loss that keeps no target networks (CrossQ's); one with neither is refused."""


class Transform(Protocol):
    """An env transform: a TorchRL ``Transform``."""

    in_keys: Any
    out_keys: Any

    def transform_observation_spec(self, observation_spec: Any) -> Any: ...


#: kind -> the protocol its components follow.
PROTOCOLS: dict[str, type] = {
    "env": Env, "algorithm": Algorithm, "estimator": Estimator, "logger": Logger, "network": Network,
    "replay_buffer": ReplayBuffer, "noise": Noise, "preprocessor": Preprocessor, "runner": Runner, "loss": Loss,
    "transform": Transform,
}


class ContractError(UserError):
    """A plugin's component that is not what its kind must be: the plugin's mistake, named as such."""


def conform(protocol: type, value: Any, what: str) -> Any:
    """``value`` if it has every required member of ``protocol``; else :class:`ContractError` naming ``what``
    (the component and its plugin) and the first member missing."""
    missing = [name for name, required in members(protocol).items() if required and not hasattr(value, name)]
    if missing:
        shown = "None" if value is None else f"a {type(value).__name__}"
        raise ContractError(f"{what} returned {shown} without '{missing[0]}', which every {protocol.__name__.lower()} "
                            f"must have ({protocol.__module__}.{protocol.__qualname__}); this is the plugin's "
                            f"mistake: tell its author")
    return value


def optional_name(member: Callable, protocol: type | None = None) -> str:
    """The attribute name of the optional ``member`` (of ``protocol``); a TypeError (rlplug's bug) for others."""
    function = member.fget if isinstance(member, property) else member
    if not getattr(function, "__rlplug_optional__", False) or (
            protocol is not None and not function.__qualname__.startswith(f"{protocol.__name__}.")):
        raise TypeError(f"{function.__qualname__} is not an optional member of "
                        f"{'a protocol' if protocol is None else f'the {protocol.__name__} protocol'}")
    return function.__name__


def capability(value: Any, member: Callable) -> Any:
    """The optional protocol ``member`` (``Collector.metrics``, say) of ``value``, bound, or None without it."""
    return getattr(value, optional_name(member), None)


def has_member(value: Any, member: Callable) -> bool:
    """Whether ``value`` has the optional protocol ``member`` (for members that may hold a false value)."""
    return hasattr(value, optional_name(member))


def checked_metrics(metrics: Any, what: str) -> dict[str, float]:
    """An update's metrics if they are a dict of plain numbers; else :class:`ContractError` naming ``what``."""
    if not isinstance(metrics, dict):
        raise ContractError(f"{what}: update() returned {type(metrics).__name__}, not a dict of metrics")
    for name, value in metrics.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise ContractError(one_line(f"{what}: update() returned the metric '{name}' as "
                                         f"{type(value).__name__} {value!r}; metrics must be plain numbers "
                                         f"(float(tensor) or tensor.item())"))
    return metrics
