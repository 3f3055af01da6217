"""Seeds of one on-policy recipe learning together (``rlplug run --seeds --batched``).

Each seed's algorithm is built as its own run builds it and stays the source of truth: its estimates
(:meth:`OnPolicy.prepare`, on its own batch), its learning-rate and clip schedules, its loss. What is done at
once is the minibatch step: the first seed's loss module is called through ``torch.vmap`` with every seed's
parameters swapped in (:class:`rlplug.core.stacked.StackedParameters`), the summed losses take one backward
pass (each seed's gradient is that of its own loss), each seed's gradient norm is clipped on its own, and one
optimiser over the stack steps, element by element, as each seed's own would. Each seed draws its minibatch
order from its own generator.
"""

from __future__ import annotations

from dataclasses import replace

import torch
from tensordict import TensorDict

from rlplug.core.acting import TorchArrayActor
from rlplug.core.stacked import StackedParameters, one_flat_parameter, stacked_optimiser, store_rows
from rlplug.core.training import set_learning_rate, updates_stopped
from rlplug.errors import UserError
from rlplug.registry import protocols


class OnPolicyTogether:
    """A :class:`rlplug.registry.protocols.BatchedUpdate` of :class:`OnPolicy` copies, one per seed."""

    def __init__(self, algorithms: list, seeds: list[int]):
        first = algorithms[0]
        if not protocols.capability(first.loss_module, protocols.Loss.batchable):
            raise UserError(f"{first.config.loss.title} cannot compute several seeds at once (it does not declare "
                            f"'batchable', or it adapts a coefficient after each minibatch); run --seeds without "
                            f"--batched", path="algorithm.loss")
        if not all(one_flat_parameter(a.optimiser, a.trained) for a in algorithms):
            raise UserError("the networks' parameters are not of one dtype and device, so the seeds cannot be "
                            "stacked; run --seeds without --batched", path="algorithm")
        self.active = list(algorithms)
        self.generators = [torch.Generator().manual_seed(seed) for seed in seeds]
        self.diagnostics = True
        self._stack()

    def _stack(self) -> None:
        """The active seeds' parameters and optimiser states stacked, their modules' views bound to the stack."""
        template = self.active[0]
        self.parameters = StackedParameters([a.trained for a in self.active])
        self.optimiser = stacked_optimiser([a.optimiser for a in self.active], self.parameters.stacked)
        self._loss = self.parameters.vmapped(template.loss_module, template.parameters,
                                             lambda minibatch: self._seed_loss(template, minibatch),
                                             randomness="different")
        view = template.actor
        distribution_parameters = self.parameters.vmapped(view.params_module, template.parameters,
                                                          view.params_module)
        stacked_view = replace(view, params_module=lambda observation: distribution_parameters(
            self.parameters.leaves(trained=False), observation))
        self._actor = TorchArrayActor(stacked_view, self.parameters.stacked.device)

    def _seed_loss(self, template, minibatch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict]:
        length = next(iter(minibatch.values())).shape[0]
        return template.loss(TensorDict(minibatch, batch_size=[length]), self.diagnostics)

    def actor(self) -> TorchArrayActor:
        return self._actor

    def update(self, batches: list) -> list[dict[str, float]]:
        """Each seed's update of :meth:`OnPolicy.update`, every minibatch step taken for all seeds at once."""
        lrs = [a.start_update(batch.numel()) for a, batch in zip(self.active, batches)]
        set_learning_rate(self.optimiser, lrs[0])  # frame-based schedules: the same for every seed
        prepared = [a.prepare(batch, a.minibatch_size) for a, batch in zip(self.active, batches)]
        data = {key: torch.stack([p.data[key] for p in prepared]) for key in prepared[0].data}
        length, size, steps = prepared[0].length, prepared[0].minibatch_size, prepared[0].steps
        config = self.active[0].config
        rows = torch.arange(len(self.active)).unsqueeze(1)
        sums: dict[str, torch.Tensor] = {}
        for epoch in range(config.epochs):
            if updates_stopped():  # a signal: the update ends at the next step, not after every epoch
                break
            orders = None if size >= length else torch.stack(
                [torch.randperm(length, generator=g) for g in self.generators]).split(size, dim=1)
            self.diagnostics = epoch == config.epochs - 1  # the last epoch reports, as OnPolicy.learn
            for index in range(steps):
                if updates_stopped():
                    break
                minibatch = data if orders is None else {k: v[rows, orders[index]] for k, v in data.items()}
                totals, reported = self._loss(self.parameters.leaves(), minibatch)
                grad = self.parameters.stacked.grad
                if grad is None:  # the stack keeps a gradient from its making on
                    raise RuntimeError("the seeds' stacked parameters have no gradient to zero")
                grad.zero_()
                totals.sum().backward()  # seeds share no parameter: each gets its own loss's gradient
                norms = self.parameters.clip_and_step(self.optimiser, config.max_grad_norm)
                if self.diagnostics:
                    reported = {**({"grad_norm": norms} if config.max_grad_norm else {}), **reported}
                    for key, value in reported.items():
                        value = value.detach().float().reshape(len(self.active))
                        sums[key] = sums[key] + value if key in sums else value
        means = {key: (total / steps).tolist() for key, total in sums.items()}
        return [{**{key: values[i] for key, values in means.items()}, "lr": lr, **algorithm.extra_metrics(),
                 **({"explained_variance": p.explained_variance} if p.explained_variance is not None else {})}
                for i, (algorithm, lr, p) in enumerate(zip(self.active, lrs, prepared))]

    def finite(self) -> list[bool]:
        return self.parameters.finite()

    def keep(self, indices: list[int]) -> None:
        self.sync()
        self.active = [self.active[i] for i in indices]
        self.generators = [self.generators[i] for i in indices]
        if self.active:
            self._stack()

    def sync(self) -> None:
        store_rows(self.optimiser, self.parameters.stacked, [a.optimiser for a in self.active])

    def restart(self, seeds: list[int]) -> None:
        for generator, seed in zip(self.generators, seeds):
            generator.manual_seed(seed)
