"""rlplug's own losses for the off-policy family, as TorchRL ``LossModule``s: a replay sample in (TorchRL's keys:
``observation``, ``action``, ``("next", "observation" | "reward" | "terminated")``, prioritised replay's
``weight``), ``loss_*`` terms out, the TD error written back under ``td_error`` for new priorities. They call
the networks on the sample's tensors directly, own their target networks (:meth:`update_targets`), and say
which optimiser each term trains (``parameter_groups``, ``term_learners``), as rlplug's builds of TorchRL's
``DDPGLoss``, ``TD3Loss``, ``SACLoss`` and ``DQNLoss`` do.

- DDPG (Lillicrap et al. 2016): ``loss_value`` regresses ``Q(s, a)`` on ``r + gamma (1 - terminated)
  Q'(s', mu'(s'))``; ``loss_actor`` ascends ``Q(s, mu(s))``, the critic's parameters held still.
- TD3 (Fujimoto et al. 2018): twin critics (``loss_qvalue``, both on the lower target), clipped Gaussian noise
  on the target action (fractions of the action half-range), the actor and targets moved every
  ``policy_delay`` steps (the algorithm decides, through :attr:`with_actor`).
- SAC (Haarnoja et al. 2018): ``loss_qvalue`` on ``r + gamma (1 - terminated) (min Q'(s', a') - alpha log
  pi(a'|s'))``, ``loss_actor`` ``alpha log pi(a|s) - min Q(s, a)``, ``loss_alpha`` ``-log alpha (log pi(a|s) +
  target entropy)``.
- DQN (Mnih et al. 2015): ``loss``, the Huber loss of ``Q(s, a)`` against ``r + gamma (1 - terminated)
  Q'(s', argmax)``, the argmax the target network's (or, double DQN, the online network's).

Every term is computed from the parameters as they are before the step, and each term's gradient reaches only
its own learner's parameters; the algorithm takes one backward pass of their sum.

With recurrent networks (:mod:`rlplug.core.recurrent`), a sample is ``[sequences]`` with observations
``[sequences, L + 1, ...]`` and ``is_init``, the other entries from the burn-in on.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import TypeVar

import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn
from torch.nn import functional
from torchrl.objectives import LossModule

from rlplug.core.acting import ActorView, tensor_function
from rlplug.core.recurrent import ObservationSequence, is_recurrent, sequence_function

Network = TypeVar("Network", bound=nn.Module)


def target_copy(network: Network) -> Network:
    """A frozen deep copy of ``network``, moved towards it by :func:`polyak_update`."""
    target = copy.deepcopy(network)
    target.requires_grad_(False)
    return target


@torch.no_grad()
def polyak_update(target: nn.Module, online: nn.Module, tau: float) -> None:
    """``target = (1 - tau) target + tau online`` for every parameter, in place (``tau = 1``: a copy)."""
    for t, o in zip(target.parameters(), online.parameters()):
        if tau == 1.0:
            t.copy_(o)
        else:
            t.lerp_(o, tau)


class HeldStill(nn.Module):
    """A function of ``networks`` that :meth:`still` computes with their parameters out of the autograd graph:
    the gradient of what it returns flows to its inputs, not to them (the critics under the actor's term).
    The networks' own parameters are switched to ``requires_grad = False`` for the call (a few microseconds);
    under ``torch.func.functional_call`` and ``torch.vmap`` (seeds trained together) the networks hold tensors
    swapped in, whose flag cannot be switched, and torch.compile cannot trace the switch (``run.compile``), so
    there they are swapped for their detached selves."""

    def __init__(self, networks: nn.Module, function):
        super().__init__()
        self.networks, self.function = networks, function

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        return self.function(*args)

    def still(self, *args: torch.Tensor) -> torch.Tensor:
        parameters = list(self.networks.parameters())
        own = all(isinstance(p, nn.Parameter) for p in parameters)
        if own and not torch.compiler.is_compiling():  # the networks' own: switched off, then on
            trained = [p for p in parameters if p.requires_grad]
            for p in trained:
                p.requires_grad_(False)
            try:
                return self.function(*args)
            finally:
                for p in trained:
                    p.requires_grad_(True)
        # tensors swapped in by an outer functional_call (seeds under vmap), or a compiled loss (torch.compile
        # cannot trace the flag's switch): swapped for their detached selves
        detached = {f"networks.{name}": value.detach() for name, value in self.networks.named_parameters()}
        return torch.func.functional_call(self, detached, args)


@dataclass
class Sample:
    """A replay sample's tensors as the losses read them."""

    observation: torch.Tensor | ObservationSequence
    next_observation: torch.Tensor | ObservationSequence
    action: torch.Tensor
    reward: torch.Tensor
    not_terminated: torch.Tensor
    weight: torch.Tensor | None

    @classmethod
    def of(cls, data: TensorDictBase, burn_in: int = 0) -> Sample:
        terminated = data.get(("next", "terminated"))
        weight = data.get("weight", None)
        if "is_init" in data.keys():  # sequences of recurrent networks
            observations = ObservationSequence(data.get("observation"), data.get("is_init").bool(), burn_in, 0)
            observation, next_observation = observations, observations.next()
        else:
            observation, next_observation = data.get("observation"), data.get(("next", "observation"))
        return cls(observation, next_observation, data.get("action"), data.get(("next", "reward")).float(),
                   (~terminated.bool()).float(), None if weight is None else weight.reshape(-1, 1))

    def mean(self, loss: torch.Tensor) -> torch.Tensor:
        """Per-sample losses averaged, with prioritised replay's importance weights where there are some."""
        return (loss * self.weight).mean() if self.weight is not None else loss.mean()

    def target(self, gamma: float, next_value: torch.Tensor) -> torch.Tensor:
        """``reward + gamma * next_value``, the bootstrap dropped where the episode terminated."""
        return self.reward + gamma * self.not_terminated * next_value.float()


class ActorCriticLoss(LossModule):
    """DDPG's, TD3's or SAC's loss (``variant``) on an actor and its critics of (observation, action)."""

    #: the action bounds, where there are some
    action_low: torch.Tensor
    action_high: torch.Tensor

    def __init__(self, actor, critics: list, *, variant: str, gamma: float, observation_key: str = "observation",
                 action_bounds: tuple[torch.Tensor, torch.Tensor] | None = None, policy_noise: float = 0.2,
                 noise_clip: float = 0.5, alpha_init: float = 1.0, learn_alpha: bool = True,
                 target_entropy: float = -1.0, burn_in: int = 0):
        super().__init__()
        self.variant, self.gamma, self.burn_in = variant, gamma, burn_in
        self.policy_noise, self.noise_clip, self.target_entropy = policy_noise, noise_clip, target_entropy
        self.actor_network, self.critic_networks = actor, nn.ModuleList(critics)
        self.target_critics = target_copy(self.critic_networks)
        self.target_actor = target_copy(actor) if variant != "sac" else None
        sequences = is_recurrent(actor) or is_recurrent(self.critic_networks)
        function = sequence_function if sequences else tensor_function
        key = observation_key
        self.q = [function(c, [key, "action"]) for c in self.critic_networks]
        # every critic's value of (observation, action), the critics held still: not a submodule of the loss
        # (its parameters are the critics'), so set past nn.Module's registration
        all_critics = variant == "sac"  # DDPG and TD3 ascend the first critic alone
        object.__setattr__(self, "held_still", HeldStill(self.critic_networks, lambda observation, action: [
            q(observation, action) for q in (self.q if all_critics else self.q[:1])]))
        self.target_q = [function(c, [key, "action"]) for c in self.target_critics]
        if variant == "sac":
            self.view = ActorView.of(actor)
            self.log_alpha = nn.Parameter(torch.tensor(math.log(alpha_init)), requires_grad=learn_alpha)
        else:
            self.mu = function(actor, [key])
            self.mu_target = function(self.target_actor, [key])
        if action_bounds is not None:
            self.register_buffer("action_low", action_bounds[0])
            self.register_buffer("action_high", action_bounds[1])
        self.action_bounds = action_bounds
        #: whether to compute the actor's term (TD3 moves the actor every policy_delay steps only)
        self.with_actor = True
        critic_term = "loss_value" if variant == "ddpg" else "loss_qvalue"
        self.parameter_groups = {"actor": list(actor.parameters()), "critic": list(self.critic_networks.parameters())}
        self.term_learners = {"loss_actor": "actor", critic_term: "critic"}
        self.learn_alpha = variant == "sac" and learn_alpha  # not log_alpha.requires_grad: False under vmap
        if self.learn_alpha:
            self.parameter_groups["entropy"] = [self.log_alpha]
            self.term_learners["loss_alpha"] = "entropy"
        #: each learner's target copies, parameter by parameter as in parameter_groups (update_targets' pairs)
        self.target_parameters = {"critic": list(self.target_critics.parameters())}
        if self.target_actor is not None:
            self.target_parameters["actor"] = list(self.target_actor.parameters())

    @property
    def batchable(self) -> bool:
        """Several seeds at once under ``torch.vmap`` (seeds trained together): feed-forward networks only (the
        sequences of recurrent ones are not stacked)."""
        return not is_recurrent(self.actor_network) and not is_recurrent(self.critic_networks)

    def forward(self, data: TensorDictBase) -> TensorDictBase:
        sample = Sample.of(data, self.burn_in)
        if self.variant == "sac":
            out, td_error = self.soft_terms(sample)
        else:
            out, td_error = self.deterministic_terms(sample)
        if not isinstance(sample.observation, ObservationSequence):  # sequences learn without priorities
            data.set("td_error", td_error.detach().abs().reshape(-1))
        return TensorDict(out, batch_size=[])

    def critic_term(self, sample: Sample, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Sum over the critics of the weighted squared TD errors; and the first critic's TD error."""
        errors = [q(sample.observation, sample.action).float() - target for q in self.q]
        total = sample.mean(errors[0].pow(2))
        for error in errors[1:]:
            total = total + sample.mean(error.pow(2))
        return total, errors[0]

    def deterministic_terms(self, sample: Sample) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        with torch.no_grad():
            action = self.mu_target(sample.next_observation)
            if self.variant == "td3":  # target policy smoothing, in fractions of the action half-range
                noise = (torch.randn_like(action) * self.policy_noise).clamp(-self.noise_clip, self.noise_clip)
                scale = (self.action_high - self.action_low) / 2 if self.action_bounds is not None else 1.0
                action = action + noise * scale
                if self.action_bounds is not None:
                    action = action.clamp(self.action_low, self.action_high)
            next_value = torch.stack([q(sample.next_observation, action).float() for q in self.target_q]).min(0).values
            target = sample.target(self.gamma, next_value)
        critic, td_error = self.critic_term(sample, target)
        out = {"loss_value" if self.variant == "ddpg" else "loss_qvalue": critic,
               "pred_value": (td_error.detach() + target).mean(), "target_value": target.mean()}
        if self.with_actor:
            q_mu = self.held_still.still(sample.observation, self.mu(sample.observation))
            out["loss_actor"] = -q_mu[0].float().mean()
        return out, td_error

    def soft_terms(self, sample: Sample) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        observation, next_observation = sample.observation, sample.next_observation
        if isinstance(observation, ObservationSequence) or isinstance(next_observation, ObservationSequence):
            raise TypeError("sac learns from single transitions: recurrent networks (sequences) serve ddpg and td3")
        alpha = self.log_alpha.detach().exp()
        action, log_prob = self.sample_actions(observation)
        with torch.no_grad():
            next_action, next_log_prob = self.sample_actions(next_observation)
            next_q = torch.stack([q(sample.next_observation, next_action).float() for q in self.target_q]).min(0).values
            target = sample.target(self.gamma, next_q - alpha * next_log_prob)
        critic, td_error = self.critic_term(sample, target)
        q_pi = torch.stack([q.float() for q in self.held_still.still(sample.observation, action)]).min(0).values
        out = {"loss_qvalue": critic, "loss_actor": (alpha * log_prob - q_pi).mean(),
               "alpha": alpha, "entropy": -log_prob.detach().mean()}
        if self.learn_alpha:
            out["loss_alpha"] = -(self.log_alpha * (log_prob.detach() + self.target_entropy)).mean()
        return out, td_error

    def sample_actions(self, observation: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Reparameterised actions and their log-probabilities (``[batch, 1]``), scored on the same pre-tanh
        sample where the distribution allows (TanhNormal's ``rsample_and_log_prob``)."""
        dist = self.view.distribution(observation)
        if hasattr(dist, "rsample_and_log_prob"):
            action, log_prob = dist.rsample_and_log_prob()
        else:
            action = dist.rsample()
            log_prob = dist.log_prob(action)
        return action, log_prob.float().reshape(-1, 1)

    @torch.no_grad()
    def update_targets(self, tau: float) -> None:
        polyak_update(self.target_critics, self.critic_networks, tau)
        if self.target_actor is not None:
            polyak_update(self.target_actor, self.actor_network, tau)


class DQNObjective(LossModule):
    """DQN's loss on a Q-network writing one value per discrete action (one-hot or index actions)."""

    def __init__(self, q_network, *, gamma: float, double: bool, one_hot: bool, observation_key: str = "observation"):
        super().__init__()
        self.gamma, self.double, self.one_hot = gamma, double, one_hot
        self.value_network = q_network
        self.target_value_network = target_copy(q_network)
        self.q = tensor_function(q_network, [observation_key])
        self.target_q = tensor_function(self.target_value_network, [observation_key])
        self.parameter_groups = {"q": list(q_network.parameters())}
        self.term_learners = {"loss": "q"}
        self.target_parameters = {"q": list(self.target_value_network.parameters())}

    @property
    def batchable(self) -> bool:
        """Several seeds at once under ``torch.vmap`` (seeds trained together)."""
        return True

    def forward(self, data: TensorDictBase) -> TensorDictBase:
        sample = Sample.of(data)
        with torch.no_grad():
            next_values = self.target_q(sample.next_observation).float()
            if self.double:  # the online network chooses, the target network values
                best = self.q(sample.next_observation).argmax(-1, keepdim=True)
                next_value = next_values.gather(-1, best)
            else:
                next_value = next_values.max(-1, keepdim=True).values
            target = sample.target(self.gamma, next_value)
        action = sample.action
        index = action.argmax(-1, keepdim=True) if self.one_hot else action.reshape(-1, 1).long()
        q = self.q(sample.observation).float().gather(-1, index)
        loss = sample.mean(functional.smooth_l1_loss(q, target, reduction="none"))
        data.set("td_error", (q.detach() - target).abs().reshape(-1))
        return TensorDict({"loss": loss, "q_value": q.detach().mean()}, batch_size=[])

    @torch.no_grad()
    def update_targets(self, tau: float) -> None:
        polyak_update(self.target_value_network, self.value_network, tau)
