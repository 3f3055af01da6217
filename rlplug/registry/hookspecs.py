"""The hooks a plugin implements: one per kind of component, each handed a ``register`` callback.

``register(name, factory, *, summary=None, aliases=())`` adds one component. ``factory`` is called with the
recipe table's keys (all but ``use``) as keyword arguments; its signature and annotations are the component's
parameter schema (see :mod:`rlplug.registry.schema`), checked when the plugin registers. Parameters named
after context names (:data:`CONTEXT`, described in :data:`rlplug.registry.schema.CONTEXT_NAMES`) are filled in
by rlplug, not by the recipe. What a factory returns must follow its kind's protocol
(:mod:`rlplug.registry.protocols`), checked when it is built.
"""

from __future__ import annotations

import pluggy

hookspec = pluggy.HookspecMarker("rlplug")
hookimpl = pluggy.HookimplMarker("rlplug")


@hookspec
def rlplug_register_envs(register):
    """Register env factories; each returns a ``torchrl.envs.EnvBase``, batched or not
    (:class:`~rlplug.registry.protocols.Env`: optionally running statistics and an array step).

    Context: ``device``.
    """


@hookspec
def rlplug_register_algorithms(register):
    """Register algorithm factories; each returns an object with ``policy`` (a TensorDictModule that
    writes ``action``), ``frames_per_batch``, ``update(batch) -> dict[str, float]``, ``state_dict()`` and
    ``load_state_dict()`` (plain tensors and numbers: checkpoints load with ``weights_only=True``)
    (:class:`~rlplug.registry.protocols.Algorithm`).

    Optional: ``parameters`` (the list checked for NaN after each update; default: the policy's);
    ``networks()`` (by name, for loggers that record weights); ``asynchronous = True`` when it learns from
    experience collected with older weights (IMPALA: the ``ray`` runner then hands it rollouts first come,
    first served); and, for the ``ray`` runner's gradient workers, pytorchrl's protocol: ``get_weights()``,
    ``set_weights(weights)``, ``compute_gradients(batch, grads_to_cpu=True)``, ``apply_gradients(gradients=None)``
    (the built-in families' are in ``OnPolicy`` and ``OffPolicy``, :mod:`rlplug.plugins.algorithms`).

    Optional too, pytorchrl's acting half: ``acting_step(obs, rhs, done, deterministic=False)`` and the read-only
    ``gamma``, ``num_epochs``, ``mini_batch_size``, ``num_mini_batch``, ``num_test_episodes``, ``start_steps``,
    ``test_every``, ``update_every`` (every built-in algorithm's: :mod:`rlplug.plugins.algorithms.acting`).

    Context: ``observation_spec``, ``action_spec``, ``device``, ``seed``, ``total_frames``, ``run_dir``,
    ``eval_episodes``, ``eval_every_frames``.
    """


@hookspec
def rlplug_register_estimators(register):
    """Register advantage / value-target estimator factories; each returns a TensorDict module
    (:class:`~rlplug.registry.protocols.Estimator`).

    It reads ``state_value``, ``("next", "state_value")``, ``("next", "reward")``, ``("next", "done")``
    and ``("next", "terminated")`` from a TensorDict shaped ``[*batch, time]`` (values ``[*batch, time,
    1]``) and writes ``advantage`` and/or ``value_target``. ``done`` cuts the lambda trace; only
    ``terminated`` drops the bootstrap value.

    Context: none (the built-in algorithms build estimators without context).
    """


@hookspec
def rlplug_register_loggers(register):
    """Register logger factories; each returns an object with ``log(metrics, frames)`` and
    ``close(summary)``, and optionally ``log_video(path, frames)`` (:class:`~rlplug.registry.protocols.Logger`).

    Context: ``run_dir``, ``total_frames``, ``frames``, ``networks``, ``log_every_frames``.
    """


@hookspec
def rlplug_register_networks(register):
    """Register network factories; each returns a TensorDictModule for the requested ``role``
    (:class:`~rlplug.registry.protocols.Network`): 'policy', 'value', 'q_value', 'q_values' or
    'deterministic_policy'. :mod:`rlplug.networks` has the heads that turn a plain torch module into one.

    Context: ``observation_spec``, ``action_spec``, ``role``, ``device``.
    """


@hookspec
def rlplug_register_replay_buffers(register):
    """Register replay buffer factories; each returns an object with ``extend(batch)`` (a TensorDict of
    transitions, any batch shape: flattened), ``sample(batch_size) -> TensorDict``, ``__len__``,
    ``state_dict()`` / ``load_state_dict()`` (plain tensors and numbers), and, for prioritised buffers,
    ``update_priority(index, priority)`` with the ``index`` key of a sample (which then also holds ``weight``)
    (:class:`~rlplug.registry.protocols.ReplayBuffer`).

    Context: ``device``, ``seed``, ``run_dir``, ``total_frames``.
    """


@hookspec
def rlplug_register_noises(register):
    """Register exploration noise factories; each returns a TensorDict module that adds noise to ``action``
    while the exploration type is random (not in deterministic evaluation) and keeps the action within
    the spec, with ``step(frames)`` advancing its schedule and ``state_dict()`` / ``load_state_dict()``
    (:class:`~rlplug.registry.protocols.Noise`).

    Context: ``action_spec``, ``device``, ``total_frames``.
    """


@hookspec
def rlplug_register_preprocessors(register):
    """Register preprocessor factories (observation scalers and the like); each returns an ``nn.Module``
    mapping a tensor to a tensor, updating its statistics only in ``train()`` mode, with its statistics in
    ``state_dict()`` (:class:`~rlplug.registry.protocols.Preprocessor`).

    Context: ``observation_spec``, ``device``.
    """


@hookspec
def rlplug_register_runners(register):
    """Register runner factories: how a run collects its experience, in this process (``local``) or on
    workers elsewhere (``ray``). A runner's ``collector(env, policy, frames_per_batch, seed, *, recipe,
    algorithm)`` returns an object with ``collect() -> TensorDict`` (``[envs, time]``, TorchRL's layout),
    ``tracker`` (episode returns), ``restart(seed)``, ``sync_weights()`` (after each update) and
    ``shutdown()``; ``recipe`` is there for workers that build their own envs, ``algorithm`` for what they
    need to know of it (:class:`~rlplug.registry.protocols.Runner`, :class:`~rlplug.registry.protocols.Collector`).

    Optional on the collector: ``metrics() -> dict`` (logged with each update: policy lag, restarts...),
    ``statistics()`` / ``load_statistics(state)`` (the envs' running normalisation, for checkpoints) and
    ``update(algorithm, batch) -> dict`` (the update done its own way: the gradient workers).

    Context: ``device``, ``seed``.
    """


@hookspec
def rlplug_register_losses(register):
    """Register loss factories; each returns a TorchRL ``LossModule``: a TensorDict in, a TensorDict of
    ``loss_*`` terms (whose sum the algorithm minimises) and diagnostics out
    (:class:`~rlplug.registry.protocols.Loss`). A factory may say which algorithms it fits with a ``serves``
    attribute (a tuple of algorithm names), checked when a recipe names it. The ``networks`` of the off-policy
    algorithms are typed in :mod:`rlplug.registry.networks`.

    Context: ``networks``, ``settings``, ``observation_spec``, ``action_spec``, ``device``.
    """


@hookspec
def rlplug_register_transforms(register):
    """Register env transform factories; each returns a TorchRL ``Transform``, applied in order to the
    recipe's env (``[[env.transforms]]``) through ``TransformedEnv``, for training and evaluation alike
    (:class:`~rlplug.registry.protocols.Transform`).

    Context: ``device``.
    """


@hookspec
def rlplug_register_callbacks(register):
    """Register callback factories; each returns an object told of a run's updates, evaluations and checkpoints
    (``on_update``, ``on_evaluation``, ``on_checkpoint``, each optional, each handed the run under way), which may
    log values of its own to every logger (``run.log(name, value)``) and stop the run cleanly (``run.stop()``)
    (:class:`~rlplug.registry.protocols.Callback`, :class:`~rlplug.registry.callbacks.CallbackRun`). A recipe
    lists them as ``[[callbacks]]``; ``rlplug.Agent.train(callbacks=[...])`` takes built ones.

    Context: ``run_dir``.
    """


@hookspec
def rlplug_register_intrinsic_rewards(register):
    """Register intrinsic reward factories (exploration bonuses: ``rnd``, ``re3``); each returns an object with
    ``rewards(batch)`` (one intrinsic reward per transition of a collected ``[envs, time]`` batch),
    ``learn(batch) -> dict`` (its own networks trained on the batch; its metrics), ``state_dict()`` and
    ``load_state_dict()`` (:class:`~rlplug.registry.protocols.Intrinsic`). A recipe names one in
    ``[algorithm.intrinsic]``; rlplug owns that table's ``coef``, ``schedule`` and ``decay`` (how much of it is
    added to the env's reward, and how that weight moves), so a factory declares only its own keys.

    Context: ``observation_spec``, ``action_spec``, ``device``, ``seed``.
    """


@hookspec
def rlplug_register_datasets(register):
    """Register dataset factories; each returns recorded experience for offline runs (a recipe's top-level
    ``[dataset]``): its transitions and the env it was recorded on (:class:`~rlplug.registry.protocols.Dataset`).
    A factory should read no more than the dataset's metadata: the run asks for the transitions when it builds.

    Context: none.
    """


#: kind name -> hook name, the single list of kinds.
HOOKS = {
    "env": "rlplug_register_envs",
    "algorithm": "rlplug_register_algorithms",
    "estimator": "rlplug_register_estimators",
    "logger": "rlplug_register_loggers",
    "network": "rlplug_register_networks",
    "replay_buffer": "rlplug_register_replay_buffers",
    "noise": "rlplug_register_noises",
    "preprocessor": "rlplug_register_preprocessors",
    "runner": "rlplug_register_runners",
    "loss": "rlplug_register_losses",
    "transform": "rlplug_register_transforms",
    "callback": "rlplug_register_callbacks",
    "intrinsic": "rlplug_register_intrinsic_rewards",
    "dataset": "rlplug_register_datasets",
}

#: kind name -> the context names the built-in run gives its factories (each hookspec's "Context:" line).
CONTEXT = {
    "env": ("device",),
    "algorithm": ("observation_spec", "action_spec", "device", "seed", "total_frames", "run_dir", "eval_episodes",
                  "eval_every_frames"),
    "estimator": (),
    "logger": ("run_dir", "total_frames", "frames", "networks", "log_every_frames"),
    "network": ("observation_spec", "action_spec", "role", "device"),
    "replay_buffer": ("device", "seed", "run_dir", "total_frames"),
    "noise": ("action_spec", "device", "total_frames"),
    "preprocessor": ("observation_spec", "device"),
    "runner": ("device", "seed"),
    "loss": ("networks", "settings", "observation_spec", "action_spec", "device"),
    "transform": ("device",),
    "callback": ("run_dir",),
    "intrinsic": ("observation_spec", "action_spec", "device", "seed"),
    "dataset": (),
}
