"""Runners: where a run's experience is collected, in this process (``local``) or on Ray workers (``ray``).
Factories import torch, TorchRL and Ray only when built, so listing and validating stay quick and work
without Ray installed. What a runner and the collector it gives must provide:
:class:`rlplug.registry.protocols.Runner`."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from rlplug.errors import UserError
from rlplug.registry.hookspecs import hookimpl
from rlplug.registry.schema import Check, Range

#: ``auto`` (the cluster this machine belongs to), ``ray://host:port`` (Ray Client) or ``host:port`` (a head node)
ADDRESS = re.compile(r"auto|ray://[^\s:/]+:\d{1,5}|[^\s:/]+:\d{1,5}")
RAY_OPTIONS = ("num_cpus", "num_gpus", "memory")


def address_problem(address: str) -> str | None:
    if ADDRESS.fullmatch(address):
        return None
    return (f"'{address}' is not a Ray address; use 'auto' (a cluster started with 'ray start'), "
            f"'ray://HOST:PORT' or 'HOST:PORT', or leave runner.address out for a local Ray instance")


def resources_problem(resources: dict) -> str | None:
    if resources.get("num_cpus", 1) <= 0 and not any(v > 0 for v in resources.values()):
        return "a worker needs some resource (num_cpus > 0, say)"
    return None


def make_local():
    """Collect in the training process (the default)."""
    from rlplug.plugins.runners.local import LocalRunner

    return LocalRunner()


def make_ray(
    #: remote collectors stepping envs (each a Ray actor, by default one CPU each)
    workers: Annotated[int, Range(ge=1)] = 2,
    #: unset: a local Ray instance started for the run (and stopped after it); "auto" or "ray://HOST:PORT" for
    #: an existing cluster, whose nodes the workers are spread over
    address: Annotated[str, Check(address_problem)] | None = None,
    #: Ray resources of each worker: num_cpus, num_gpus, memory (bytes) or custom resources by name;
    #: unset: { num_cpus = 1 }
    resources_per_worker: Annotated[dict[str, Annotated[float, Range(ge=0)]], Check(resources_problem)] | None = None,
    #: "experience": workers collect, the learner updates on their batches; "gradients": each worker also
    #: computes the update's gradients on its own batch and the learner averages and applies them
    mode: Literal["experience", "gradients"] = "experience",
    #: how often Ray restarts a worker that dies, alone or with its node (-1: always); the rollout it was
    #: collecting is collected again, and the worker_restarts metric counts the restarts; past that, the run
    #: stops with a checkpoint
    max_restarts: Annotated[int, Range(ge=-1)] = 3,
    #: off-policy algorithms: the replay kept in this many Ray actors (Ape-X's storages), spread over the nodes;
    #: worker i writes to storage i % storages and the learner samples from all of them as from one buffer of
    #: the recipe's kind and capacity; 0: the replay buffer in the learner's process
    storages: Annotated[int, Range(ge=0)] = 0,
    #: data-parallel learners (mode = "experience"): 1, the learner in the training process; N > 1, N Ray actors
    #: each holding a copy of the algorithm and learning from its share of every batch (split by env rows, or by
    #: steps off-policy), their gradients averaged with torch.distributed at every step; a learner lost stops
    #: the run, keeping its last checkpoint
    learners: Annotated[int, Range(ge=1, le=1024)] = 1,
    #: Ray resources of each learner (as resources_per_worker); unset: { num_cpus = 1 }
    resources_per_learner: Annotated[dict[str, Annotated[float, Range(ge=0)]], Check(resources_problem)] | None = None,
):
    """Collect on Ray workers (TorchRL's RayCollector), the learner in this process.

    With ``learners`` > 1 the update runs on that many Ray actors (torch.distributed: gloo on the CPU, NCCL on
    CUDA), the ``learners`` and ``allreduce_ms`` metrics say how many and what averaging gradients cost a step.
    Weights go to every worker after each update; the ``policy_lag``, ``weight_sync_ms`` and
    ``worker_restarts`` metrics say how fresh they were, ``worker_nodes`` over how many Ray nodes the workers
    ran; with ``storages``, ``storages``, ``storage_sizes`` and ``storage_restarts`` say where the replay is.
    Needs ``pip install "rlplug[ray]"``.
    """
    from rlplug.plugins.runners.ray.cluster import ray_module
    from rlplug.plugins.runners.ray.runner import RayRunner

    ray_module()  # a one-line error now, before anything is built, where Ray is not installed
    if storages > workers:
        raise UserError(f"{storages} storages for {workers} workers leaves a storage nobody writes to (worker i "
                        f"writes to storage i % storages); use at most {workers}", path="runner.storages")
    if storages and mode == "gradients":
        raise UserError("in mode = 'gradients' each worker keeps its own replay buffer; storages are for mode = "
                        "'experience' (or leave runner.storages out)", path="runner.storages")
    if learners > 1 and mode == "gradients":
        raise UserError(f"runner.learners = {learners} learns from the workers' experience, and in mode = "
                        f"'gradients' the workers are the learners; use mode = 'experience' or runner.learners = 1",
                        path="runner.learners")
    resources = dict(resources_per_worker) if resources_per_worker is not None else {"num_cpus": 1.0}
    learner_resources = dict(resources_per_learner) if resources_per_learner is not None else {"num_cpus": 1.0}
    return RayRunner(workers=workers, address=address, resources_per_worker=resources, mode=mode,
                     max_restarts=max_restarts, storages=storages, learners=learners,
                     resources_per_learner=learner_resources)


@hookimpl
def rlplug_register_runners(register):
    register("local", make_local)
    register("ray", make_ray)
