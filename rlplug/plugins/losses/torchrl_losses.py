"""TorchRL's own loss modules, built with an algorithm's networks and settings.

Each factory of :mod:`rlplug.plugins.losses` hands its recipe keys here; a key the recipe leaves unset takes
the algorithm's setting where the algorithm has one (``clip_epsilon``, ``entropy_coef`` -> ``entropy_coeff``,
``value_coef`` -> ``critic_coeff``, ``value_clip`` -> ``clip_value``, ``normalize_advantages`` ->
``normalize_advantage``, ``gamma``...), so that swapping the loss changes the loss and nothing else; any other
key keeps TorchRL's default. Where TorchRL's loss has no such option (A2C's and REINFORCE's normalisation), the
algorithm's setting cannot apply and asking for it is a one-line error. The off-policy algorithms build
TorchRL's losses in their own folders (``rlplug/plugins/algorithms/<name>/algorithm.py``), with :func:`unset_to`
and :func:`with_target_updates` from :mod:`rlplug.plugins.algorithms.loss_parts`.
"""

from __future__ import annotations

from typing import Any

from rlplug.errors import UserError
from rlplug.plugins.algorithms.loss_parts import unset_to, with_target_updates
from rlplug.plugins.algorithms.onpolicy.config import OnPolicyConfig


def onpolicy_defaults(settings: OnPolicyConfig) -> dict[str, Any]:
    """The on-policy algorithm's settings under TorchRL's PPO/A2C names."""
    return {"entropy_coeff": settings.entropy_coef, "entropy_bonus": settings.entropy_coef > 0,
            "critic_coeff": settings.value_coef, "loss_critic_type": "l2", "clip_value": settings.value_clip}


def ppo_loss(kind: str, networks: dict, settings: OnPolicyConfig, **values: Any):
    """``ClipPPOLoss`` or ``KLPENPPOLoss`` with the algorithm's policy and critic; the clip range, or the KL target
    and starting beta, are the algorithm's where it has them (PPO's ``clip_epsilon``, PPO-KL's ``kl_target`` and
    ``kl_penalty``; TorchRL's defaults otherwise)."""
    from torchrl.objectives import ClipPPOLoss, KLPENPPOLoss

    defaults = {**onpolicy_defaults(settings), "normalize_advantage": settings.normalize_advantages}
    if kind == "clip":
        defaults["clip_epsilon"] = getattr(settings, "clip_epsilon", None)
        return ClipPPOLoss(networks["policy"], networks.get("critic"), **unset_to(values, defaults))
    defaults.update(dtarg=getattr(settings, "kl_target", None), beta=getattr(settings, "kl_penalty", None))
    # the penalty's "old" policy is a copy of the actor (delay_actor), refreshed before each update, since
    # rlplug's batches record log-probabilities, not the distribution's parameters
    loss = KLPENPPOLoss(networks["policy"], networks.get("critic"), delay_actor=True, **unset_to(values, defaults))
    loss.adapts_per_minibatch = True  # beta follows each minibatch's KL: Ray's gradient workers cannot agree on it
    return with_target_updates(loss)


def score_loss(kind: str, networks: dict, settings: OnPolicyConfig, **values: Any):
    """``A2CLoss`` or ``ReinforceLoss``: the score-function gradient with a critic."""
    from torchrl.objectives import A2CLoss, ReinforceLoss

    if settings.normalize_advantages:
        name = "A2CLoss" if kind == "a2c" else "ReinforceLoss"
        raise UserError(f"TorchRL's {name} does not normalise advantages, and this algorithm asks for it; set "
                        f"algorithm.normalize_advantages = false, or use a loss that normalises (ClipPPOLoss)",
                        path="algorithm.loss")
    defaults = onpolicy_defaults(settings)
    if kind == "a2c":
        return A2CLoss(networks["policy"], networks.get("critic"), **unset_to(values, defaults))
    keep = {"loss_critic_type", "clip_value"}  # REINFORCE's loss has no coefficients and no entropy bonus
    return ReinforceLoss(networks["policy"], networks.get("critic"),
                         **unset_to(values, {k: v for k, v in defaults.items() if k in keep}))
