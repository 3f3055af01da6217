"""Several learners (``runner.learners = N``): data-parallel training over Ray actors and torch.distributed.

Each learner is a Ray actor holding a copy of the algorithm built from the recipe, started from the training
process's state; the N copies join one ``torch.distributed`` process group (gloo on the CPU, NCCL on CUDA) at an
address learner 0 hands out. What a learner does with its data is its algorithm's
:class:`~rlplug.registry.protocols.DataParallel`: where it takes the whole batch (the kit's off-policy family),
each learner stores it in its own replay (so learner 0's, which a checkpoint keeps, is the run's whole replay)
and samples its share of each step's sample from it; otherwise (the on-policy family) the training process
splits the batch into N shards by env rows. Every learner runs the update's ``learn``, each gradient step being
:meth:`Learner.allreduced_step`: the copy's gradients on its share, ``torch.distributed.all_reduce`` of them
(their mean), ``apply_gradients``. The copies stay identical; learner 0 hands back its weights for the workers and
evaluation, and its whole state before a checkpoint.

A learner that dies (its process, or its node) cannot be replaced: its copy of the optimiser and replay are
gone. The run stops (:class:`~rlplug.errors.LearnerLost`), keeping its last checkpoint. Every wait on a
learner is bounded.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
from tensordict import TensorDictBase

from rlplug.core.process import prepare_process, seed_everything
from rlplug.errors import LearnerLost, UserError
from rlplug.plugins.runners.ray.cluster import one_line_of, ray_module
from rlplug.plugins.runners.ray.gradients import gradient_mode_problem

#: How long the learners have to start and join their process group (Ray finding room for them included).
START_TIMEOUT = 300.0
#: How long one update (or an answer) of the learners may take before the run stops.
UPDATE_TIMEOUT = 600.0
#: Once one learner failed, how long the others have to say why (a dead peer is named before its survivors).
FAILURE_GRACE = 5.0


def learners_problem(algorithm, learners: int, rows: int) -> str | None:
    """Why ``learners`` learners cannot train ``algorithm`` on batches of ``rows`` env rows; None where they
    can."""
    what = f"runner.learners = {learners}"
    problem = gradient_mode_problem(algorithm, what, "runner.learners = 1")
    if problem or algorithm.data_parallel(learners).whole_batch or rows % learners == 0:
        return problem
    return (f"{what}: a batch of {rows} env rows cannot be split evenly into {learners} shards; use a number of "
            f"learners that divides it, or more envs")


def mean_over_learners(gradients: TensorDictBase) -> None:
    """Every floating-point entry of ``gradients`` replaced, in place, by its mean over the process group: one
    ``all_reduce`` of them all flattened (gloo has no mean: a sum, divided). Counts (a batch-norm layer's batches
    seen, the same everywhere) stay."""
    import torch.distributed as dist

    tensors = [t for t in gradients.values(include_nested=True, leaves_only=True) if t.is_floating_point()]
    flat = torch.cat([t.reshape(-1) for t in tensors])
    dist.all_reduce(flat)
    flat /= dist.get_world_size()
    for tensor, part in zip(tensors, flat.split([t.numel() for t in tensors])):
        tensor.copy_(part.view_as(tensor))


@dataclass(frozen=True)
class LearnerSpec:
    """What a learner builds its copy of the algorithm from (pickled into the Ray actor)."""

    recipe: Any
    observation_spec: Any
    action_spec: Any
    learners: int
    #: the unit the training process rounded its update's frames to (``Algorithm.rounded_cadence``), or None
    cadence_unit: int | None = None

    @property
    def backend(self) -> str:
        return "nccl" if torch.device(self.recipe.run.device).type == "cuda" else "gloo"


class Learner:
    """One learner (a Ray actor): its copy of the algorithm, one member of the process group.

    ``replay``: an off-policy replay to use instead of the one the recipe builds (a picklable replay shared
    by the learners, sharded over Ray actors); its contents are left as they are.
    """

    def __init__(self, spec: LearnerSpec, rank: int, state: dict, replay=None):
        run = spec.recipe.run
        prepare_process(run.num_threads)
        seed_everything(run.seed + rank)  # minibatch orders may differ; the steps are averaged anyway
        algorithm = spec.recipe.algorithm.build(observation_spec=spec.observation_spec, action_spec=spec.action_spec,
                                                device=run.device, seed=run.seed + rank, total_frames=run.total_frames)
        algorithm.load_state_dict(state)
        if spec.cadence_unit is not None:  # as the training process's, which the recipe's cadence is not
            algorithm.rounded_cadence(spec.cadence_unit)
        if replay is not None:  # the workers write into it; the learners only sample
            replay.reseed(run.seed + rank)  # each learner's shares drawn apart, as one buffer's draws are
        self.parallel = algorithm.data_parallel(spec.learners)
        self.parallel.become_learner(replay)
        self.algorithm, self.spec, self.rank = algorithm, spec, rank
        self.allreduce_seconds, self.steps = 0.0, 0

    def address(self) -> str:
        """A TCP rendezvous for the process group on this learner's node (learner 0's)."""
        import ray

        with socket.socket() as probe:
            probe.bind(("", 0))
            port = probe.getsockname()[1]
        return f"tcp://{ray.util.get_node_ip_address()}:{port}"

    def join(self, address: str) -> None:
        import torch.distributed as dist

        dist.init_process_group(self.spec.backend, init_method=address, rank=self.rank,
                                world_size=self.spec.learners, timeout=timedelta(seconds=START_TIMEOUT))

    def allreduced_step(self, index: int) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """Gradient step ``index`` of the group: this learner's gradients on its share (:meth:`allreduced`)."""
        return self.allreduced(*self.parallel.gradients(index))

    def allreduced(self, gradients: TensorDictBase,
                   reported: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """This learner's ``gradients`` averaged over the learners and applied. What the loss reported (its total
        left out, as a local update reports) and the gradient norms."""
        started = time.perf_counter()
        mean_over_learners(gradients)
        self.allreduce_seconds += time.perf_counter() - started
        self.steps += 1
        reported.pop("loss", None)
        return reported, self.algorithm.apply_gradients(gradients)

    def update(self, shard: TensorDictBase, frames: int) -> dict[str, Any]:
        """The algorithm's update on ``shard`` (its shard of the batch, or the whole batch; ``frames``
        collected in it), every gradient step the group's; its metrics, ``allreduce_ms`` per step, and
        (learner 0) the new weights."""
        self.allreduce_seconds, self.steps = 0.0, 0
        algorithm = self.algorithm
        taken = self.parallel.take(shard.to(algorithm.device), algorithm.frames + frames)
        metrics = self.parallel.learn(frames, self.allreduced_step, {key: [value] for key, value in taken.items()})
        if self.steps:
            metrics["allreduce_ms"] = 1000 * self.allreduce_seconds / self.steps
        return {"metrics": metrics, "weights": algorithm.get_weights().to("cpu") if self.rank == 0 else None}

    def state(self) -> dict:
        """The algorithm's whole state (weights, optimiser, counters, replay), for a checkpoint."""
        return self.algorithm.state_dict()


class LearnerGroup:
    """The training process's side: the learners started (from the algorithm's state) at the first update,
    batches split among them, weights and state brought back, and a lost learner turned into one line."""

    def __init__(self, runner, recipe, env, algorithm, replay=None, cadence_unit: int | None = None):
        self.runner, self.replay = runner, replay
        self.parallel = algorithm.data_parallel(runner.learners)
        self.spec = LearnerSpec(recipe, env.observation_spec, env.action_spec, runner.learners, cadence_unit)
        self.actors: list[Any] = []

    def start(self, algorithm) -> None:
        ray = ray_module()
        options = self.runner.learner_options()
        if self.spec.backend == "nccl":  # a CUDA run: each learner on a GPU of its own unless the recipe says
            options.setdefault("num_gpus", 1)
        remote = ray.remote(Learner).options(**options)
        state = ray.put(algorithm.state_dict())
        self.actors = [remote.remote(self.spec, rank, state, self.replay) for rank in range(self.spec.learners)]
        address = self.answers([self.actors[0].address.remote()], START_TIMEOUT, "while starting")[0]
        self.answers([actor.join.remote(address) for actor in self.actors], START_TIMEOUT, "while starting")

    def update(self, algorithm, batch: TensorDictBase) -> dict[str, float]:
        """One update on the learners; the training process's algorithm counts the frames, follows its
        schedules (its workers' exploration) and takes learner 0's weights."""
        if not self.actors:
            self.start(algorithm)
        ray = ray_module()
        frames = batch.numel()
        if self.parallel.whole_batch:  # one object in Ray's store for all: each learner's replay is whole
            shards = [ray.put(batch.cpu())] * self.spec.learners
        else:  # by env rows, which keeps each env's steps together for the estimators
            shards = [ray.put(shard.cpu()) for shard in batch.chunk(self.spec.learners, dim=0)]
        answers = self.answers([actor.update.remote(shard, frames) for actor, shard in zip(self.actors, shards)],
                               UPDATE_TIMEOUT, "during an update")
        self.parallel.follow(frames)
        algorithm.set_weights(answers[0]["weights"])
        metrics = dict(answers[0]["metrics"])
        times = [answer["metrics"]["allreduce_ms"] for answer in answers if "allreduce_ms" in answer["metrics"]]
        if times:
            metrics["allreduce_ms"] = sum(times) / len(times)
        metrics["learners"] = float(self.spec.learners)
        return metrics

    def fetch_state(self, algorithm) -> None:
        """``algorithm`` takes learner 0's whole state (before a checkpoint, or when the learners stop)."""
        if self.actors:
            algorithm.load_state_dict(self.answers([self.actors[0].state.remote()], UPDATE_TIMEOUT,
                                                   "while handing in its state")[0])

    def answers(self, refs: list, timeout: float, doing: str) -> list:
        """What each call answered, in order; a learner that died, failed or did not answer within ``timeout``
        seconds stops the run (:meth:`lost`)."""
        ray = ray_module()
        deadline = time.monotonic() + timeout
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1, timeout=max(0.0, deadline - time.monotonic()))
            if not ready:
                rank = refs.index(pending[0])
                self.lost(f"Ray learner {rank} did not answer within {timeout:g} s {doing}", None)
            try:
                ray.get(ready[0], timeout=0)
            except ray.exceptions.RayError:
                self.failed(refs, doing)
        return ray.get(refs, timeout=0)

    def failed(self, refs: list, doing: str) -> None:
        """A learner failed: the one whose actor died is named (its survivors fail after it, their peer gone)."""
        ray = ray_module()
        ray.wait(refs, num_returns=len(refs), timeout=FAILURE_GRACE)
        errors: list[tuple[int, Exception]] = []
        for rank, ref in enumerate(refs):
            try:
                ray.get(ref, timeout=0)
            except ray.exceptions.RayActorError as error:
                errors.insert(0, (rank, error))
            except Exception as error:  # a remote exception, or an answer not ready: each says why in its text
                errors.append((rank, error))
        rank, cause = next((e for e in errors if not isinstance(e[1], ray.exceptions.GetTimeoutError)), errors[0])
        self.lost(f"Ray learner {rank} was lost {doing} ({one_line_of(cause)}); a learner cannot be replaced "
                  f"without the run's exact state", cause)

    def lost(self, message: str, cause: Exception | None):
        self.stop()
        raise LearnerLost(message, path="runner.learners") from cause

    def stop(self, algorithm=None) -> None:
        """The learners ended (``algorithm``, where given, takes their state first: a later update starts them
        again from it)."""
        if algorithm is not None:
            try:
                self.fetch_state(algorithm)
            except UserError:  # lost meanwhile: the training process keeps what it has
                pass
        ray = ray_module()
        actors, self.actors = self.actors, []
        for actor in actors:
            ray.kill(actor)
