"""Losses: what an algorithm minimises, as TorchRL ``LossModule``s (a TensorDict in, ``loss_*`` terms out).

Every built-in algorithm takes a nested ``[algorithm.loss]``. Its default is rlplug's own loss for that
algorithm; TorchRL's own losses are registered under their class names, built with the algorithm's networks,
their constructor options as recipe keys. A key left unset takes the algorithm's setting where it has one
(``torchrl_losses.py``). Each factory says which algorithms it serves (``serves``), checked when the recipe is
validated. The on-policy family's are here (``onpolicy.py``); each off-policy algorithm's live in its home
(:mod:`rlplug.plugins.algorithms.offpolicy`), registered from
:mod:`rlplug.plugins.algorithms.offpolicy.loss_factories`.
"""

from __future__ import annotations

from typing import Annotated, Literal

from rlplug.registry.hookspecs import hookimpl
from rlplug.registry.schema import Range

ONPOLICY = ("ppo", "ppo-kl", "a2c", "vpg", "surrogate", "impala")
Coefficient = Annotated[float, Range(ge=0.0)]
Distance = Literal["l1", "l2", "smooth_l1"]
Samples = Annotated[int, Range(ge=1)]


def serving(*algorithms: str):
    """Marks a loss factory with the algorithms it fits (read by their ``loss`` key's check)."""
    def mark(factory):
        factory.serves = algorithms
        return factory
    return mark


def policy_gradient(objective: str, summary: str):
    """rlplug's on-policy loss for ``objective``, its settings the algorithm's own keys."""
    def make(networks, settings, action_spec=None):
        from rlplug.plugins.losses.onpolicy import PolicyGradientLoss

        return PolicyGradientLoss(
            networks["policy"], networks.get("critic"), objective=objective,
            clip_epsilon=getattr(settings, "clip_epsilon", 0.2), entropy_coef=settings.entropy_coef,
            value_coef=settings.value_coef, value_clip=settings.value_clip,
            normalize_advantage=settings.normalize_advantages, kl_target=getattr(settings, "kl_target", 0.01),
            kl_penalty=getattr(settings, "kl_penalty", 1.0))

    make.__name__ = make.__qualname__ = f"make_{objective}_loss"
    make.__doc__ = f"{summary} Its options are the algorithm's keys (clip_epsilon, entropy_coef, value_coef...)."
    return serving(*ONPOLICY)(make)


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
    register("ppo-loss", policy_gradient("clip", "rlplug's PPO loss: the clipped surrogate, value and entropy terms."))
    register("ppo-kl-loss", policy_gradient("kl", "rlplug's PPO loss with an adaptive KL penalty instead of clipping."))
    register("policy-gradient-loss", policy_gradient(
        "score", "rlplug's score-function loss (REINFORCE, A2C, IMPALA): -log pi(a|s) A, value and entropy terms."))
    register("surrogate-loss", policy_gradient(
        "ratio", "rlplug's unclipped importance-ratio surrogate loss, value and entropy terms."))
    register("ClipPPOLoss", make_clip_ppo_loss)
    register("KLPENPPOLoss", make_klpen_ppo_loss)
    register("A2CLoss", make_a2c_loss)
    register("ReinforceLoss", make_reinforce_loss)
