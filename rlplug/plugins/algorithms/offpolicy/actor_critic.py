"""The actor-critic shape DDPG, TD3 and SAC share: an actor and Q-critics of (observation, action), their
target copies, one learner for the actor and one for the critics, and memory (``lstm``, ``gru``) where the
networks are recurrent."""

from __future__ import annotations

import torch
from tensordict.nn import TensorDictModuleBase
from torch import nn

from rlplug.core.acting import tensor_function
from rlplug.core.recurrent import is_recurrent, sequence_function
from rlplug.errors import UserError
from rlplug.plugins.algorithms.offpolicy.base import OffPolicy
from rlplug.plugins.algorithms.offpolicy.parts import (EpisodeLabels, Learner, build_network, flat_target,
                                                      learning_rates, polyak_update, target_copy)
from rlplug.plugins.replay_buffers.buffers import SEQUENCES_NEED_UNIFORM
from rlplug.registry import protocols
from rlplug.registry.protocols import capability


class ActorCritic(OffPolicy):
    """An actor and ``critics`` Q-networks of (observation, action), each critic with a target copy, and a
    target actor unless :attr:`target_actor` is false; one learner for the actor, one for all critics."""

    critics = 1
    target_actor = True
    actor_role = "deterministic_policy"

    def build(self) -> TensorDictModuleBase:
        config, key = self.config, self.observation_key
        self.actor = build_network(config.policy, role=self.actor_role, **self.specs)
        self.critic_networks = nn.ModuleList(build_network(config.critic, role="q_value", **self.specs)
                                             for _ in range(self.critics))
        self.sequences = is_recurrent(self.actor) or is_recurrent(self.critic_networks)
        if self.sequences:
            if not is_recurrent(self.actor):  # episodes are told apart by the is_init of the actor's collection
                raise UserError("a recurrent critic needs a recurrent actor: set use = 'lstm' or 'gru' here too",
                                path="algorithm.policy")
            self.check_sequences()
            self.episodes = EpisodeLabels()
        function = sequence_function if self.sequences else tensor_function
        if self.actor_role == "deterministic_policy":
            self.mu = function(self.actor, [key])
        self.target_critics = target_copy(self.critic_networks)
        self.q = [function(c, [key, "action"]) for c in self.critic_networks]
        self.target_q = [function(c, [key, "action"]) for c in self.target_critics]
        if self.target_actor:
            self.actor_target = target_copy(self.actor)
            self.mu_target = function(self.actor_target, [key])
        actor_lr, critic_lr = learning_rates(config.lr)
        # recurrent layers keep their weights where cuDNN wants them: no flat parameters for them
        flat = not self.sequences
        self.learners = {"actor": Learner(list(self.actor.parameters()), actor_lr, config, self.device, flat=flat),
                         "critic": Learner(list(self.critic_networks.parameters()), critic_lr, config, self.device,
                                           flat=flat)}
        #: (target, online) pairs for :func:`polyak_update`
        self.targets = [(flat_target(self.target_critics, self.learners["critic"].trained),
                         self.learners["critic"].trained)]
        if self.target_actor:
            self.targets.append((flat_target(self.actor_target, self.learners["actor"].trained),
                                 self.learners["actor"].trained))
        low_high = self.action_bounds()
        self.action_scale = (low_high[1] - low_high[0]) / 2 if low_high else torch.ones(())
        self.action_low_high = low_high
        return self.actor

    def check_sequences(self) -> None:
        """What recurrent networks need of the rest of the recipe, as one-line errors naming the key."""
        config = self.config
        if config.burn_in >= config.sequence_length:
            raise UserError(f"must be less than sequence_length ({config.sequence_length}), got {config.burn_in}",
                            path="algorithm.burn_in")
        if config.batch_size % config.sequence_length:
            raise UserError(f"counts steps and must be a multiple of sequence_length ({config.sequence_length}) "
                            f"with recurrent networks, got {config.batch_size}", path="algorithm.batch_size")
        if self.preprocessor is not None:
            raise UserError("recurrent networks (lstm, gru) read the observations as the env gives them; use "
                            "the env's normalize_observations instead", path="algorithm.observation_preprocessor")
        if capability(self.replay, protocols.ReplayBuffer.update_priority):
            raise UserError(SEQUENCES_NEED_UNIFORM, path="algorithm.replay_buffer")

    def exploration_stages(self) -> list[TensorDictModuleBase]:
        if self.config.exploration_noise is None:
            return []
        self.noise = self.config.exploration_noise.build(action_spec=self.action_spec, device=self.device,
                                                         total_frames=self.total_frames)
        return [self.noise]

    def action_bounds(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        from rlplug.networks import action_bounds

        bounds = action_bounds(self.observation_spec, self.action_spec)
        return None if bounds is None else (bounds[0].to(self.device), bounds[1].to(self.device))

    def critic_loss(self, data: dict[str, torch.Tensor], target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Sum over the critics of the (importance-weighted) squared TD errors; and the first critic's TD error."""
        losses, td_error = [], None
        for q in self.q:
            error = q(data["observation"], data["action"]).float() - target
            td_error = error if td_error is None else td_error
            losses.append(self.weighted_mean(error.pow(2), data["weight"]))
        return sum(losses), td_error

    def update_targets(self) -> None:
        for target, online in self.targets:
            polyak_update(target, online, self.config.tau)

    def modules(self) -> dict[str, nn.Module]:
        modules = {"actor": self.actor, "critics": self.critic_networks, "target_critics": self.target_critics}
        if self.target_actor:
            modules["target_actor"] = self.actor_target
        return modules
