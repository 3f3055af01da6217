"""Losses: what an algorithm minimises, as TorchRL ``LossModule``s (a TensorDict in, ``loss_*`` terms out).

Every built-in algorithm takes a nested ``[algorithm.loss]``. A loss that serves one algorithm is registered by
that algorithm's folder (``rlplug/plugins/algorithms/<name>/``: ``ppo-loss``, ``sac-loss``, TorchRL's ``SACLoss``...);
here are those that serve the whole on-policy family: rlplug's score-function and surrogate losses
(:mod:`rlplug.plugins.algorithms.onpolicy.losses`) and TorchRL's ``ClipPPOLoss``, ``KLPENPPOLoss``, ``A2CLoss`` and
``ReinforceLoss``, built with the algorithm's networks, their constructor options as recipe keys. A key left unset
takes the algorithm's setting where it has one (``torchrl_losses.py``). Each factory says which algorithms it serves
(``serves``), checked when the recipe is validated.
"""

from __future__ import annotations

from typing import Annotated

from rlplug.plugins.algorithms.loss_parts import Coefficient, Distance, Samples, serving
from rlplug.plugins.algorithms.onpolicy.config import OnPolicyConfig
from rlplug.registry.hookspecs import hookimpl
from rlplug.registry.schema import Range

ONPOLICY = ("ppo", "ppo-kl", "a2c", "vpg", "surrogate", "impala")


@serving(*ONPOLICY)
def make_policy_gradient_loss(networks, settings: OnPolicyConfig):
    """rlplug's score-function loss (REINFORCE, A2C, IMPALA): -log pi(a|s) A, value and entropy terms. Its options
    are the algorithm's keys (entropy_coef, value_coef...)."""
    from rlplug.plugins.algorithms.onpolicy.losses import ScoreFunctionLoss

    return ScoreFunctionLoss.from_settings(networks, settings)


@serving(*ONPOLICY)
def make_surrogate_loss(networks, settings: OnPolicyConfig):
    """rlplug's unclipped importance-ratio surrogate loss, value and entropy terms. Its options are the
    algorithm's keys (entropy_coef, value_coef...)."""
    from rlplug.plugins.algorithms.onpolicy.losses import SurrogateLoss

    return SurrogateLoss.from_settings(networks, settings)


@serving(*ONPOLICY)
def make_clip_ppo_loss(
    networks, settings,
    #: the ratio's clip range (unset: the algorithm's clip_epsilon)
    clip_epsilon: Annotated[float, Range(gt=0.0)] | None = None,
    #: entropy bonus weight (unset: the algorithm's entropy_coef)
    entropy_coeff: Coefficient | None = None,
    #: critic loss weight (unset: the algorithm's value_coef)
    critic_coeff: Coefficient | None = None,
    #: the critic's distance to its target (unset: 'l2', the algorithm's squared error)
    loss_critic_type: Distance | None = None,
    #: normalise advantages per minibatch (unset: the algorithm's normalize_advantages)
    normalize_advantage: bool | None = None,
    #: clip the value around its collection-time value (unset: the algorithm's value_clip)
    clip_value: Annotated[float, Range(gt=0.0)] | None = None,
    #: samples for the entropy estimate where it has no closed form
    samples_mc_entropy: Samples = 1,
):
    """TorchRL's ClipPPOLoss: the clipped surrogate, built with the algorithm's policy and critic."""
    from rlplug.plugins.losses.torchrl_losses import ppo_loss

    return ppo_loss("clip", networks, settings, clip_epsilon=clip_epsilon, entropy_coeff=entropy_coeff,
                    critic_coeff=critic_coeff, loss_critic_type=loss_critic_type,
                    normalize_advantage=normalize_advantage, clip_value=clip_value,
                    samples_mc_entropy=samples_mc_entropy)


@serving(*ONPOLICY)
def make_klpen_ppo_loss(
    networks, settings,
    #: the KL each minibatch should stay near (unset: the algorithm's kl_target)
    dtarg: Annotated[float, Range(gt=0.0)] | None = None,
    #: the penalty's starting coefficient (unset: the algorithm's kl_penalty)
    beta: Annotated[float, Range(gt=0.0)] | None = None,
    #: beta's factor when the KL is above 1.5 dtarg
    increment: Annotated[float, Range(ge=1.0)] = 2.0,
    #: beta's factor when the KL is below dtarg / 1.5
    decrement: Annotated[float, Range(gt=0.0, le=1.0)] = 0.5,
    #: samples for the KL estimate where it has no closed form
    samples_mc_kl: Samples = 1,
    entropy_coeff: Coefficient | None = None,
    critic_coeff: Coefficient | None = None,
    loss_critic_type: Distance | None = None,
    normalize_advantage: bool | None = None,
    clip_value: Annotated[float, Range(gt=0.0)] | None = None,
    samples_mc_entropy: Samples = 1,
):
    """TorchRL's KLPENPPOLoss: the surrogate with an adaptive KL penalty (unset keys: the algorithm's)."""
    from rlplug.plugins.losses.torchrl_losses import ppo_loss

    return ppo_loss("kl", networks, settings, dtarg=dtarg, beta=beta, increment=increment, decrement=decrement,
                    samples_mc_kl=samples_mc_kl, entropy_coeff=entropy_coeff, critic_coeff=critic_coeff,
                    loss_critic_type=loss_critic_type, normalize_advantage=normalize_advantage,
                    clip_value=clip_value, samples_mc_entropy=samples_mc_entropy)


@serving(*ONPOLICY)
def make_a2c_loss(
    networks, settings,
    entropy_coeff: Coefficient | None = None,
    critic_coeff: Coefficient | None = None,
    loss_critic_type: Distance | None = None,
    clip_value: Annotated[float, Range(gt=0.0)] | None = None,
    samples_mc_entropy: Samples = 1,
):
    """TorchRL's A2CLoss: the score-function gradient with a critic (it does not normalise advantages)."""
    from rlplug.plugins.losses.torchrl_losses import score_loss

    return score_loss("a2c", networks, settings, entropy_coeff=entropy_coeff, critic_coeff=critic_coeff,
                      loss_critic_type=loss_critic_type, clip_value=clip_value, samples_mc_entropy=samples_mc_entropy)


@serving(*ONPOLICY)
def make_reinforce_loss(
    networks, settings,
    loss_critic_type: Distance | None = None,
    clip_value: Annotated[float, Range(gt=0.0)] | None = None,
):
    """TorchRL's ReinforceLoss: -log pi(a|s) A, and the critic's loss at weight 1 (no entropy bonus; it does not
    normalise advantages)."""
    from rlplug.plugins.losses.torchrl_losses import score_loss

    return score_loss("reinforce", networks, settings, loss_critic_type=loss_critic_type, clip_value=clip_value)


@hookimpl
def rlplug_register_losses(register):
    register("policy-gradient-loss", make_policy_gradient_loss)
    register("surrogate-loss", make_surrogate_loss)
    register("ClipPPOLoss", make_clip_ppo_loss)
    register("KLPENPPOLoss", make_klpen_ppo_loss)
    register("A2CLoss", make_a2c_loss)
    register("ReinforceLoss", make_reinforce_loss)
