"""Tensor-level views of TorchRL policy and value modules, for the hot loops.

A TorchRL ``ProbabilisticActor`` is a parameter module followed by a distribution module; calling it on a
TensorDict costs about ten times what the arithmetic does for small networks (measured in BENCHMARKS.md).
The views here call the same modules and the same distribution class directly on tensors, so collection
and the loss pay only for the arithmetic. Nothing is copied: the view shares the module's parameters.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from tensordict import TensorDict
from tensordict.nn import ProbabilisticTensorDictModule, TensorDictModule, TensorDictModuleBase
from torch.distributions import Distribution


@dataclass
class ActorView:
    """An actor's distribution as a function of its one observation tensor."""

    params_module: torch.nn.Module
    observation_key: str
    param_keys: tuple[str, ...]
    distribution_class: type
    distribution_kwargs: dict
    action_key: str
    log_prob_key: str

    @classmethod
    def of(cls, actor: TensorDictModuleBase) -> "ActorView":
        """The view of ``actor``, or ``TypeError`` saying what shape of actor is supported."""
        modules = list(getattr(actor, "module", []))
        if (len(modules) != 2 or not isinstance(modules[0], TensorDictModule)
                or not isinstance(modules[1], ProbabilisticTensorDictModule) or len(modules[0].in_keys) != 1):
            raise TypeError("the policy must be a TorchRL ProbabilisticActor of one parameter module reading one "
                            "observation, then a distribution (what rlplug.networks.wrap builds)")
        params, probabilistic = modules
        return cls(
            params_module=params.module, observation_key=params.in_keys[0],
            param_keys=tuple(k[-1] if isinstance(k, tuple) else k for k in probabilistic.dist_keys),
            distribution_class=probabilistic.distribution_class,
            distribution_kwargs=dict(probabilistic.distribution_kwargs or {}),
            action_key=probabilistic.out_keys[0], log_prob_key=probabilistic.log_prob_key,
        )

    def distribution(self, observation: torch.Tensor) -> Distribution:
        params = self.params_module(observation)
        params = params if isinstance(params, tuple) else (params,)
        return self.distribution_class(**dict(zip(self.param_keys, params)), **self.distribution_kwargs)

    def act(self, observation: torch.Tensor, deterministic: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """An action and its log-probability (the mode's, when deterministic)."""
        dist = self.distribution(observation)
        action = deterministic_sample(dist) if deterministic else dist.sample()
        return action, dist.log_prob(action)


def deterministic_sample(dist: Distribution) -> torch.Tensor:
    sample = getattr(dist, "deterministic_sample", None)
    return sample if sample is not None else dist.mode


def entropy(dist: Distribution) -> torch.Tensor:
    """The exact entropy where the distribution has one, else a one-sample estimate (tanh-squashed Gaussians)."""
    try:
        return dist.entropy()
    except NotImplementedError:
        return -dist.log_prob(dist.rsample())


def value_function(critic: TensorDictModuleBase, observation_key: str):
    """``observation -> value`` for a critic: its own module when it is a plain one-input TensorDictModule."""
    if isinstance(critic, TensorDictModule) and list(critic.in_keys) == [observation_key]:
        return critic.module
    out_key = critic.out_keys[0]

    def through_tensordict(observation: torch.Tensor) -> torch.Tensor:
        data = TensorDict({observation_key: observation}, batch_size=observation.shape[:-1])
        return critic(data).get(out_key)

    return through_tensordict
