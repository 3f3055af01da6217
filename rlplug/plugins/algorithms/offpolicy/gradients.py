"""pytorchrl's gradient interface for the off-policy family, what Ray's gradient workers call: the weights a gradient
depends on, the gradients of one step computed in one place (:meth:`GradientsInterface.compute_gradients`) and
applied in another (:meth:`GradientsInterface.apply_gradients`), through the same code as a local gradient step."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from rlplug.errors import UserError
from rlplug.plugins.algorithms.offpolicy.parts import Learners


class GradientsInterface:
    """Mixed into :class:`~rlplug.plugins.algorithms.offpolicy.base.OffPolicy`, whose attributes it reads."""

    loss_module: Any
    learners: Learners
    preprocessor: Any
    steps: int
    pending: list[str]
    statistics_keys: list[str]
    update_targets: Callable[[float], None] | None

    def backward(self, sample: TensorDictBase) -> TensorDictBase:
        raise NotImplementedError

    def moves_targets(self) -> bool:
        raise NotImplementedError

    @property
    def tau(self) -> float:
        raise NotImplementedError

    def get_weights(self) -> TensorDictBase:
        """Everything a gradient depends on: the loss's state (networks, target copies, the entropy
        coefficient, batch-norm statistics), the observation preprocessor's, and the gradient steps taken (which
        say where TD3's delayed actor steps); a copy built from the same recipe takes it with :meth:`set_weights`."""
        state = {f"loss.{key}": value for key, value in self.loss_module.state_dict().items()}
        if self.preprocessor is not None:
            state.update({f"preprocessor.{key}": value for key, value in self.preprocessor.state_dict().items()})
        state["steps"] = torch.tensor(self.steps)
        return TensorDict({key: value.detach() for key, value in state.items()}, []).consolidate()

    def set_weights(self, weights: TensorDictBase) -> None:
        """Put in what :meth:`get_weights` gave (in place: the learners keep stepping the same tensors)."""
        def part(prefix: str) -> dict[str, torch.Tensor]:
            return {key[len(prefix):]: value for key, value in weights.items() if key.startswith(prefix)}

        self.loss_module.load_state_dict(part("loss."))
        if self.preprocessor is not None:
            self.preprocessor.load_state_dict(part("preprocessor."))
        self.steps = int(weights.get("steps"))

    def compute_gradients(self, batch: TensorDictBase,
                          grads_to_cpu: bool = True) -> tuple[TensorDictBase, dict[str, torch.Tensor]]:
        """The gradients of one gradient step on ``batch`` (a replay sample, as :meth:`samples` gives) for every
        learner that steps now, ``{learner: {index: gradient}}`` in :attr:`Learners.groups` order (and, under
        ``statistics``, the batch-norm statistics the pass moved), on the CPU where asked (to travel between
        processes), and what the loss reports (scalars). Nothing steps: the gradients stay in place too, for
        ``apply_gradients()``."""
        if self.learners.scaler is not None:
            raise UserError("float16 mixed precision scales its gradients where it steps them, so they cannot be "
                            "computed in one place and applied in another; set it to false",
                            path="algorithm.mixed_precision")
        out = self.backward(batch)
        gradients = TensorDict({name: {str(i): g.detach().clone() for i, g in enumerate(self.learners.gradients(name))}
                                for name in self.pending}, [])
        if self.statistics_keys:
            state = self.loss_module.state_dict()
            gradients["statistics"] = {key: state[key].clone() for key in self.statistics_keys}
        reported = {key: value.detach() for key, value in out.items() if value.numel() == 1}
        if grads_to_cpu:
            return gradients.to("cpu"), {key: value.cpu() for key, value in reported.items()}
        return gradients, reported

    def apply_gradients(self, gradients: TensorDictBase | None = None) -> dict[str, torch.Tensor]:
        """One gradient step with ``gradients`` (:meth:`compute_gradients`'s, from anywhere; None: those the last
        :meth:`compute_gradients` or :meth:`backward` left in place): each learner in them clipped and stepped,
        then the targets moved exactly as in a local step, and the step counted. Each learner's gradient norm
        before clipping (``grad_norm_NAME``, when clipping)."""
        if gradients is not None:
            if "statistics" in gradients.keys():
                self.loss_module.load_state_dict(gradients.get("statistics").to_dict(), strict=False)
            self.pending = [name for name in self.learners.groups if name in gradients.keys()]
            for name in self.pending:
                group = gradients.get(name)
                self.learners.set_gradients(name, [group.get(str(i)) for i in range(len(group.keys()))])
        if not self.pending:
            raise RuntimeError("apply_gradients() with no gradients to apply: compute_gradients first, or pass them")
        norms = self.learners.clip_and_step(self.pending)
        self.pending = []
        if self.update_targets is not None and self.moves_targets():
            self.update_targets(self.tau)
        self.steps += 1
        return {f"grad_norm_{name}": norm for name, norm in norms.items() if norm is not None}
