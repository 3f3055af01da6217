"""The actor-critic shape DDPG, TD3, SAC and CrossQ share: an actor and Q-critics of (observation, action), built
from the recipe's networks; memory (``lstm``, ``gru``) where they are recurrent. The loss (``ddpg-loss``,
``td3-loss``, ``sac-loss``, ``crossq-loss``, or TorchRL's) owns any target copies; the learners are the actor's
and the critics' (and the entropy coefficient's: :class:`Stochastic`). :class:`DelayedActor`: the actor moved
once every ``policy_delay`` critic steps (TD3, CrossQ)."""

from __future__ import annotations

from tensordict.nn import TensorDictModuleBase
from torch import nn

from rlplug.core.recurrent import is_recurrent
from rlplug.errors import UserError
from rlplug.plugins.algorithms.networks import build_network
from rlplug.plugins.algorithms.offpolicy.base import OffPolicy
from rlplug.plugins.algorithms.offpolicy.config import (
    ActorCriticConfig,
    DelayedActorConfig,
    EntropyConfig,
    SequencesConfig,
)
from rlplug.plugins.algorithms.offpolicy.parts import EpisodeLabels, learning_rates
from rlplug.plugins.replay_buffers.buffers import SEQUENCES_NEED_UNIFORM
from rlplug.registry import protocols
from rlplug.registry.networks import ActorCriticNetworks
from rlplug.registry.protocols import capability


class ActorCritic(OffPolicy):
    """An actor (``actor_role``) and ``critics`` Q-networks of (observation, action)."""

    config: ActorCriticConfig
    learner_names: tuple[str, ...] = ("actor", "critic")

    critics = 1
    actor_role = "deterministic_policy"

    def build(self) -> TensorDictModuleBase:
        config = self.config
        self.actor = build_network(config.policy, role=self.actor_role, **self.specs)
        self.critic_networks = nn.ModuleList(build_network(config.critic, role=self.critic_role(), **self.specs)
                                             for _ in range(self.critics))
        self.sequences = is_recurrent(self.actor) or is_recurrent(self.critic_networks)
        if self.sequences:
            if not is_recurrent(self.actor):  # episodes are told apart by the is_init of the actor's collection
                raise UserError("a recurrent critic needs a recurrent actor: set use = 'lstm' or 'gru' here too",
                                path="algorithm.policy")
            self.check_sequences()
            self.episodes = EpisodeLabels()
        return self.actor

    def critic_role(self) -> str:
        """The role each critic is built for: ``q_value``, or a :class:`rlplug.networks.Role` of several outputs
        per value for a distributional critic (TQC's quantiles)."""
        return "q_value"

    def trained_networks(self) -> ActorCriticNetworks:
        return {"policy": self.actor, "critic": self.critic_networks[0], "critics": list(self.critic_networks)}

    def learning_rates(self) -> dict[str, float]:
        actor, critic = learning_rates(self.config.lr)
        return {name: actor if name == "actor" else critic for name in self.loss_module.parameter_groups}

    def check_sequences(self) -> None:
        """What recurrent networks need of the rest of the recipe, as one-line errors naming the key."""
        config = self.config
        if not isinstance(config, SequencesConfig):
            raise UserError(f"{type(self).__name__.lower()} learns from single transitions; recurrent networks (lstm, "
                            f"gru) learn from sequences with ddpg, td3 or sac", path="algorithm.policy")
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


class Stochastic(ActorCritic):
    """An actor that explores by sampling its policy, with an entropy coefficient (``entropy_lr``; unset: the
    critic's learning rate) tuned towards a target entropy (SAC, CrossQ)."""

    config: EntropyConfig
    actor_role = "policy"
    learner_names = ("actor", "critic", "entropy")

    def learning_rates(self) -> dict[str, float]:
        rates = super().learning_rates()
        if "entropy" in rates and self.config.entropy_lr is not None:
            rates["entropy"] = self.config.entropy_lr
        return rates


class DelayedActor(ActorCritic):
    """The actor (and :attr:`delayed_learners`) and any targets moved once every ``policy_delay`` critic steps; a
    loss with ``with_actor`` is told to leave the actor's terms out on the other steps."""

    config: ActorCriticConfig
    #: the learners stepped on the actor's steps only
    delayed_learners: tuple[str, ...] = ("actor",)

    def updates_actor(self) -> bool:
        config = self.config
        if not isinstance(config, DelayedActorConfig):  # the mixin gives the key; read live (rlplug set changes it)
            raise TypeError(f"{type(self).__name__}'s config must subclass DelayedActorConfig (its policy_delay)")
        return (self.steps + 1) % config.policy_delay == 0

    def stepped_learners(self) -> set[str]:
        stepped = set(self.learners.groups) - (set() if self.updates_actor() else set(self.delayed_learners))
        if protocols.has_member(self.loss_module, protocols.Loss.with_actor):  # no actor term where it is not stepped
            self.loss_module.with_actor = "actor" in stepped
        return stepped

    def moves_targets(self) -> bool:
        return self.updates_actor()
