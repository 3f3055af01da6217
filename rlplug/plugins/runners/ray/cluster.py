"""Connecting to Ray (a local instance for the run, or a cluster) and checking it has what the workers ask
for. ``runner`` is the recipe's :class:`~rlplug.plugins.runners.ray.runner.RayRunner`."""

from __future__ import annotations

import logging
import math
import os
import warnings
from typing import Any

from rlplug.errors import RlplugWarning, UserError


def ray_module():
    """``ray``, or the one-line error that says how to get it."""
    try:
        import ray
    except ImportError:
        raise UserError('the ray runner needs Ray: pip install "rlplug[ray]" (or pip install ray)',
                        path="runner.use") from None
    return ray


def lost_errors() -> tuple[type[Exception], ...]:
    """What a call to a worker raises when the worker or its node is gone (restarting, dead, or its node lost
    with the rollout it had stored there)."""
    exceptions = ray_module().exceptions
    return exceptions.RayActorError, exceptions.ObjectLostError, exceptions.NodeDiedError


#: Where Ray logs, at each local instance it starts, that it turned token authentication on by itself: true of a
#: run's own instance too, and nothing for the user to do, so the line is not shown (Ray's other log lines are).
TOKEN_NOTE_LOGGER = "ray._private.authentication.authentication_token_setup"


def without_token_note(record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith("Token authentication is enabled for this Ray cluster")


def connect_ray(runner) -> bool:
    """Connect to the runner's Ray cluster, or start a local instance; True when this call started Ray.

    A Ray already initialised in this process (a test fixture, a user's own ``ray.init``) is used as it is.
    """
    ray = ray_module()
    if ray.is_initialized():
        return False
    # log_to_driver off: workers report failures as exceptions; their log lines (and Ray's notes on tasks retried
    # after a restart) would only clutter the console
    options = dict(include_dashboard=False, logging_level=logging.WARNING, log_to_driver=False)
    if runner.address is None:
        # "local": a new instance for this run, never a cluster that RAY_ADDRESS or 'ray start' points at; enough
        # logical CPUs for the workers asked for, even on a smaller machine (oversubscribed rather than stuck)
        needed = math.ceil(sum(options["num_cpus"] * count for _, count, options, _ in actor_groups(runner)))
        check_local_processes(runner)
        logging.getLogger(TOKEN_NOTE_LOGGER).addFilter(without_token_note)
        try:
            ray.init(address="local", num_cpus=max(os.cpu_count() or 1, needed), **options)
        except Exception as error:  # "The current node timed out during startup", a temp dir it cannot use...
            failed_start(ray)
            raise UserError(f"Ray could not start a local instance for this run ({first_line(error)}); check that "
                            f"Ray's temporary directory ({os.environ.get('RAY_TMPDIR') or '/tmp/ray'}: RAY_TMPDIR) "
                            f"is writable with space left and that memory is free ('ray stop' ends Ray processes "
                            f"left by earlier runs), then run again", path="runner") from None
        return True
    problem = unreachable(runner.address)
    if problem is None:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ray.init(address=runner.address, **options)
            return True
        except Exception as error:  # ConnectionError, ValueError, RuntimeError, grpc's: all the same to a user
            failed_start(ray)
            problem = first_line(error)
    raise UserError(f"cannot connect to the Ray cluster at '{runner.address}' ({problem}); start one with "
                    f"'ray start --head', or leave runner.address out for a local Ray instance",
                    path="runner.address")


def first_line(error: BaseException) -> str:
    """What ``ray.init`` raised, in a few words: its message's first sentence (Ray's go on for paragraphs)."""
    text = str(error).strip()
    return text.splitlines()[0].split(". ")[0][:200].rstrip(".") if text else type(error).__name__


def failed_start(ray) -> None:
    """Whatever a failed ``ray.init`` started, stopped (a later ``ray.init`` in this process starts afresh)."""
    try:
        ray.shutdown()
    except Exception:  # nothing was started, or it is already gone: nothing to stop
        pass


def check_local_processes(runner) -> None:
    """Before a local Ray instance starts the run's actors (workers, learners, storages), each a process of its
    own: refused where they cannot all fit in the memory available (each about what this process takes, its
    libraries, envs and networks loaded), which would swap or be killed after minutes of starting them; warned
    where they far outnumber the cores, as they then start one after another for minutes, saying nothing."""
    from rlplug.plugins.limits import available_memory, process_memory

    processes = sum(count for _, count, _, _ in actor_groups(runner))
    each, available = process_memory(), available_memory()
    if processes * each > available:
        raise UserError(f"a local Ray instance would start {processes} processes for {runner.workers} workers, "
                        f"each about {each / 2**30:.2g} GiB as this one, {processes * each / 2**30:.3g} GiB in all, "
                        f"more than the {available / 2**30:.3g} GiB of memory available; use fewer workers, or a "
                        f"Ray cluster (runner.address)", path="runner.workers")
    cores = os.cpu_count() or 1
    if processes > 4 * cores:
        warnings.warn(RlplugWarning(f"runner.workers = {runner.workers}: {processes} Ray processes on {cores} CPU "
                                    f"core(s) start one after another, so the first rollout may take minutes"),
                      stacklevel=2)


def unreachable(address: str, timeout: float = 5.0) -> str | None:
    """Why nothing answers at ``address`` (``host:port`` or ``ray://host:port``), or None; ``ray.init`` itself
    retries an address where nothing listens for minutes before it gives up."""
    import socket

    if address == "auto":
        return None
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            return None
    except OSError as error:
        return error.strerror or type(error).__name__


def actor_groups(runner) -> list[tuple[str, int, dict[str, Any], dict[str, float]]]:
    """The run's kinds of Ray actors: name, count, ``ray.remote`` options, and the recipe's resources table."""
    groups = [("workers", runner.workers, runner.remote_options(), runner.resources_per_worker)]
    if runner.learners > 1:
        groups.append(("learners", runner.learners, runner.learner_options(), runner.resources_per_learner))
    if runner.storages > 0:
        storage = runner.storage_options()
        groups.append(("storages", runner.storages, storage, {"num_cpus": storage["num_cpus"]}))
    return groups


def check_resources(runner) -> None:
    """A clear error instead of workers (or learners, or storages) waiting forever for resources the cluster does
    not have: each kind alone, then the CPUs of all of them together."""
    ray = ray_module()
    total = ray.cluster_resources()
    groups = actor_groups(runner)
    for what, count, options, asked in groups:
        wanted = {"CPU": options["num_cpus"] * count, "GPU": options.get("num_gpus", 0) * count,
                  **{k: v * count for k, v in options.get("resources", {}).items()}}
        for name, amount in wanted.items():
            if amount > total.get(name, 0) + 1e-9:
                if what == "storages":
                    raise UserError(f"{count} replay storages need {amount:g} CPU between them, and the Ray cluster "
                                    f"has {total.get(name, 0):g}; use fewer storages", path="runner.storages")
                raise UserError(f"{count} {what} with resources_per_{what[:-1]} {dict(asked)} need {amount:g} "
                                f"{name}, and the Ray cluster has {total.get(name, 0):g}; use fewer {what} or "
                                f"smaller resources_per_{what[:-1]}", path=f"runner.{what}")
    cpus = sum(options["num_cpus"] * count for _, count, options, _ in groups)
    if cpus > total.get("CPU", 0) + 1e-9:
        counts = ", ".join(f"{count} {what}" for what, count, _, _ in groups)
        raise UserError(f"{counts} need {cpus:g} CPU together, and the Ray cluster has {total.get('CPU', 0):g}; "
                        f"use fewer workers, or a smaller resources_per_worker", path="runner.workers")


def last_line_of(error: BaseException) -> str:
    """The last line of a remote traceback: the exception the worker raised."""
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else type(error).__name__


def one_line_of(error: BaseException) -> str:
    """What a Ray error says in one line: the line giving the cause where it has one ("The actor died because
    its node has died. Node Id: ..."), its first line otherwise, without the full stop."""
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    line = next((line for line in lines if " because " in line), lines[0] if lines else type(error).__name__)
    return line[:300].rstrip(".")


def node_number(ray) -> int:
    """The Ray node this process runs on, as a number a rollout can carry (its id's first 60 bits); 0 outside
    Ray."""
    try:
        return int(ray.get_runtime_context().get_node_id()[:15], 16)
    except (RuntimeError, AssertionError, ValueError):
        return 0
