"""Generalised state-dependent exploration (gSDE; Raffin, Kober and Stulp 2021) for Gaussian policies.

The policy's mean is ``mu(s) = head(z(s))``, with ``z(s)`` the features of its last hidden layer. While it
collects, each env copy acts with ``mu(s) + z(s) @ theta``, where ``theta`` (``[features, actions]``, one per
copy) is drawn from ``N(0, sigma^2)`` element by element (``sigma = exp(log_std)``, a learned
``[features, actions]`` parameter) and kept for several steps: the noise changes smoothly with the state
instead of jumping at every step. Given ``z``, that noise is Gaussian with variance ``z^2 @ sigma^2`` per
action dimension, so the policy the loss trains is the Gaussian ``N(mu, z^2 @ sigma^2)`` (squashed by tanh
where the head squashes). Where ``learn_features`` (the off-policy family, as Stable-Baselines3's SAC sets it) the
scale's gradient reaches the features too, so SAC's entropy term can widen the exploration through ``z`` as well
as ``sigma``; otherwise (the on-policy family, Stable-Baselines3's default for PPO) ``z`` is detached there.

Two modules share the parameters: the learned actor keeps its ``(loc, scale)`` head (:class:`StateDependentScale`
in place of the one the network built), so every loss reads it unchanged (rlplug's, TorchRL's, a plugin's), and
:func:`state_dependent_exploration` returns the acting actor around the same module, whose distribution
(:class:`StateDependentGaussian`) samples the ``theta`` action. Its log-probability is the learned Gaussian's
(what PPO's ratio reads). A loss draws each transition's action from that Gaussian on its own, where
Stable-Baselines3's SAC draws one matrix per gradient step for the whole batch: the same distribution per
transition, the draws independent across the batch.

TorchRL's ``gSDEModule`` was not used: it maps sigma through a softplus floored at 0.01 and starts its
parameter at zero whatever ``sigma_init`` says (so no ``log_std_init``), keeps the features attached, and
expects the noise matrix in the env's TensorDict, redrawn only when the env resets (its ``gSDENoise``
transform): no redraw every ``sde_sample_freq`` steps, and nothing to carry it on rlplug's array road, which
steps envs without a TensorDict.
"""

from __future__ import annotations

from typing import cast

import torch
from tensordict.nn import NormalParamExtractor, TensorDictModule
from torch import nn
from torch.distributions import Distribution
from torchrl.envs.utils import ExplorationType, exploration_type
from torchrl.modules import IndependentNormal, ProbabilisticActor, TanhNormal

#: added to the variance so that the scale stays positive where every feature is zero (a dead ReLU layer)
VARIANCE_FLOOR = 1e-6
#: the Gaussians whose mean gSDE moves: (loc, scale), squashed or not
GAUSSIANS = (TanhNormal, IndependentNormal)
#: the bound on a tanh-squashed policy's mean (pre-squash) with gSDE, as Stable-Baselines3's SAC clips it: a
#: mean far in tanh's flat tails would leave the noise no effect on the action
TANH_MEAN_CLIP = 2.0


class StateDependentScale(nn.Module):
    """``observation -> (loc, scale)``: ``z = body(observation)``, ``loc = head(z)`` (clipped to
    ``[-clip_mean, clip_mean]`` where given), ``scale = sqrt(z^2 @ exp(log_std)^2 + 1e-6)``, ``z`` detached there
    unless ``learn_features``."""

    def __init__(self, body: nn.Module, head: nn.Linear, log_std_init: float = 0.0, clip_mean: float | None = None,
                 learn_features: bool = False):
        super().__init__()
        self.body, self.head, self.clip_mean, self.learn_features = body, head, clip_mean, learn_features
        self.log_std = nn.Parameter(torch.full((head.in_features, head.out_features), float(log_std_init),
                                               device=head.weight.device))

    def latent(self, observation: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The mean and the features ``z`` it is computed from."""
        features = self.body(observation)
        loc = self.head(features)
        if self.clip_mean is not None:
            loc = loc.clamp(-self.clip_mean, self.clip_mean)
        return loc, features

    def scale_of(self, features: torch.Tensor) -> torch.Tensor:
        features = features if self.learn_features else features.detach()
        variance = features.pow(2) @ (2 * self.log_std).exp()
        return (variance + VARIANCE_FLOOR).sqrt()

    def forward(self, observation: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        loc, features = self.latent(observation)
        return loc, self.scale_of(features)


class ExplorationMatrices(nn.Module):
    """The acting side: ``observation -> (loc, scale, sde_noise)`` with ``sde_noise = z @ theta`` while
    exploring (TorchRL's exploration type ``RANDOM``, what rlplug's collectors set), one ``theta`` per row of
    the batch (each env copy). Each exploring call is one env step: ``theta`` is redrawn at the first, then at
    the start of every batch (every ``steps_per_batch`` steps) and, where ``sample_freq > 0``, every
    ``sample_freq`` steps of a batch (counted from its start). A call whose batch has another shape than
    ``theta`` draws new matrices for it.

    Under a deterministic exploration type (evaluation, export) the noise is zero (the distribution acts with
    its mean anyway); with none set, ``scale * N(0, 1)``: an independent sample of the learned Gaussian, what
    sampling outside a run's collection means (``Agent.select_action(deterministic=False)``).

    ``theta`` and the step count are plain attributes, not buffers: no checkpoint keeps them and no weight sync
    (Ray's workers) overwrites a collector's. They restart at a resumed run's first step, a batch start, where
    the uninterrupted run redraws too; the draw is from torch's global generator, which checkpoints keep.
    """

    def __init__(self, scale: StateDependentScale, steps_per_batch: int, sample_freq: int = -1):
        super().__init__()
        self.scale = scale
        self.steps_per_batch, self.sample_freq = max(1, int(steps_per_batch)), int(sample_freq)
        self.theta: torch.Tensor | None = None
        self.steps = 0

    def resample(self, batch: torch.Size) -> None:
        """New exploration matrices ``theta ~ N(0, exp(log_std)^2)``, one per element of ``batch``."""
        sigma = self.scale.log_std.detach().exp()
        self.theta = torch.randn(*batch, *sigma.shape, device=sigma.device, dtype=sigma.dtype) * sigma

    def due(self) -> bool:
        """Whether this step draws new matrices."""
        in_batch = self.steps % self.steps_per_batch
        return in_batch == 0 or (self.sample_freq > 0 and in_batch % self.sample_freq == 0)

    def noise(self, features: torch.Tensor) -> torch.Tensor:
        """``z @ theta`` for each row, ``theta`` redrawn where due; counts the step."""
        batch = features.shape[:-1]
        if self.due() or self.theta is None or self.theta.shape[:-2] != batch:
            self.resample(batch)
        self.steps += 1
        assert self.theta is not None
        return (features.unsqueeze(-2) @ self.theta.to(features.dtype)).squeeze(-2)

    def forward(self, observation: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        loc, features = self.scale.latent(observation)
        scale = self.scale.scale_of(features)
        kind = exploration_type()
        if kind == ExplorationType.RANDOM:
            noise = self.noise(features.detach())
        elif kind is None:
            noise = scale * torch.randn_like(scale)
        else:
            noise = torch.zeros_like(loc)
        return loc, scale, noise

    def extra_repr(self) -> str:
        return f"steps_per_batch={self.steps_per_batch}, sample_freq={self.sample_freq}"


class StateDependentGaussian(Distribution):
    """The acting distribution: the learned ``gaussian(loc, scale, **kwargs)`` for log-probabilities, entropy
    and the deterministic action; samples are ``loc + sde_noise`` (squashed as the Gaussian squashes: its
    deterministic sample at that mean). Not reparameterised: losses read the learned actor, never this one."""

    has_rsample = False
    arg_constraints: dict = {}

    def __init__(self, loc: torch.Tensor, scale: torch.Tensor, sde_noise: torch.Tensor,
                 gaussian: type = TanhNormal, **kwargs):
        self.policy = gaussian(loc, scale, **kwargs)
        self.gaussian, self.kwargs = gaussian, kwargs
        self.scale, self.shifted = scale, loc + sde_noise
        super().__init__(self.policy.batch_shape, self.policy.event_shape, validate_args=False)

    def sample(self, sample_shape: torch.Size | list[int] | tuple[int, ...] = ()) -> torch.Tensor:
        if tuple(sample_shape):
            raise ValueError("gSDE's exploration gives one action per state (no sample_shape)")
        with torch.no_grad():
            return self.gaussian(self.shifted, self.scale, **self.kwargs).deterministic_sample

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        return self.policy.log_prob(value)

    def entropy(self) -> torch.Tensor:
        return self.policy.entropy()

    @property
    def deterministic_sample(self) -> torch.Tensor:
        return self.policy.deterministic_sample

    @property
    def mode(self) -> torch.Tensor:
        return self.policy.deterministic_sample


def gaussian_parts(policy: ProbabilisticActor) -> tuple[TensorDictModule, nn.Module, type, dict]:
    """The ``(loc, scale)`` parameter TensorDictModule of a Gaussian ``ProbabilisticActor`` (what
    :func:`rlplug.core.heads.wrap` builds), its torch module, distribution class and keyword arguments;
    ``ValueError`` saying what is not so."""
    from rlplug.core.acting import ActorView

    view = ActorView.of(policy)  # TypeError for another shape of actor
    if view.param_keys != ("loc", "scale") or not issubclass(view.distribution_class, GAUSSIANS):
        raise ValueError(f"gSDE moves a Gaussian policy's mean (loc and scale: TanhNormal or IndependentNormal), "
                         f"and this policy's distribution is a {view.distribution_class.__name__}")
    if "event_dims" in view.distribution_kwargs or "event_dim" in view.distribution_kwargs:
        raise ValueError("gSDE takes actions that are one vector (a Box of one dim)")
    params = cast(TensorDictModule, policy.module[0])
    return params, view.params_module, view.distribution_class, view.distribution_kwargs


def split_trunk(trunk: nn.Module) -> tuple[nn.Sequential, nn.Linear]:
    """A trunk of :func:`rlplug.core.heads.wrap` (an ``nn.Sequential`` ending in its linear output layer, maybe
    after an encoder) as its body (the same layer objects, so a body shared with a critic stays shared) and
    that layer; ``ValueError`` for another shape."""
    if isinstance(trunk, nn.Sequential) and len(trunk) and isinstance(trunk[-1], nn.Linear):
        return nn.Sequential(*list(trunk)[:-1]), trunk[-1]
    if isinstance(trunk, nn.Sequential) and len(trunk) and isinstance(trunk[-1], nn.Sequential):
        body, head = split_trunk(trunk[-1])
        return nn.Sequential(*list(trunk)[:-1], *body), head
    raise ValueError("gSDE needs a policy network built by rlplug.core.heads.with_head or wrap (mlp, sequential, "
                     "cnn): a trunk ending in a Linear layer, then the Gaussian head")


def state_dependent_exploration(policy: ProbabilisticActor, *, log_std_init: float, steps_per_batch: int,
                                sample_freq: int = -1, learn_features: bool = False) -> ProbabilisticActor:
    """Give ``policy`` (a Gaussian actor of rlplug's heads: a body, a linear output layer, a ``(loc, scale)``
    head) gSDE's scale in place, and return the acting actor that explores with it (the same parameters).

    The body is kept; the output layer's mean rows become the mean (a state-dependent head's scale rows are
    dropped, a state-independent log-std vector too); ``log_std`` (``[features, actions]``) starts at
    ``log_std_init``. A tanh-squashed mean is clipped to ``[-2, 2]`` before squashing. ``learn_features``: the
    scale's gradient reaches the body. ``ValueError`` for a policy of another shape."""
    from rlplug.core.heads import StateIndependentScale

    params, module, distribution, kwargs = gaussian_parts(policy)
    if isinstance(module, StateIndependentScale):
        body, head = split_trunk(module.trunk)
        mean = head
    elif isinstance(module, nn.Sequential) and len(module) == 2 and isinstance(module[1], NormalParamExtractor):
        body, head = split_trunk(module[0])
        # the first half of the outputs is the mean
        actions = head.out_features // 2
        mean = nn.Linear(head.in_features, actions, bias=head.bias is not None, device=head.weight.device)
        with torch.no_grad():
            mean.weight.copy_(head.weight[:actions])
            if head.bias is not None:
                mean.bias.copy_(head.bias[:actions])
    else:
        raise ValueError("gSDE needs a policy network built by rlplug.core.heads.with_head or wrap (mlp, "
                         "sequential, cnn): a trunk ending in a Linear layer, then the Gaussian head")
    scale = StateDependentScale(body, mean, log_std_init,
                                clip_mean=TANH_MEAN_CLIP if issubclass(distribution, TanhNormal) else None,
                                learn_features=learn_features)
    params.module = scale  # in place: every holder of the policy (the algorithm, its loss) trains gSDE's scale
    exploring = TensorDictModule(ExplorationMatrices(scale, steps_per_batch, sample_freq),
                                 in_keys=list(params.in_keys), out_keys=["loc", "scale", "sde_noise"])
    return ProbabilisticActor(exploring, in_keys=["loc", "scale", "sde_noise"],
                              distribution_class=StateDependentGaussian,
                              distribution_kwargs={"gaussian": distribution, **kwargs}, spec=policy.spec["action"],
                              return_log_prob=True)
