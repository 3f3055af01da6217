"""n-step returns (Sutton 1988; the multi-step targets of Rainbow, Hessel et al. 2018) for the whole off-policy
family, written once where the replay's transitions are made, so a kit algorithm gets them as a built-in does.

With ``n_steps = n > 1`` the transition stored for step t holds ``r_t + gamma r_{t+1} + ... + gamma^(k-1)
r_{t+k-1}``, the observation after the last of those k rewards as ``("next", "observation")``, that step's
``terminated``, and ``steps_to_next_obs = k`` (``[N, 1]``); k is n unless an episode ends inside the window, where
the sum stops. The loss bootstraps with ``gamma ** k`` (rlplug's ``Sample.target``; TorchRL's value estimators and
``DistributionalDQNLoss`` read the same key), so a termination in the window ends the bootstrap and a truncation
(a time limit) bootstraps from the truncated step's own next observation with the matching power.

TorchRL's :class:`~torchrl.data.postprocs.MultiStep` makes the sums inside one ``[*envs, time]`` batch. It leaves
``terminated`` at the window's first step, so the window's last step's is carried through it under another name.
Across batches, each env's last ``n - 1`` steps are held back (:attr:`NStepReturns.tail`) and go in front of the
next batch, so that a window is whole however few steps an update collects; where the next batch does not go on
from them (its first observation is not their last next observation: the collector restarted its envs, at a
checkpoint) their windows end where the held steps end, k counting only those.
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.data.postprocs import MultiStep

from rlplug.core.masks import MASK

#: MultiStep gathers every ("next", ...) entry but the done flags; the window's last ``terminated`` rides as this
END_TERMINATED = "end_terminated"


class NStepReturns:
    """n-step transitions from consecutive ``[*envs, time]`` steps, each env's last ``n - 1`` held for the next
    call; ``steps``: ``observation``, ``action`` and ``("next", "observation" | "reward" | "terminated" |
    "done")``, rewards already shaped, and ``action_mask`` with its next where the env masks actions."""

    def __init__(self, n_steps: int):
        if n_steps < 2:
            raise ValueError(f"n-step returns sum 2 or more rewards, got n_steps = {n_steps}")
        self.n_steps = n_steps
        #: each env's latest steps, not stored yet: their windows reach into the next batch
        self.tail: TensorDictBase | None = None
        self._multi_step: MultiStep | None = None

    def __call__(self, steps: TensorDictBase, gamma: float) -> TensorDictBase:
        """The transitions whose windows ``steps`` completes, flattened to ``[N]`` (env by env, in time order)."""
        if self.tail is not None and self.tail.batch_size[:-1] == steps.batch_size[:-1]:
            steps = torch.cat([went_on(self.tail, steps), steps], dim=steps.ndim - 1)
        length = steps.batch_size[-1]
        held = min(self.n_steps - 1, length)
        self.tail = steps[..., length - held:].clone()
        window = TensorDict({
            "observation": steps.get("observation"), "action": steps.get("action"),
            "next": {"observation": steps.get(("next", "observation")), "reward": steps.get(("next", "reward")),
                     "done": steps.get(("next", "done")), END_TERMINATED: steps.get(("next", "terminated"))},
        }, batch_size=steps.batch_size)
        masked = MASK in steps.keys()
        if masked:  # the first step's allowed actions stay; the next ones are gathered as the next observation is
            window.update({MASK: steps.get(MASK), ("next", MASK): steps.get(("next", MASK))})
        summed = self.multi_step(gamma)(window)[..., :length - held]
        transitions = TensorDict({
            "observation": summed.get("observation"), "action": summed.get("action"),
            "next": {"observation": summed.get(("next", "observation")), "reward": summed.get(("next", "reward")),
                     "terminated": summed.get(("next", END_TERMINATED))},
            "steps_to_next_obs": summed.get("steps_to_next_obs").unsqueeze(-1),
        }, batch_size=summed.batch_size)
        if masked:
            transitions.update({MASK: summed.get(MASK), ("next", MASK): summed.get(("next", MASK))})
        return transitions.reshape(summed.batch_size.numel())  # -1 fails on none

    def multi_step(self, gamma: float) -> MultiStep:
        """TorchRL's MultiStep at the discount of now (``rlplug set gamma`` may change it mid-run)."""
        if self._multi_step is None or self._multi_step.gamma != gamma:
            self._multi_step = MultiStep(gamma=gamma, n_steps=self.n_steps)
        return self._multi_step

    def state_dict(self) -> dict[str, Any]:
        """The held steps as plain tensors (a checkpoint's resumed run stores them as the uninterrupted one)."""
        if self.tail is None:
            return {}
        return {"tail": self.tail.to_dict(), "tail_shape": list(self.tail.batch_size)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.tail = TensorDict(state["tail"], batch_size=state["tail_shape"]) if "tail" in state else None


def went_on(tail: TensorDictBase, steps: TensorDictBase) -> TensorDictBase:
    """``tail`` with its last step marked done (ending its windows) in the envs where ``steps`` does not go on
    from it; its ``terminated`` is kept, so those windows still bootstrap from their last next observation."""
    envs, time = tail.batch_size[:-1], tail.ndim - 1
    last, first = tail.get(("next", "observation")).select(time, -1), steps.get("observation").select(time, 0)
    same = (last == first).reshape(*envs, -1).all(-1) if last.shape == first.shape else torch.zeros(
        envs, dtype=torch.bool, device=last.device)
    if bool(same.all()):
        return tail
    done = tail.get(("next", "done")).clone()
    done[..., -1, :] |= ~same.reshape(*envs, 1).to(done.device)
    return tail.clone(False).set(("next", "done"), done)
