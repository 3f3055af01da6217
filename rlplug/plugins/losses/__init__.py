"""Losses: what an algorithm minimises, as TorchRL ``LossModule``s (a TensorDict in, ``loss_*`` terms out).

Every built-in algorithm takes a nested ``[algorithm.loss]``. Its default is rlplug's own loss for that
algorithm (on-policy: in the algorithm's module, ``plugins/algorithms/onpolicy/ppo.py`` and ``pg.py``;
off-policy: ``offpolicy.py`` beside this module); TorchRL's own losses are registered under
their class names, built with the algorithm's networks, their constructor options as recipe keys. A key left
unset takes the algorithm's setting where it has one (``torchrl_losses.py``). Each factory says which
algorithms it serves (``serves``), checked when the recipe is validated.
"""

from __future__ import annotations

from typing import Annotated, Literal

from rlplug.plugins.algorithms.onpolicy.config import OnPolicyConfig, PPOConfig, PPOKLConfig
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


@serving("ppo")
def make_ppo_loss(networks, settings: PPOConfig):
    """rlplug's PPO loss: the clipped surrogate, value and entropy terms. Its options are the algorithm's keys
    (clip_epsilon, entropy_coef, value_coef...)."""
    from rlplug.plugins.algorithms.onpolicy.ppo import PPOLoss

    return PPOLoss.from_settings(networks, settings, clip_epsilon=settings.clip_epsilon)


@serving("ppo-kl")
def make_ppo_kl_loss(networks, settings: PPOKLConfig):
    """rlplug's PPO loss with an adaptive KL penalty instead of clipping. Its options are the algorithm's keys
    (kl_target, kl_penalty, entropy_coef, value_coef...)."""
    from rlplug.plugins.algorithms.onpolicy.ppo import PPOKLLoss

    return PPOKLLoss.from_settings(networks, settings, kl_target=settings.kl_target, kl_penalty=settings.kl_penalty)


@serving(*ONPOLICY)
def make_policy_gradient_loss(networks, settings: OnPolicyConfig):
    """rlplug's score-function loss (REINFORCE, A2C, IMPALA): -log pi(a|s) A, value and entropy terms. Its options
    are the algorithm's keys (entropy_coef, value_coef...)."""
    from rlplug.plugins.algorithms.onpolicy.pg import ScoreFunctionLoss

    return ScoreFunctionLoss.from_settings(networks, settings)


@serving(*ONPOLICY)
def make_surrogate_loss(networks, settings: OnPolicyConfig):
    """rlplug's unclipped importance-ratio surrogate loss, value and entropy terms. Its options are the
    algorithm's keys (entropy_coef, value_coef...)."""
    from rlplug.plugins.algorithms.onpolicy.pg import SurrogateLoss

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


def actor_critic(variant: str, summary: str):
    """rlplug's off-policy loss for DDPG, TD3 or SAC, its settings the algorithm's own keys."""
    def make(networks, settings, observation_spec, action_spec, device="cpu"):
        from rlplug.networks import action_bounds, action_size
        from rlplug.plugins.losses.offpolicy import ActorCriticLoss

        bounds = action_bounds(observation_spec, action_spec)
        options = {}
        if variant == "td3":
            options.update(policy_noise=settings.target_policy_noise, noise_clip=settings.target_noise_clip)
        if variant == "sac":
            target = settings.target_entropy
            if target is None:
                target = -float(action_size(action_spec, observation_spec))
            options.update(alpha_init=settings.initial_entropy_coef, learn_alpha=settings.learn_entropy_coef,
                           target_entropy=target)
        return ActorCriticLoss(networks["policy"], networks["critics"], variant=variant, gamma=settings.gamma,
                               observation_key=networks["policy"].in_keys[0],
                               action_bounds=None if bounds is None else (bounds[0].to(device), bounds[1].to(device)),
                               burn_in=settings.burn_in, **options)

    make.__name__ = make.__qualname__ = f"make_{variant}_loss"
    make.__doc__ = f"{summary} Its options are the algorithm's keys."
    return serving(variant)(make)


@serving("dqn")
def make_dqn_objective(networks, settings, action_spec=None):
    """rlplug's DQN loss: the Huber loss against the target network's value (double DQN as the algorithm says).
    Its options are the algorithm's keys."""
    from torchrl.data import OneHot

    from rlplug.plugins.losses.offpolicy import DQNObjective

    network = networks["q_network"]
    return DQNObjective(network, gamma=settings.gamma, double=settings.double, one_hot=isinstance(action_spec, OneHot),
                        observation_key=network.in_keys[0])


@serving("ddpg")
def make_ddpg_loss(
    networks, settings, action_spec=None,
    #: the critic's distance to its target
    loss_function: Distance = "l2",
    #: keep a target copy of the actor
    delay_actor: bool = False,
    #: keep a target copy of the critic
    delay_value: bool = True,
):
    """TorchRL's DDPGLoss, built with the algorithm's actor and critic; the discount is the algorithm's gamma."""
    from rlplug.plugins.losses.torchrl_losses import actor_critic_loss

    return actor_critic_loss("ddpg", networks, settings, action_spec, loss_function=loss_function,
                             delay_actor=delay_actor, delay_value=delay_value)


@serving("td3")
def make_td3_loss(
    networks, settings, action_spec=None,
    #: the target action's noise scale, in action units (unset: the algorithm's target_policy_noise)
    policy_noise: Annotated[float, Range(ge=0.0)] | None = None,
    #: the target noise's clip (unset: the algorithm's target_noise_clip)
    noise_clip: Annotated[float, Range(ge=0.0)] | None = None,
    #: the critics' distance to their target (unset: 'l2', the algorithm's squared error)
    loss_function: Distance | None = None,
    #: how many critics (TorchRL makes them from the algorithm's first)
    num_qvalue_nets: Annotated[int, Range(ge=1)] | None = None,
):
    """TorchRL's TD3Loss, built with the algorithm's actor and first critic (TorchRL makes the twins)."""
    from rlplug.plugins.losses.torchrl_losses import actor_critic_loss

    return actor_critic_loss("td3", networks, settings, action_spec, policy_noise=policy_noise,
                             noise_clip=noise_clip, loss_function=loss_function, num_qvalue_nets=num_qvalue_nets)


@serving("sac")
def make_sac_loss(
    networks, settings, action_spec=None,
    #: how many critics (TorchRL makes them from the algorithm's first)
    num_qvalue_nets: Annotated[int, Range(ge=1)] | None = None,
    #: the critics' distance to their target (unset: 'l2', the algorithm's squared error)
    loss_function: Distance | None = None,
    #: the entropy coefficient to start from (unset: the algorithm's initial_entropy_coef)
    alpha_init: Annotated[float, Range(gt=0.0)] | None = None,
    #: keep alpha fixed (unset: the algorithm's learn_entropy_coef, negated)
    fixed_alpha: bool | None = None,
    #: the smallest and largest alpha (unset: unbounded)
    min_alpha: Annotated[float, Range(gt=0.0)] | None = None,
    max_alpha: Annotated[float, Range(gt=0.0)] | None = None,
):
    """TorchRL's SACLoss, built with the algorithm's actor and first critic (TorchRL makes the twins)."""
    from rlplug.plugins.losses.torchrl_losses import actor_critic_loss

    return actor_critic_loss("sac", networks, settings, action_spec, num_qvalue_nets=num_qvalue_nets,
                             loss_function=loss_function, alpha_init=alpha_init, fixed_alpha=fixed_alpha,
                             min_alpha=min_alpha, max_alpha=max_alpha)


@serving("dqn")
def make_dqn_loss(
    networks, settings, action_spec,
    #: the distance of Q to its target (unset: 'smooth_l1', the Huber loss the algorithm uses)
    loss_function: Distance | None = None,
    #: double DQN (unset: the algorithm's double)
    double_dqn: bool | None = None,
):
    """TorchRL's DQNLoss, built with the algorithm's Q-network; the discount is the algorithm's gamma."""
    from rlplug.plugins.losses.torchrl_losses import dqn_loss

    return dqn_loss(networks, settings, action_spec, loss_function=loss_function, double_dqn=double_dqn)


@hookimpl
def rlplug_register_losses(register):
    register("ppo-loss", make_ppo_loss)
    register("ppo-kl-loss", make_ppo_kl_loss)
    register("policy-gradient-loss", make_policy_gradient_loss)
    register("surrogate-loss", make_surrogate_loss)
    register("ddpg-loss", actor_critic("ddpg", "rlplug's DDPG loss: the critic on one-step targets from the "
                                                 "target networks, the actor ascending the critic."))
    register("td3-loss", actor_critic("td3", "rlplug's TD3 loss: twin critics on the lower smoothed target, "
                                               "the actor ascending the first critic."))
    register("sac-loss", actor_critic("sac", "rlplug's SAC loss: twin soft critics, the actor and the entropy "
                                               "coefficient."))
    register("dqn-loss", make_dqn_objective)
    register("ClipPPOLoss", make_clip_ppo_loss)
    register("KLPENPPOLoss", make_klpen_ppo_loss)
    register("A2CLoss", make_a2c_loss)
    register("ReinforceLoss", make_reinforce_loss)
    register("DDPGLoss", make_ddpg_loss)
    register("TD3Loss", make_td3_loss)
    register("SACLoss", make_sac_loss)
    register("DQNLoss", make_dqn_loss)
