"""TorchRL's own loss modules, built with an algorithm's networks and settings.

Each factory of :mod:`rlplug.plugins.losses` hands its recipe keys here; a key the recipe leaves unset takes
the algorithm's setting where the algorithm has one (``clip_epsilon``, ``entropy_coef`` -> ``entropy_coeff``,
``value_coef`` -> ``critic_coeff``, ``value_clip`` -> ``clip_value``, ``normalize_advantages`` ->
``normalize_advantage``, ``gamma``...), so that swapping the loss changes the loss and nothing else; any other
key keeps TorchRL's default. Where TorchRL's loss has no such option (A2C's and REINFORCE's normalisation), the
algorithm's setting cannot apply and asking for it is a one-line error.
"""

from __future__ import annotations

from typing import Any

from rlplug.errors import UserError
from rlplug.plugins.algorithms.onpolicy.config import OnPolicyConfig, PPOConfig, PPOKLConfig


def unset_to(values: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """``values`` with each None replaced from ``defaults`` (then dropped if still None: TorchRL's default)."""
    merged = {key: defaults.get(key) if value is None else value for key, value in values.items()}
    merged.update({key: value for key, value in defaults.items() if key not in values})
    return {key: value for key, value in merged.items() if value is not None}


def onpolicy_defaults(settings: OnPolicyConfig) -> dict[str, Any]:
    """The on-policy algorithm's settings under TorchRL's PPO/A2C names."""
    return {"entropy_coeff": settings.entropy_coef, "entropy_bonus": settings.entropy_coef > 0,
            "critic_coeff": settings.value_coef, "loss_critic_type": "l2", "clip_value": settings.value_clip}


def ppo_loss(kind: str, networks: dict, settings: OnPolicyConfig, **values: Any):
    """``ClipPPOLoss`` or ``KLPENPPOLoss`` with the algorithm's policy and critic; the clip range, or the KL target
    and starting beta, are the algorithm's where it is PPO, or PPO-KL (TorchRL's defaults otherwise)."""
    from torchrl.objectives import ClipPPOLoss, KLPENPPOLoss

    defaults = {**onpolicy_defaults(settings), "normalize_advantage": settings.normalize_advantages}
    if kind == "clip":
        if isinstance(settings, PPOConfig):
            defaults["clip_epsilon"] = settings.clip_epsilon
        return ClipPPOLoss(networks["policy"], networks.get("critic"), **unset_to(values, defaults))
    if isinstance(settings, PPOKLConfig):
        defaults.update(dtarg=settings.kl_target, beta=settings.kl_penalty)
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


def actor_critic_loss(kind: str, networks: dict, settings, action_spec=None, **values: Any):
    """``DDPGLoss``, ``TD3Loss`` or ``SACLoss`` with the algorithm's actor and first critic (TorchRL makes the
    twins of TD3 and SAC itself), its discount, and the terms each of the algorithm's learners steps."""
    from torchrl.objectives import DDPGLoss, SACLoss, TD3Loss

    from rlplug.core.recurrent import is_recurrent

    actor, critic = networks["policy"], networks["critic"]
    if is_recurrent(actor) or is_recurrent(critic):
        raise UserError(f"TorchRL's {kind.upper()}Loss learns from single transitions; recurrent networks (lstm, "
                        f"gru) learn from sequences with rlplug's {kind}-loss", path="algorithm.loss")
    if kind == "ddpg":
        loss = DDPGLoss(actor, critic, **unset_to(values, {"loss_function": "l2"}))
        groups = {"actor": "actor_network_params", "critic": "value_network_params"}
        terms = {"loss_actor": "actor", "loss_value": "critic"}
    elif kind == "td3":
        defaults = {"policy_noise": settings.target_policy_noise, "noise_clip": settings.target_noise_clip,
                    "loss_function": "l2", "num_qvalue_nets": 2}
        loss = TD3Loss(actor, critic, action_spec=action_spec, **unset_to(values, defaults))
        groups = {"actor": "actor_network_params", "critic": "qvalue_network_params"}
        terms = {"loss_actor": "actor", "loss_qvalue": "critic"}
    else:
        target = settings.target_entropy if settings.target_entropy is not None else "auto"
        defaults = {"alpha_init": settings.initial_entropy_coef, "fixed_alpha": not settings.learn_entropy_coef,
                    "target_entropy": target, "loss_function": "l2", "num_qvalue_nets": 2}
        loss = SACLoss(actor, critic, action_spec=action_spec, **unset_to(values, defaults))
        groups = {"actor": "actor_network_params", "critic": "qvalue_network_params", "entropy": "log_alpha"}
        terms = {"loss_actor": "actor", "loss_qvalue": "critic", "loss_alpha": "entropy"}
    return with_learners(loss, settings.gamma, groups, terms)


def dqn_loss(networks: dict, settings, action_spec, **values: Any):
    """``DQNLoss`` with the algorithm's Q-network (double DQN as the algorithm says, unless set here), followed by
    TorchRL's ``QValueModule`` (which writes the greedy action and its value, as the loss reads them)."""
    from tensordict.nn import TensorDictSequential
    from torchrl.data import OneHot
    from torchrl.modules import QValueModule
    from torchrl.objectives import DQNLoss

    space = "one_hot" if isinstance(action_spec, OneHot) else "categorical"  # the spec's shape has the env's dims
    defaults = {"double_dqn": settings.double, "loss_function": "smooth_l1"}
    q_actor = TensorDictSequential(networks["q_network"], QValueModule(action_space=space))
    loss = DQNLoss(q_actor, action_space=space, **unset_to(values, defaults))
    return with_learners(loss, settings.gamma, {"q": "value_network_params"}, {"loss": "q"})


def with_target_updates(loss):
    """``loss`` with ``update_targets(tau)``: its target parameters moved towards the online ones by TorchRL's
    ``SoftUpdate`` (``tau = 1``: a copy)."""
    from torchrl.objectives import SoftUpdate

    updater = SoftUpdate(loss, eps=0.5)

    def update_targets(tau: float) -> None:
        updater.eps = 1.0 - tau
        updater.step()

    loss.update_targets = update_targets
    return loss


def with_learners(loss, gamma: float, groups: dict[str, str], terms: dict[str, str]):
    """``loss`` with its discount set, and what an off-policy algorithm needs to step it: each learner's
    parameters (``parameter_groups``) and which learner each loss term trains (``term_learners``)."""
    from tensordict import TensorDictBase

    loss.make_value_estimator(gamma=gamma)
    loss.set_keys(priority_weight="weight")  # where rlplug's prioritised buffers put importance weights

    def parameters_of(attribute: str) -> list:
        value = getattr(loss, attribute)  # TorchRL's functional parameters hold the modules' buffers too
        tensors = list(value.values(True, True)) if isinstance(value, TensorDictBase) else [value]
        return [tensor for tensor in tensors if tensor.requires_grad]

    loss.parameter_groups = {name: parameters_of(attribute) for name, attribute in groups.items()}
    loss.term_learners = terms
    return with_target_updates(loss)
