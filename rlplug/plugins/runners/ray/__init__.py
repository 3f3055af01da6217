"""The ``ray`` runner: experience collected on Ray workers, the learner in the training process.

``ray`` runs TorchRL's
:class:`~torchrl.collectors.distributed.RayCollector`: TorchRL creates the Ray actors, dispatches their
rollouts (synchronously, or first come, first served for asynchronous algorithms such as IMPALA) and pushes
weights to them. What runs inside each actor is :mod:`.worker`'s ``WorkerCollector``, a TorchRL ``BaseCollector``
around rlplug's own collector, so workers step their envs on the same fast road as a local run (TorchRL's
TensorDict-per-step collector costs more per step; BENCHMARKS.md). In gradient mode
(``mode = "gradients"``) the same actors also hold a copy of the algorithm and compute the update's gradients
on their own rollouts (:mod:`.gradients`). The runner knows an algorithm only by its protocol
(:class:`~rlplug.registry.protocols.Algorithm`): its ``data_parallel`` for gradient mode and learners, its
``replay_storage`` for replay storages, its ``rounded_cadence`` for an update's frames that do not split over the
workers.

Choices that differ from TorchRL's defaults, and why:

- Weights travel through Ray's object store (TorchRL's ``RayWeightUpdater``: one ``ray.put`` per update,
  a fire-and-forget call per worker, ordered before that worker's next rollout), not through TorchRL's newer
  ``RayWeightSyncScheme``, which joins the driver and workers in one fixed-size gloo process group that a
  restarted worker cannot rejoin. Worker restarts (``max_restarts``) are the point of the fault handling.
- Every pushed set of weights carries a version (the learner's update count); each rollout reports the
  version it was collected with, which gives the ``policy_lag`` metric, and its worker's process and Ray
  node, which give ``worker_restarts`` and ``worker_nodes``.
- Rollouts and weights cross processes as consolidated TensorDicts (one buffer): a third of the transfer
  time of a TensorDict of separate tensors.

The modules: :mod:`.runner` (the recipe's ``[runner]`` options), :mod:`.cluster` (connecting to Ray, resources),
:mod:`.worker` (what runs in each Ray actor), :mod:`.collection` (the learner's side: batches, weights,
restarts), :mod:`.gradients` (gradient mode), :mod:`.storages` (off-policy replay in Ray actors,
``storages = M``) and :mod:`.learners` (several learners, ``learners = N``: Ray actors in one torch.distributed
group).
"""
