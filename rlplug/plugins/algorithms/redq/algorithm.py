"""REDQ (Chen et al. 2021, randomized ensembled double Q-learning): SAC's tanh-Gaussian actor and automatic
entropy coefficient, an ensemble of ``critics`` Q-networks (N) with target copies, each critic's target the lowest
of a random subset of ``subset_size`` (M) target critics minus alpha log pi, and many gradient steps per env step
(``gradient_steps``, the update-to-data ratio G). The actor ascends the mean of all N critics.

Here: the algorithm (:class:`REDQ`) and the build of its loss, TorchRL's ``REDQLoss`` (:func:`torchrl_loss`),
which makes the ensemble from the recipe's ``critic`` network.
"""

from __future__ import annotations

from typing import Any

from tensordict.nn import TensorDictModuleBase

from rlplug.errors import UserError
from rlplug.plugins.algorithms.offpolicy.losses import (
    ENTROPY_GROUPS,
    ENTROPY_TERMS,
    default_target_entropy,
    one_env_actions,
    refuse_sequences,
    with_learners,
)
from rlplug.plugins.algorithms.redq import REDQConfig
from rlplug.plugins.algorithms.sac.algorithm import SAC
from rlplug.registry import protocols
from rlplug.registry.networks import ActorCriticNetworks
from rlplug.registry.protocols import capability


class REDQ(SAC):
    config: REDQConfig

    def build(self) -> TensorDictModuleBase:
        if self.config.subset_size >= self.config.critics:
            raise UserError(f"the target's subset of critics must be smaller than the ensemble (critics = "
                            f"{self.config.critics}), got {self.config.subset_size}", path="algorithm.subset_size")
        if capability(self.replay, protocols.ReplayBuffer.update_priority):
            raise UserError("TorchRL's REDQLoss does not read a prioritised buffer's importance weights, so its "
                            "samples would bias the critics; use 'uniform'", path="algorithm.replay_buffer")
        self.critics = self.config.critics
        return super().build()


def torchrl_loss(networks: ActorCriticNetworks, settings: Any, observation_spec, action_spec, **values: Any):
    """TorchRL's ``REDQLoss`` with the algorithm's actor and critic (TorchRL makes the ensemble of
    ``settings.critics`` from it), the target's subset size, the entropy coefficient and the discount.

    TorchRL registers the target entropy as a buffer when the loss first reads it; read here, it is part of
    the loss's state from the start, so that checkpoints load into a freshly built loss."""
    from torchrl.objectives import REDQLoss

    from rlplug.plugins.algorithms.loss_parts import unset_to

    refuse_sequences(networks, "REDQLoss")
    defaults = {"num_qvalue_nets": settings.critics, "sub_sample_len": settings.subset_size,
                "alpha_init": settings.initial_entropy_coef, "fixed_alpha": not settings.learn_entropy_coef,
                "target_entropy": default_target_entropy(settings, observation_spec, action_spec),
                "loss_function": "l2"}
    loss = REDQLoss(networks["policy"], networks["critic"], action_spec=one_env_actions(action_spec, observation_spec),
                    **unset_to(values, defaults))
    loss.target_entropy  # noqa: B018 (reading it registers its buffer)
    # its forward keeps only "next", the observation and the action: steps_to_next_obs never reaches its estimator
    return with_learners(loss, settings.gamma, ENTROPY_GROUPS, ENTROPY_TERMS, weighted=False, n_step=False)
