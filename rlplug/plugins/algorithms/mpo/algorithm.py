"""MPO (Abdolmaleki et al. 2018, maximum a posteriori policy optimisation, with the decoupled KL bounds): a
Gaussian actor, one Q-critic, and target copies of both (polyak averaging, ``tau``). Each gradient step:

- the critic regresses on ``r + gamma (1 - terminated) mean_j Q'(s', a'_j)``, ``a'_j`` drawn from the target
  policy at ``s'`` (``loss_qvalue``);
- E-step: ``action_samples`` actions ``a_ij`` drawn from the target policy at each state ``s_i``, valued by the
  target critic; the temperature ``eta`` minimises its dual ``eta epsilon + eta mean_i log mean_j exp(Q_ij /
  eta)`` (``loss_temperature``), and the samples' weights are ``softmax_j(Q_ij / eta)``;
- M-step: the actor maximises the weighted log-likelihood of the samples, its mean and its covariance each
  fitted with the other held at the target policy's (``loss_actor``), under the bounds ``KL_mean <=
  epsilon_mean`` and ``KL_sigma <= epsilon_sigma`` (:func:`rlplug.functional.gaussian_kl`) through Lagrange
  multipliers, each raised while its KL is above its bound and lowered below it (``loss_multipliers``).

The temperature and the multipliers (kept as logarithms, so positive) are the learner ``dual`` (``dual_lr``).
The actor is the ``policy`` role of any network whose distribution is a Gaussian of independent dimensions
(``squash = "tanh"``: a ``TanhNormal``, or ``"none"``): a diagonal covariance, which every rlplug network
already gives and for which the tanh squash keeps its exact KL (an invertible map of the same Gaussian);
the samples are drawn and scored before the squash, where the Gaussian is. Evaluation takes its
deterministic action.

Here: the algorithm (:class:`MPO`), rlplug's loss (:class:`MPOLoss`, ``mpo-loss``) and its build
(:func:`objective`).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn
from torch.distributions import Normal
from torchrl.modules import IndependentNormal, TanhNormal

from rlplug.core.acting import ActorView
from rlplug.errors import UserError
from rlplug.functional import gaussian_kl
from rlplug.plugins.algorithms.mpo import MPOConfig
from rlplug.plugins.algorithms.offpolicy.actor_critic import ActorCritic
from rlplug.plugins.algorithms.offpolicy.losses import Sample, TargetCritics, single_transitions
from rlplug.registry.networks import ActorCriticNetworks

#: the policies MPO fits: Gaussians of (loc, scale), squashed or not
GAUSSIANS = (TanhNormal, IndependentNormal)


class MPO(ActorCritic):
    config: MPOConfig
    critics = 1
    actor_role = "policy"
    learner_names = ("actor", "critic", "dual")

    def learning_rates(self) -> dict[str, float]:
        rates = super().learning_rates()
        if "dual" in rates:
            rates["dual"] = self.config.dual_lr
        return rates


def gaussian_view(actor: nn.Module) -> ActorView:
    """The actor's distribution, or one line saying MPO needs a Gaussian one."""
    try:
        view = ActorView.of(actor)
    except TypeError as error:
        raise UserError(f"mpo needs a Gaussian policy: {error}", path="algorithm.policy") from None
    if view.param_keys != ("loc", "scale") or not issubclass(view.distribution_class, GAUSSIANS):
        raise UserError(f"mpo needs a Gaussian policy (loc and scale: TanhNormal or IndependentNormal), and this "
                        f"network's is a {view.distribution_class.__name__}", path="algorithm.policy")
    return view


def dual(q_values: torch.Tensor, temperature: torch.Tensor, epsilon: float) -> torch.Tensor:
    """The temperature's dual on ``q_values`` ``[samples, states]``: ``eta epsilon + eta mean_i log mean_j
    exp(Q_ij / eta)``, which its minimum over ``eta`` makes the weights' KL from the sampling policy ``epsilon``."""
    samples = q_values.shape[0]
    log_mean = torch.logsumexp(q_values / temperature, 0) - math.log(samples)
    return temperature * epsilon + temperature * log_mean.mean()


class MPOLoss(TargetCritics):
    """MPO's loss: the critic on its target copy, the temperature's dual, the actor's weighted maximum likelihood
    with the decoupled KL penalties, and the Lagrange multipliers of the bounds."""

    def __init__(self, actor, critics: list, *, gamma: float, observation_key: str = "observation",
                 action_samples: int = 20, epsilon: float = 0.1, epsilon_mean: float = 0.01,
                 epsilon_sigma: float = 1e-4, initial_temperature: float = 1.0, initial_multiplier: float = 1.0):
        super().__init__(actor, critics, gamma=gamma, observation_key=observation_key)
        self.view = gaussian_view(actor)
        self.keep_targets()
        self.target_view = ActorView.of(self.keep_target_actor())
        self.action_samples, self.epsilon = action_samples, epsilon
        # the recipe's, not learned: out of the checkpoint
        self.register_buffer("bounds", torch.tensor([epsilon_mean, epsilon_sigma]), persistent=False)
        self.log_temperature = nn.Parameter(torch.tensor(math.log(initial_temperature)))
        #: the multipliers of the mean's and the covariance's bounds, in that order
        self.log_multipliers = nn.Parameter(torch.full((2,), math.log(initial_multiplier)))
        self.parameter_groups["dual"] = [self.log_temperature, self.log_multipliers]
        self.term_learners.update(loss_temperature="dual", loss_multipliers="dual")

    @property
    def batchable(self) -> bool:
        """Each gradient step draws its own action samples: seeds are not computed together under vmap."""
        return False

    def draw(self, observation: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, ...]]:
        """``action_samples`` draws of the target policy at each state: before the squash ``[N, B, ...]``,
        after it (the actions), and the target policy's (loc, scale)."""
        loc, scale = self.target_view.params_module(observation)
        pre_squash = loc + scale * torch.randn((self.action_samples, *loc.shape), device=loc.device, dtype=loc.dtype)
        action, view = pre_squash, self.target_view
        for transform in getattr(view.distribution_class(loc, scale, **view.distribution_kwargs), "transforms", ()):
            action = transform(action)
        return pre_squash, action, (loc, scale)

    def value(self, observation: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """The target critic's values ``[N, B]`` of ``action`` ``[N, B, ...]`` at ``observation`` ``[B, ...]``."""
        samples, states = action.shape[:2]
        repeated = observation.expand(samples, *observation.shape).flatten(0, 1)
        return self.target_q[0](repeated, action.flatten(0, 1)).float().reshape(samples, states)

    def terms(self, sample: Sample) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        observation = single_transitions(sample.observation, "mpo")
        next_observation = single_transitions(sample.next_observation, "mpo")
        with torch.no_grad():
            _, next_action, _ = self.draw(next_observation)
            target = sample.target(self.gamma, self.value(next_observation, next_action).mean(0).unsqueeze(-1))
            pre_squash, action, old = self.draw(observation)
            q_values = self.value(observation, action)
        critic, td_error = self.critic_term(sample, target)
        temperature = self.log_temperature.exp()
        weights = torch.softmax(q_values / temperature.detach(), 0)
        out = {"loss_qvalue": critic, "loss_temperature": dual(q_values, temperature, self.epsilon),
               "temperature": temperature.detach(), "q_value": q_values.mean()}
        return {**out, **self.m_step(observation, pre_squash, weights, old)}, td_error

    def m_step(self, observation: torch.Tensor, pre_squash: torch.Tensor, weights: torch.Tensor,
               old: tuple[torch.Tensor, ...]) -> dict[str, torch.Tensor]:
        """The actor's and the multipliers' terms, and the two KLs."""
        loc, scale = self.view.params_module(observation)
        log_likelihood = decoupled_log_likelihood(pre_squash, (loc, scale), old)
        fit = -(weights * log_likelihood).sum(0).mean()
        old_loc, old_scale = (part.flatten(1).float() for part in old)
        kl = torch.stack(gaussian_kl(old_loc, loc.flatten(1).float(), torch.diag_embed(old_scale.pow(2)),
                                     torch.diag_embed(scale.flatten(1).float().pow(2))))
        multipliers = self.log_multipliers.exp()
        return {"loss_actor": fit + (multipliers.detach() * kl).sum(),
                "loss_multipliers": (multipliers * (self.bounds - kl.detach())).sum(),
                "kl_mean": kl[0].detach(), "kl_sigma": kl[1].detach(),
                "multiplier_mean": multipliers[0].detach(), "multiplier_sigma": multipliers[1].detach()}


def decoupled_log_likelihood(pre_squash: torch.Tensor, new: tuple[torch.Tensor, torch.Tensor],
                             old: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """``log N(x; mu, Sigma_old) + log N(x; mu_old, Sigma)`` of each draw ``x`` ``[N, B, ...]``, summed over the
    action's dimensions: the mean fitted with the covariance held at the target policy's, and the other way round.
    Scored before the squash, whose Jacobian does not depend on the parameters."""
    (loc, scale), (old_loc, old_scale) = new, old
    mean_part = Normal(loc, old_scale).log_prob(pre_squash)
    covariance_part = Normal(old_loc, scale).log_prob(pre_squash)
    return (mean_part + covariance_part).flatten(2).sum(-1)


def objective(networks: ActorCriticNetworks, settings: Any) -> MPOLoss:
    """rlplug's MPO loss with the algorithm's actor and critic and its settings."""
    actor = networks["policy"]
    return MPOLoss(actor, networks["critics"], gamma=settings.gamma, observation_key=actor.in_keys[0],
                   action_samples=settings.action_samples, epsilon=settings.epsilon,
                   epsilon_mean=settings.epsilon_mean, epsilon_sigma=settings.epsilon_sigma,
                   initial_temperature=settings.initial_temperature, initial_multiplier=settings.initial_multiplier)
