"""The pieces the off-policy algorithms are built from: their optimisers (:class:`Learners`), exploration stages,
the observation preprocessor in front of the acting network, and the episode labels recurrent networks learn
sequences by."""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModule, TensorDictModuleBase, TensorDictSequential
from torch import nn
from torch.nn import functional
from torchrl.data import OneHot
from torchrl.envs.utils import ExplorationType, exploration_type
from torchrl.modules import ProbabilisticActor

from rlplug.core.acting import ActorView
from rlplug.core.actions import one_env_spec
from rlplug.core.masks import MASK, random_allowed
from rlplug.core.module_values import BufferedValue
from rlplug.core.training import (
    FlatParameters,
    NonFiniteError,
    clip_and_step,
    load_optimiser_state,
    make_optimizer,
    scheduled_lr,
    set_learning_rate,
)
from rlplug.errors import UserError

# -- networks behind the preprocessor ---------------------------------------------------------------------

class Preprocessed(nn.Module):
    """``module(preprocessor(observation), *rest)``: a network behind the observation preprocessor."""

    def __init__(self, preprocessor: nn.Module, module: nn.Module):
        super().__init__()
        self.preprocessor, self.module = preprocessor, module

    def forward(self, observation: torch.Tensor, *rest: torch.Tensor):
        return self.module(self.preprocessor(observation), *rest)


def behind_preprocessor(network: TensorDictModuleBase, preprocessor: nn.Module | None,
                        action_spec) -> TensorDictModuleBase:
    """The same network (its parameters shared) reading preprocessed observations, for acting."""
    if preprocessor is None:
        return network
    if isinstance(network, ProbabilisticActor):
        view = ActorView.of(network)
        params = TensorDictModule(Preprocessed(preprocessor, view.params_module), in_keys=[view.observation_key],
                                  out_keys=list(view.param_keys))
        in_keys: list | dict = list(view.param_keys)
        if view.mask_key:  # the env's allowed actions, read as the network read them
            in_keys = {**{key: key for key in view.param_keys}, "mask": view.mask_key}
        return ProbabilisticActor(params, in_keys=in_keys, distribution_class=view.distribution_class,
                                  distribution_kwargs=view.distribution_kwargs, spec=action_spec,
                                  return_log_prob=True)
    if isinstance(network, TensorDictModule) and not isinstance(network, TensorDictSequential):
        return TensorDictModule(Preprocessed(preprocessor, network.module), in_keys=list(network.in_keys),
                                out_keys=list(network.out_keys))
    raise UserError(f"an observation preprocessor needs a policy network that is one TensorDictModule or a "
                    f"ProbabilisticActor, got {type(network).__name__}", path="algorithm.observation_preprocessor")


# -- exploration -----------------------------------------------------------------------------------------

def exploring() -> bool:
    """Whether actions are being collected for training (random exploration), not evaluated."""
    return exploration_type() == ExplorationType.RANDOM


class RandomActions(TensorDictModuleBase):
    """Replaces ``action`` by a uniformly random one while :attr:`active` and exploring (the first
    ``random_frames`` of a run); the algorithm switches it off as frames come in."""

    active = BufferedValue("random_phase", torch.bool)

    def __init__(self, action_spec, env_dims: int, masked: bool = False):
        super().__init__()
        self.in_keys, self.out_keys = ["action", *([MASK] if masked else [])], ["action"]
        self.spec = one_env_spec(action_spec, env_dims)
        self.one_hot = isinstance(self.spec, OneHot)  # DQN's random phase, in the env's layout
        self.masked = masked
        self.active = True

    def forward(self, data: TensorDictBase) -> TensorDictBase:
        data.set("action", self.act_on(data.get("action"), data.get(MASK) if self.masked else None))
        return data

    def act_on(self, action: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """A random action of the same batch shape in place of ``action`` while active and exploring; an
        allowed one where ``mask`` (the env's ``action_mask``) is given."""
        if exploring() and self.active:  # exploring first: no buffer read while exporting
            if mask is not None:
                index = random_allowed(mask)
                return functional.one_hot(index, mask.shape[-1]).to(action.dtype) if self.one_hot \
                    else index.reshape(action.shape).to(action.dtype)
            return self.spec.rand(action.shape[: action.ndim - self.spec.ndim]).to(action.device)
        return action


# -- optimisation ----------------------------------------------------------------------------------------

class Learners:
    """The algorithm's optimisers, one per parameter group of its loss (actor, critic, entropy...), each with its
    base learning rate and schedule and its gradient clipping. A step is one backward pass of the sum of the
    loss terms it covers (each term's gradient reaches only its own group's parameters), then each group's
    optimiser step; under CUDA float16 mixed precision one gradient scaler serves them all."""

    def __init__(self, groups: dict[str, list[nn.Parameter]], learning_rates: dict[str, float], config, device: str,
                 flat: bool = True):
        self.schedule, self.max_grad_norm = config.lr_schedule, config.max_grad_norm
        self.groups, self.learning_rates = groups, learning_rates
        cuda = torch.device(device).type == "cuda"
        self.scaler = torch.amp.GradScaler("cuda") if config.mixed_precision and cuda else None
        #: each group in one flat tensor where it fits and is asked for (not under a gradient scaler, which steps
        #: per-tensor gradients)
        self.trained = {name: FlatParameters.where_possible(parameters, allowed=flat and self.scaler is None)
                        for name, parameters in groups.items()}
        self.optimisers = {name: make_optimizer(config.optimizer, self.trained[name], learning_rates[name],
                                                config.optimizer_kwargs) for name in groups}

    @property
    def parameters(self) -> list[nn.Parameter]:
        return [p for parameters in self.groups.values() for p in parameters]

    def set_progress(self, progress: float) -> dict[str, float]:
        """Each group's learning rate at ``progress`` (0..1) of the run, set and returned."""
        rates = {}
        for name, optimiser in self.optimisers.items():
            rates[name] = scheduled_lr(self.learning_rates[name], self.schedule, progress)
            set_learning_rate(optimiser, rates[name])
        return rates

    def backward(self, loss: torch.Tensor, names) -> None:
        """The gradients of ``loss`` in the groups ``names`` (zeroed first), left in place for
        :meth:`clip_and_step`. A non-finite loss raises :class:`~rlplug.core.training.NonFiniteError` before
        anything is touched, except under a gradient scaler, which skips the step and lowers its scale (that is
        how float16 training finds its scale)."""
        if self.scaler is None and not math.isfinite(loss.item()):
            raise NonFiniteError("the loss")
        self.zero_grad(names)
        if self.scaler is None:
            loss.backward()
        else:
            self.scaler.scale(loss).backward()

    def zero_grad(self, names) -> None:
        for name in names:
            trained = self.trained[name]
            if isinstance(trained, FlatParameters):
                trained.zero_grad()
            else:
                self.optimisers[name].zero_grad(set_to_none=True)

    def clip_and_step(self, names) -> dict[str, torch.Tensor | None]:
        """Clip and step the groups ``names`` with the gradients they hold; each one's norm before clipping. A
        non-finite norm raises :class:`~rlplug.core.training.NonFiniteError` before that group steps."""
        if self.scaler is None:
            return {name: clip_and_step(self.optimisers[name], self.trained[name], self.max_grad_norm)
                    for name in names}
        norms = {}
        for name in names:
            self.scaler.unscale_(self.optimisers[name])
            norms[name] = (nn.utils.clip_grad_norm_(self.groups[name], self.max_grad_norm, foreach=True)
                           if self.max_grad_norm else None)
            self.scaler.step(self.optimisers[name])
        self.scaler.update()
        return norms

    def gradients(self, name: str) -> list[torch.Tensor]:
        """Group ``name``'s gradients as they are now (zeros where a parameter has none)."""
        return [torch.zeros_like(p) if p.grad is None else p.grad for p in self.groups[name]]

    @torch.no_grad()
    def set_gradients(self, name: str, gradients: list[torch.Tensor]) -> None:
        """Group ``name``'s gradients replaced by ``gradients`` (in :attr:`groups` order, on any device)."""
        self.zero_grad([name])
        for p, gradient in zip(self.groups[name], gradients, strict=True):
            if p.grad is None:
                p.grad = gradient.to(p.device, p.dtype, copy=True)
            else:
                p.grad.copy_(gradient)

    def state_dict(self) -> dict:
        state = {name: optimiser.state_dict() for name, optimiser in self.optimisers.items()}
        return {"optimisers": state, **({"scaler": self.scaler.state_dict()} if self.scaler is not None else {})}

    def load_state_dict(self, state: dict) -> None:
        for name, optimiser in self.optimisers.items():
            load_optimiser_state(optimiser, state["optimisers"][name])
        if self.scaler is not None and "scaler" in state:
            self.scaler.load_state_dict(state["scaler"])


class FlatTargets:
    """A loss's target copies moved by polyak averaging as one ``lerp_`` per learner instead of one per tensor:
    each learner's targets (the loss's ``target_parameters``) made views of one flat tensor laid out as the
    learner's :class:`FlatParameters`, so a gradient step moves them with one kernel. The same numbers as the
    loss's own ``update_targets`` (lerp acts element by element), which it stands in for, and which serves
    instead once the parameters live elsewhere (seeds trained together seat them in their stacks)."""

    def __init__(self, pairs: dict[str, tuple[FlatParameters, FlatParameters]], own: Callable[[float], None]):
        self.pairs = pairs  # learner: (its targets, its parameters), each one flat tensor
        self.own = own

    @classmethod
    def where_possible(cls, targets: dict[str, list[torch.Tensor]] | None,
                       trained: dict[str, FlatParameters | list[nn.Parameter]],
                       own: Callable[[float], None]) -> FlatTargets | None:
        """The fused update of ``targets`` (by learner), or None where a learner is not flat, or its copies are
        not laid out as its parameters (then the loss's own update, ``own``, serves)."""
        if not targets:
            return None
        onlines: dict[str, FlatParameters] = {}
        for name, copies in targets.items():
            online = trained.get(name)
            if not isinstance(online, FlatParameters) or len(copies) != len(online.parameters):
                return None
            if any(c is p or (c.shape, c.dtype, c.device) != (p.shape, p.dtype, p.device)
                   for c, p in zip(copies, online.parameters)):
                return None
            onlines[name] = online
        # FlatParameters only rebinds each tensor's data: the targets need not be nn.Parameters
        return cls({name: (FlatParameters(list(copies), trained=False), onlines[name])  # type: ignore[arg-type]
                    for name, copies in targets.items()}, own)

    def holds(self) -> bool:
        """Whether the flat tensors still hold the parameters (their first ones are where the flats start)."""
        return all(flat.parameters[0].data_ptr() == flat.flat.data_ptr()
                   for pair in self.pairs.values() for flat in pair)

    @torch.no_grad()
    def __call__(self, tau: float) -> None:
        """``target = (1 - tau) target + tau online`` (``tau = 1``: a copy)."""
        if not self.holds():
            self.own(tau)
            return
        for target, online in self.pairs.values():
            if tau == 1.0:
                target.flat.copy_(online.flat)
            else:
                target.flat.lerp_(online.flat, tau)

def learning_rates(lr: float | list[float]) -> tuple[float, float]:
    """``lr`` as (actor, critic): one number for both, or the pair."""
    if isinstance(lr, (int, float)):
        return float(lr), float(lr)
    if len(lr) != 2:  # the recipe check says this already; here for configs built in code
        raise UserError(f"must be a number or a pair [actor, critic], got a list of {len(lr)}", path="algorithm.lr")
    return float(lr[0]), float(lr[1])


class EpisodeLabels:
    """Each stored transition's episode id (unique over the run) and step within the episode, which the
    replay buffer's sequence sampler reads; an episode starts wherever the collector's ``is_init`` is set."""

    def __init__(self):
        self.next_id = 0
        self.episode: torch.Tensor | None = None  # [envs]: each env's current episode and step
        self.step: torch.Tensor | None = None

    def label(self, is_init: torch.Tensor) -> dict[str, torch.Tensor]:
        """``is_init`` ``[*envs, time, 1]`` -> ``episode`` and ``step``, flattened as the batch is."""
        starts = is_init.reshape(-1, is_init.shape[-2]).cpu()  # [envs, time]
        envs, steps = starts.shape
        if self.episode is None or self.step is None or len(self.episode) != envs:
            self.episode, self.step = torch.full((envs,), -1), torch.zeros(envs, dtype=torch.long)
        episode, step = torch.empty(envs, steps, dtype=torch.long), torch.empty(envs, steps, dtype=torch.long)
        for t in range(steps):
            new = starts[:, t]
            count = int(new.sum())
            if count:
                self.episode[new] = torch.arange(self.next_id, self.next_id + count)
                self.step[new] = 0
                self.next_id += count
            episode[:, t], step[:, t] = self.episode, self.step
            self.step += 1
        device = is_init.device
        return {"episode": episode.reshape(-1).to(device), "step": step.reshape(-1).to(device)}

    def state_dict(self) -> dict:
        state = {"next_id": self.next_id}
        if self.episode is not None and self.step is not None:  # set together
            state.update(episode=self.episode.clone(), step=self.step.clone())
        return state

    def load_state_dict(self, state: dict) -> None:
        self.next_id = int(state["next_id"])
        self.episode, self.step = state.get("episode"), state.get("step")


def mixed_precision_context(enabled: bool, device: str) -> Callable[[], AbstractContextManager[object]]:
    """What the update's forward passes run in: autocast to bfloat16 on the CPU, float16 on CUDA, or nothing."""
    if not enabled:
        return nullcontext
    kind = torch.device(device).type
    dtype = torch.float16 if kind == "cuda" else torch.bfloat16
    return lambda: torch.autocast(kind, dtype=dtype)
