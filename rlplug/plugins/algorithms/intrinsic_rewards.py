"""What both families do with an intrinsic reward (``[algorithm.intrinsic]``), written once.

:class:`IntrinsicRewards` takes a collected ``[envs, time]`` batch and gives a copy whose ``("next", "reward")``
is the env's reward plus ``coef_t`` times the module's reward (with ``pretraining``: that alone), then lets the
module learn from the batch. The collected batch itself is left as it is, so the env's returns
(``episode_return``, evaluation) never include the bonus. The on-policy family calls it before its estimators;
the off-policy family before its reward shaping and n-step sums, so an n-step target sums the bonus too.

The module draws random numbers from a stream of its own (its initial weights, minibatch orders, masks): the
algorithm's own stream is then the one it has without the module, and ``coef = 0`` learns exactly as no
intrinsic reward does. Where several copies of the algorithm learn (seeds trained together, Ray's gradient workers,
learners and replay storages) the module's statistics and networks would differ per copy: refused in one line.
"""

from __future__ import annotations

import contextlib
import operator
from collections.abc import Iterator
from typing import Any

import torch
from tensordict import TensorDictBase

from rlplug.core.training import scheduled_lr
from rlplug.errors import UserError
from rlplug.registry import protocols
from rlplug.registry.components import Intrinsic

#: added to the seed drawn for the module, so its first draws are not the algorithm's next ones
STREAM_OFFSET = 0x1D7_215


class OwnStream:
    """A random stream of the module's own: torch's global generators hold its state for the length of a call
    (``torch.random.fork_rng``), then get the algorithm's back."""

    def __init__(self, device: torch.device):
        self.devices = [device.index or 0] if device.type == "cuda" else []
        with torch.random.fork_rng(devices=self.devices):  # the seed is read, not drawn: nothing advances
            self.seed = int(torch.randint(2**62, ())) + STREAM_OFFSET
        with torch.random.fork_rng(devices=self.devices):
            torch.default_generator.manual_seed(self.seed)
            if self.devices:
                torch.cuda.manual_seed(self.seed)
            self.state = self.current()

    def current(self) -> dict[str, torch.Tensor]:
        state = {"cpu": torch.get_rng_state()}
        if self.devices:
            state["cuda"] = torch.cuda.get_rng_state(self.devices[0])
        return state

    @contextlib.contextmanager
    def used(self) -> Iterator[None]:
        with torch.random.fork_rng(devices=self.devices):
            torch.set_rng_state(self.state["cpu"])
            if self.devices:
                torch.cuda.set_rng_state(self.state["cuda"], self.devices[0])
            yield
            self.state = self.current()


class IntrinsicRewards:
    """An ``[algorithm.intrinsic]`` module, its weight's schedule and the frames it has seen."""

    def __init__(self, component: Intrinsic, pretraining: bool, *, observation_spec, action_spec, device: str,
                 total_frames: int):
        self.component, self.pretraining, self.total_frames = component, pretraining, total_frames
        self.stream = OwnStream(torch.device(device))
        with self.stream.used():
            self.module: protocols.Intrinsic = component.build(observation_spec=observation_spec,
                                                               action_spec=action_spec, device=device,
                                                               seed=self.stream.seed)
        self.frames = 0
        #: the last batch's metrics (logged with the update)
        self.report: dict[str, float] = {}

    @classmethod
    def of(cls, config: Any, **context: Any) -> IntrinsicRewards | None:
        """The config's intrinsic reward, or None where it has none."""
        component = getattr(config, "intrinsic", None)
        return None if component is None else cls(component, config.pretraining, **context)

    def coef(self) -> float:
        """The weight now: ``coef`` on its schedule at the frames seen before this batch."""
        component = self.component
        if component.schedule == "exponential":
            return component.coef * (1.0 - component.decay) ** self.frames
        return scheduled_lr(component.coef, component.schedule, self.frames / self.total_frames)

    def added(self, batch: TensorDictBase) -> TensorDictBase:
        """A copy of ``batch`` whose reward is the env's plus the weighted intrinsic reward (the weighted intrinsic
        reward alone with ``pretraining``); the module then learns from the batch."""
        coef = self.coef()
        with self.stream.used():
            with torch.no_grad():
                intrinsic = self.module.rewards(batch)
            with torch.enable_grad():  # the off-policy family stores under no_grad
                learned = self.module.learn(batch)
        env_reward = batch.get(("next", "reward"))
        intrinsic = intrinsic.reshape(env_reward.shape).to(env_reward.dtype)
        weighted = coef * intrinsic
        reward = weighted if self.pretraining else env_reward + weighted
        after = batch.get("next").copy()
        after.set("reward", reward)
        changed = batch.copy()
        changed.set("next", after)
        self.frames += batch.numel()
        self.report = {"intrinsic_reward": float(intrinsic.mean()), "intrinsic_coef": coef,
                       "extrinsic_reward": float(env_reward.float().mean()),
                       **protocols.checked_metrics(learned, self.component.title)}
        return changed

    def state_dict(self) -> dict[str, Any]:
        return {"module": self.module.state_dict(), "frames": self.frames, "random": self.stream.state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.module.load_state_dict(state["module"])
        self.frames = operator.index(state["frames"])
        self.stream.state = dict(state["random"])


def refused(what: str) -> UserError:
    """The one line for a layout with several copies of the algorithm."""
    return UserError(f"an intrinsic reward learns in one copy of the algorithm, and {what} make several: leave "
                     f"[algorithm.intrinsic] out or train with the local runner, one seed at a time",
                     path="algorithm.intrinsic")

