"""The ``ray`` runner's options (the recipe's ``[runner]`` table) and the collector it gives a run."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlplug.plugins.runners.ray.collection import RayCollection

#: the CPU share a replay storage asks Ray for: enough for Ray to spread storages, little beside a worker's CPU
STORAGE_CPUS = 0.01


@dataclass(frozen=True)
class RayRunner:
    """``workers`` Ray actors step envs with the learner's latest weights; the learner stays in this process, or
    ``learners`` Ray actors learn together (:mod:`.learners`)."""

    workers: int = 2
    address: str | None = None
    resources_per_worker: dict[str, float] = field(default_factory=lambda: {"num_cpus": 1.0})
    mode: str = "experience"
    max_restarts: int = 3
    #: replay storages (Ray actors) for off-policy algorithms; 0: the replay in the learner's process
    storages: int = 0
    learners: int = 1
    resources_per_learner: dict[str, float] = field(default_factory=lambda: {"num_cpus": 1.0})

    def remote_options(self) -> dict[str, Any]:
        """``ray.remote`` options for one worker actor: its resources, restart policy and placement."""
        options = ray_resources(self.resources_per_worker)
        # Ray restarts a worker that dies; the rollout it was collecting is lost, and RayCollection asks again.
        # SPREAD: workers over as many nodes as have room, so that a lost node takes as few of them as it can
        # and envs do not crowd one machine while another idles (a restarted worker goes wherever there is room).
        options.update(max_restarts=self.max_restarts, max_task_retries=0, scheduling_strategy="SPREAD")
        return options

    def storage_options(self) -> dict[str, Any]:
        """``ray.remote`` options for one replay storage: a sliver of a CPU (it holds memory and answers calls,
        beside the workers' envs), restarted as a worker is, spread over the nodes as the workers are. Ray spreads
        only actors that ask for some resource: actors asking for none were placed on one node most of the time
        (ray-project/ray#27577; 3 runs of 4 in this repository's two-node test), and one lost node took every
        storage."""
        return {"num_cpus": STORAGE_CPUS, "max_restarts": self.max_restarts, "max_task_retries": 0,
                "scheduling_strategy": "SPREAD"}

    def learner_options(self) -> dict[str, Any]:
        """``ray.remote`` options for one learner actor (``learners`` > 1): never restarted (a new one would
        not have the lost one's state), spread over the nodes as the workers are."""
        options = ray_resources(self.resources_per_learner)
        options.update(max_restarts=0, max_task_retries=0, scheduling_strategy="SPREAD")
        return options

    def collector(self, env, policy, frames_per_batch: int, seed: int, *, recipe=None, algorithm=None,
                  **_context) -> RayCollection:
        if recipe is None:
            raise TypeError("the ray runner builds the recipe's env on each worker: pass recipe=")
        return RayCollection(self, env, policy, frames_per_batch, seed, recipe=recipe, algorithm=algorithm)


def ray_resources(resources: dict[str, float]) -> dict[str, Any]:
    """A recipe's resources table as ``ray.remote`` options (custom resources by name under ``resources``)."""
    known = {"num_cpus", "num_gpus", "memory"}
    options: dict[str, Any] = {k: v for k, v in resources.items() if k in known}
    options.setdefault("num_cpus", 1.0)
    if "memory" in options:
        options["memory"] = int(options["memory"])
    custom = {k: float(v) for k, v in resources.items() if k not in known}
    if custom:
        options["resources"] = custom
    return options
