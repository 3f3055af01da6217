"""The algorithm kit: what an algorithm plugin is built from, the same pieces rlplug's own algorithms use.

An algorithm is three things, usually one folder (``rlplug/plugins/algorithms/<name>/`` for the built-ins, a
package of its own for a plugin):

- **its config**: a frozen dataclass whose fields are the recipe table, subclassing a family's config
  (:class:`OffPolicyConfig`, :class:`ActorCriticConfig` with the mixins :class:`PolyakTargets`,
  :class:`DelayedActorConfig`, :class:`EntropyConfig`; :class:`OnPolicyConfig`); the field types are the
  recipe's rules (:data:`Count`, :data:`Rate`, ``Annotated[..., rlplug.Range(...)]``), a component field's
  default is :func:`named`. :func:`factory_for` turns it into the factory ``register`` takes, importing the
  class only when the algorithm is built (listing and validating recipes never load torch);
- **its class**: a subclass of a family's base, whose update is written once in one file
  (:class:`OffPolicy` in ``offpolicy/base.py``: store, schedules, then per gradient step sample, loss, one
  backward pass, each learner's step, targets; :class:`OnPolicy` in ``onpolicy/base.py``: estimates, then epochs
  of minibatches, loss, step). A subclass builds its networks (``build``, ``trained_networks``; a network of
  several outputs per value asks for :class:`rlplug.networks.Role`) and names its learners (``learner_names``);
  the base brings replay (prioritised too), learners and gradient clipping, target updates, pytorchrl's
  gradient interface (Ray's gradient mode, learners), live parameters for ``rlplug set``, ``run.compile``,
  checkpoints, resume and export;
- **its loss**: a TorchRL ``LossModule``, rlplug's own or TorchRL's, registered as a ``loss`` component for the
  algorithm (:func:`serving`), telling which learner each term trains (:func:`with_learners` for TorchRL's).

The names here stay as they are across rlplug releases; the modules behind them may move. The torch-free ones
(configs, option types, :func:`factory_for`, :func:`named`, :func:`serving`) are imported at once; the classes
and loss helpers, which need torch, on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from rlplug.plugins.algorithms.common import (
    OPTIMIZERS,
    REPLAY_CONTEXT,
    SCHEDULES,
    Count,
    Fraction,
    Frames,
    NonNegative,
    Positive,
    Rate,
    factory_for,
    loss_fits,
    named,
)
from rlplug.plugins.algorithms.loss_parts import Distance, serving, unset_to
from rlplug.plugins.algorithms.offpolicy.config import (
    ActorCriticConfig,
    DelayedActorConfig,
    DQNConfig,
    EntropyConfig,
    LearningRate,
    OffPolicyConfig,
    PolyakTargets,
    SequencesConfig,
)
from rlplug.plugins.algorithms.onpolicy.config import OnPolicyConfig
from rlplug.plugins.algorithms.parameters import Entry

if TYPE_CHECKING:
    from rlplug.plugins.algorithms.dqn.algorithm import DQN
    from rlplug.plugins.algorithms.networks import build_network
    from rlplug.plugins.algorithms.offpolicy.actor_critic import ActorCritic, DelayedActor, Stochastic
    from rlplug.plugins.algorithms.offpolicy.base import OffPolicy
    from rlplug.plugins.algorithms.offpolicy.losses import (
        ActorCriticLoss,
        EntropyTerms,
        Sample,
        TargetCritics,
        default_target_entropy,
        one_env_actions,
        polyak_update,
        target_copy,
        with_learners,
    )
    from rlplug.plugins.algorithms.offpolicy.parts import exploring
    from rlplug.plugins.algorithms.onpolicy.base import OnPolicy, OnPolicyLoss

#: the names that need torch, and the module each is in: imported on first use
_WITH_TORCH = {
    "OffPolicy": "rlplug.plugins.algorithms.offpolicy.base",
    "ActorCritic": "rlplug.plugins.algorithms.offpolicy.actor_critic",
    "Stochastic": "rlplug.plugins.algorithms.offpolicy.actor_critic",
    "DelayedActor": "rlplug.plugins.algorithms.offpolicy.actor_critic",
    "DQN": "rlplug.plugins.algorithms.dqn.algorithm",
    "OnPolicy": "rlplug.plugins.algorithms.onpolicy.base",
    "OnPolicyLoss": "rlplug.plugins.algorithms.onpolicy.base",
    "ActorCriticLoss": "rlplug.plugins.algorithms.offpolicy.losses",
    "TargetCritics": "rlplug.plugins.algorithms.offpolicy.losses",
    "EntropyTerms": "rlplug.plugins.algorithms.offpolicy.losses",
    "Sample": "rlplug.plugins.algorithms.offpolicy.losses",
    "default_target_entropy": "rlplug.plugins.algorithms.offpolicy.losses",
    "one_env_actions": "rlplug.plugins.algorithms.offpolicy.losses",
    "polyak_update": "rlplug.plugins.algorithms.offpolicy.losses",
    "target_copy": "rlplug.plugins.algorithms.offpolicy.losses",
    "with_learners": "rlplug.plugins.algorithms.offpolicy.losses",
    "exploring": "rlplug.plugins.algorithms.offpolicy.parts",
    "build_network": "rlplug.plugins.algorithms.networks",
}


def __getattr__(name: str) -> Any:
    if name in _WITH_TORCH:
        value = getattr(importlib.import_module(_WITH_TORCH[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'rlplug.algorithms' has no attribute '{name}'")


__all__ = [
    # configs and the recipe's rules (torch-free)
    "OffPolicyConfig", "ActorCriticConfig", "PolyakTargets", "DelayedActorConfig", "EntropyConfig",
    "SequencesConfig", "OnPolicyConfig", "DQNConfig", "Count", "Fraction", "Frames", "NonNegative", "Positive", "Rate",
    "LearningRate", "OPTIMIZERS", "SCHEDULES", "Distance",
    # registration (torch-free)
    "factory_for", "named", "loss_fits", "serving", "unset_to", "REPLAY_CONTEXT",
    # what `rlplug set` may change: a config's `live_parameters` table, {name: Entry(...)} (torch-free)
    "Entry",
    # the families (torch)
    "OffPolicy", "ActorCritic", "Stochastic", "DelayedActor", "DQN", "OnPolicy",
    # losses (torch)
    "OnPolicyLoss", "ActorCriticLoss", "TargetCritics", "EntropyTerms", "Sample", "with_learners",
    "one_env_actions", "default_target_entropy", "polyak_update", "target_copy", "exploring", "build_network",
]
