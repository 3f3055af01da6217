"""pytorchrl's gradient interface for the on-policy family, what Ray's gradient workers call: every trained
parameter keyed by position, the gradient of one minibatch computed in one place
(:meth:`GradientsInterface.compute_gradients`) and applied in another (:meth:`GradientsInterface.apply_gradients`)."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from rlplug.core.training import FlatParameters, clip_and_step


class GradientsInterface:
    """Mixed into :class:`~rlplug.plugins.algorithms.onpolicy.base.OnPolicy`, whose attributes it reads."""

    parameters: list[torch.nn.Parameter]
    trained: Any
    optimiser: torch.optim.Optimizer
    config: Any

    def loss(self, minibatch: TensorDictBase, diagnostics: bool) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        raise NotImplementedError

    def get_weights(self) -> TensorDictBase:
        """Every trained parameter (policy and critic, a shared body once) keyed by position: copies built
        from one recipe list their parameters in the same order."""
        return TensorDict({str(i): p.detach() for i, p in enumerate(self.parameters)}, []).consolidate()

    @torch.no_grad()
    def set_weights(self, weights: TensorDictBase) -> None:
        for i, p in enumerate(self.parameters):
            p.copy_(weights.get(str(i)))

    def compute_gradients(self, batch: TensorDictBase,
                          grads_to_cpu: bool = True) -> tuple[TensorDictBase, dict[str, torch.Tensor]]:
        """The gradient of the loss on one minibatch (as :meth:`prepare` makes them) for every parameter, keyed as
        :meth:`get_weights`, on the CPU where asked (to travel between processes), and every scalar the loss
        reports, with the total under ``loss``. Nothing steps: the gradients stay in place too, for
        ``apply_gradients()``."""
        total, reported = self.loss(batch, diagnostics=True)
        self.zero_grad()
        total.backward()
        gradients = TensorDict({str(i): p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p)
                                for i, p in enumerate(self.parameters)}, [])
        reported = {"loss": total.detach(), **reported}
        if grads_to_cpu:
            return gradients.to("cpu"), {key: value.cpu() for key, value in reported.items()}
        return gradients, reported

    def apply_gradients(self, gradients: TensorDictBase | None = None) -> dict[str, torch.Tensor]:
        """The optimiser step with ``gradients`` (:meth:`compute_gradients`'s, from anywhere; None: those the last
        :meth:`compute_gradients` left in place), the global norm clipped as in :meth:`update`; that norm before
        clipping as ``grad_norm`` (when clipping)."""
        if gradients is not None:
            self.zero_grad()  # every parameter then has a gradient tensor (a view of the flat one, where flat)
            with torch.no_grad():
                for i, p in enumerate(self.parameters):
                    grad = p.grad
                    if grad is None:
                        raise RuntimeError(f"parameter {i} has no gradient tensor after zero_grad")
                    grad.copy_(gradients.get(str(i)))
        norm = clip_and_step(self.optimiser, self.trained, self.config.max_grad_norm)
        return {} if norm is None else {"grad_norm": norm}

    def zero_grad(self) -> None:
        if isinstance(self.trained, FlatParameters):
            self.trained.zero_grad()
        else:
            for p in self.parameters:
                p.grad = torch.zeros_like(p)
