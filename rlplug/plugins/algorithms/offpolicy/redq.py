"""REDQ (Chen et al. 2021, randomized ensembled double Q-learning): SAC's tanh-Gaussian actor and automatic
entropy coefficient, an ensemble of ``critics`` Q-networks (N) with target copies, each critic's target the lowest
of a random subset of ``subset_size`` (M) target critics minus alpha log pi, and many gradient steps per env step
(``gradient_steps``, the update-to-data ratio G). The actor ascends the mean of all N critics. The loss is
TorchRL's ``REDQLoss``, which makes the ensemble from the recipe's ``critic`` network.
"""

from __future__ import annotations

from tensordict.nn import TensorDictModuleBase

from rlplug.errors import UserError
from rlplug.plugins.algorithms.offpolicy.config import REDQConfig
from rlplug.plugins.algorithms.offpolicy.sac import SAC
from rlplug.registry import protocols
from rlplug.registry.protocols import capability


class REDQ(SAC):
    # REDQ's config is SAC's keys but the recurrent ones (check_sequences refuses recurrent networks)
    config: REDQConfig  # type: ignore[assignment]

    def build(self) -> TensorDictModuleBase:
        if self.config.subset_size >= self.config.critics:
            raise UserError(f"the target's subset of critics must be smaller than the ensemble (critics = "
                            f"{self.config.critics}), got {self.config.subset_size}", path="algorithm.subset_size")
        if capability(self.replay, protocols.ReplayBuffer.update_priority):
            raise UserError("TorchRL's REDQLoss does not read a prioritised buffer's importance weights, so its "
                            "samples would bias the critics; use 'uniform'", path="algorithm.replay_buffer")
        self.critics = self.config.critics
        return super().build()

    def check_sequences(self) -> None:
        raise UserError("REDQ learns from single transitions; recurrent networks (lstm, gru) learn from sequences "
                        "with ddpg, td3 or sac", path="algorithm")
