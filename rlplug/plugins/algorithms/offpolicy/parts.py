"""The pieces the off-policy algorithms are built from: target networks and polyak averaging, an optimiser per
network (:class:`Learner`), exploration stages, the observation preprocessor in front of the acting network,
and the episode labels recurrent networks learn sequences by."""

from __future__ import annotations

import copy
from collections.abc import Callable
from contextlib import nullcontext

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModule, TensorDictModuleBase, TensorDictSequential
from torch import nn
from torchrl.envs.utils import ExplorationType, exploration_type
from torchrl.modules import ProbabilisticActor

from rlplug.core.acting import ActorView
from rlplug.core.training import FlatParameters, NonFiniteError, make_optimizer, optimiser_step, scheduled_lr, set_learning_rate
from rlplug.errors import UserError


# -- target networks -----------------------------------------------------------------------------------

@torch.no_grad()
def polyak_update(target: nn.Module | FlatParameters, online: nn.Module | FlatParameters | list[nn.Parameter],
                  tau: float) -> None:
    """``target = (1 - tau) * target + tau * online`` for every parameter, in place, in two foreach ops
    (``tau = 1``: a plain copy); over one tensor each where both are :class:`FlatParameters` (see
    :func:`flat_target`). Buffers are left alone (the networks here keep none that learn)."""
    targets, onlines = parameter_tensors(target), parameter_tensors(online)
    if tau == 1.0:
        torch._foreach_copy_(targets, onlines)
        return
    torch._foreach_mul_(targets, 1.0 - tau)
    torch._foreach_add_(targets, torch._foreach_mul(onlines, tau))


def parameter_tensors(parameters: nn.Module | FlatParameters | list[nn.Parameter]) -> list[torch.Tensor]:
    if isinstance(parameters, FlatParameters):
        return [parameters.flat]
    return list(parameters.parameters()) if isinstance(parameters, nn.Module) else list(parameters)


def flat_target(target: nn.Module, online: FlatParameters | list[nn.Parameter]) -> nn.Module | FlatParameters:
    """``target``'s parameters in one tensor laid out as ``online``'s where those are flat (a learner's
    :attr:`Learner.trained`), so each polyak update is a few kernels; else ``target`` itself."""
    if isinstance(online, FlatParameters):
        return FlatParameters(list(target.parameters()), trained=False)
    return target


def target_copy(network: nn.Module) -> nn.Module:
    """A frozen deep copy of ``network``, to be moved by :func:`polyak_update`."""
    target = copy.deepcopy(network)
    target.requires_grad_(False)
    return target


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
        return ProbabilisticActor(params, in_keys=list(view.param_keys), distribution_class=view.distribution_class,
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

    def __init__(self, action_spec, env_dims: int):
        super().__init__()
        self.in_keys, self.out_keys = ["action"], ["action"]
        self.spec = action_spec[(0,) * env_dims] if env_dims else action_spec  # one env's actions
        self.active = True

    def forward(self, data: TensorDictBase) -> TensorDictBase:
        data.set("action", self.act_on(data.get("action")))
        return data

    def act_on(self, action: torch.Tensor) -> torch.Tensor:
        """A random action of the same batch shape in place of ``action`` while active and exploring."""
        if self.active and exploring():
            return self.spec.rand(action.shape[: action.ndim - self.spec.ndim]).to(action.device)
        return action


# -- optimisation ----------------------------------------------------------------------------------------

class Learner:
    """One network's optimiser: its parameters, base learning rate and schedule, gradient clipping, and
    under CUDA float16 mixed precision a gradient scaler."""

    def __init__(self, parameters: list[nn.Parameter], lr: float, config, device: str,
                 flat: bool = True):
        self.parameters, self.lr, self.schedule = parameters, lr, config.lr_schedule
        self.max_grad_norm = config.max_grad_norm
        cuda = torch.device(device).type == "cuda"
        self.scaler = torch.amp.GradScaler("cuda") if config.mixed_precision and cuda else None
        #: one flat tensor where it fits and is asked for (not under a gradient scaler, which steps per-tensor
        #: gradients)
        self.trained = FlatParameters.where_possible(parameters, allowed=flat and self.scaler is None)
        self.optimiser = make_optimizer(config.optimizer, self.trained, lr, config.optimizer_kwargs)

    def set_progress(self, progress: float) -> float:
        lr = scheduled_lr(self.lr, self.schedule, progress)
        set_learning_rate(self.optimiser, lr)
        return lr

    def step(self, loss: torch.Tensor) -> torch.Tensor | None:
        """Backward, clip, step; the gradient norm before clipping (when clipping). Non-finite losses and
        gradient norms raise :class:`~rlplug.core.training.NonFiniteError`, except under a gradient scaler, which
        skips the step and lowers its scale (that is how float16 training finds its scale)."""
        if self.scaler is None:
            return optimiser_step(self.optimiser, loss, self.trained, self.max_grad_norm)
        if not torch.isfinite(loss):
            raise NonFiniteError("the loss")
        self.optimiser.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        self.scaler.unscale_(self.optimiser)
        norm = None
        if self.max_grad_norm:
            norm = nn.utils.clip_grad_norm_(self.parameters, self.max_grad_norm, foreach=True)
        self.scaler.step(self.optimiser)
        self.scaler.update()
        return norm

    def state_dict(self) -> dict:
        state = {"optimiser": self.optimiser.state_dict()}
        if self.scaler is not None:
            state["scaler"] = self.scaler.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        self.optimiser.load_state_dict(state["optimiser"])
        if self.scaler is not None and "scaler" in state:
            self.scaler.load_state_dict(state["scaler"])


def learning_rates(lr: float | list[float]) -> tuple[float, float]:
    """``lr`` as (actor, critic): one number for both, or the pair."""
    if isinstance(lr, (int, float)):
        return float(lr), float(lr)
    if len(lr) != 2:  # the recipe check says this already; here for configs built in code
        raise UserError(f"must be a number or a pair [actor, critic], got a list of {len(lr)}", path="algorithm.lr")
    return float(lr[0]), float(lr[1])


def build_network(component, **context) -> TensorDictModuleBase:
    """``component.build(**context)``, its errors located at the component's key in the algorithm's table
    (``algorithm.policy``)."""
    try:
        return component.build(**context)
    except UserError as error:
        raise (error if error.path else error.located(prefix=f"algorithm.{component.path}")) from None


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
        if self.episode is None or len(self.episode) != envs:
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
        if self.episode is not None:
            state.update(episode=self.episode.clone(), step=self.step.clone())
        return state

    def load_state_dict(self, state: dict) -> None:
        self.next_id = int(state["next_id"])
        self.episode, self.step = state.get("episode"), state.get("step")


def mixed_precision_context(enabled: bool, device: str) -> Callable[[], object]:
    """What the update's forward passes run in: autocast to bfloat16 on the CPU, float16 on CUDA, or nothing."""
    if not enabled:
        return nullcontext
    kind = torch.device(device).type
    dtype = torch.float16 if kind == "cuda" else torch.bfloat16
    return lambda: torch.autocast(kind, dtype=dtype)
