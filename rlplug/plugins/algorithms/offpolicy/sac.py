"""SAC (Haarnoja et al. 2018, with the automatic entropy coefficient): a tanh-Gaussian actor, twin critics with
target copies (no target actor), and an entropy coefficient alpha tuned towards a target entropy (``-|A|`` by
default). The loss (``sac-loss``, or TorchRL's ``SACLoss``) holds the formulas and alpha; here, its learners'
rates: the entropy coefficient's is ``entropy_lr`` (unset: the critic's).

The actor is the ``policy`` role of any network (``mlp`` with ``log_std = "state"`` and ``squash = "tanh"``
is the usual SAC actor); evaluation takes its deterministic action (the squashed mean).
"""

from __future__ import annotations

from rlplug.plugins.algorithms.offpolicy.actor_critic import ActorCritic
from rlplug.plugins.algorithms.offpolicy.config import SACConfig


class SAC(ActorCritic):
    config: SACConfig
    critics = 2
    actor_role = "policy"
    learner_names = ("actor", "critic", "entropy")

    def learning_rates(self) -> dict[str, float]:
        rates = super().learning_rates()
        if "entropy" in rates and self.config.entropy_lr is not None:
            rates["entropy"] = self.config.entropy_lr
        return rates
