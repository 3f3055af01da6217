"""Building an algorithm's networks from the components its recipe names: one way for both families, so that a
network's mistake is reported at the same key whichever algorithm builds it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlplug.errors import UserError

if TYPE_CHECKING:
    from tensordict.nn import TensorDictModuleBase


#: the roles of the networks that value states or actions: what ``[algorithm.critic] in_keys`` gives its entries
CRITIC_ROLES = ("value", "q_value", "q_values")


def build_network(component, **context) -> TensorDictModuleBase:
    """``component.build(**context)``, its errors located at the component's key in the algorithm's table
    (``algorithm.policy``) when they name no key of their own. A critic of an env with ``critic_observation``
    (``[algorithm.critic] in_keys``) is sized from that entry alone, which it must read."""
    from torchrl.data import Composite

    from rlplug.core.observations import CRITIC_OBSERVATION

    spec = context.get("observation_spec")
    asymmetric = bool(spec is not None and CRITIC_OBSERVATION in spec.keys()
                      and str(context.get("role")) in CRITIC_ROLES and getattr(component, "in_keys", None))
    if spec is not None and asymmetric:
        only = Composite({CRITIC_OBSERVATION: spec[CRITIC_OBSERVATION]}, shape=spec.shape, device=spec.device)
        context = {**context, "observation_spec": only}
    try:
        network = component.build(**context)
    except UserError as error:
        raise (error if error.path else error.located(prefix=f"algorithm.{component.path}")) from None
    check_masked(network, component, context)
    if asymmetric and CRITIC_OBSERVATION not in getattr(network, "in_keys", ()):
        raise UserError(f"{component.title} reads {list(getattr(network, 'in_keys', []))}, not the entries in_keys "
                        f"names: a network for an asymmetric critic reads the one entry of the observation_spec it "
                        f"is given ('{CRITIC_OBSERVATION}')", path=f"algorithm.{component.path}.in_keys")
    return network


def check_masked(network, component, context: dict) -> None:
    """A policy of an env with an ``action_mask`` must read it (the heads of :mod:`rlplug.networks` do): one
    that does not, a recurrent one or a network plugin's own head, would choose disallowed actions, so it is
    refused in one line at its key."""
    from rlplug.core.acting import ActorView
    from rlplug.core.masks import MASK

    spec = context.get("observation_spec")
    if context.get("role") != "policy" or spec is None or MASK not in spec.keys():
        return
    try:
        masked = ActorView.of(network).mask_key is not None
    except TypeError:
        masked = False
    if not masked:
        raise UserError(f"the env allows only some actions at each step ('{MASK}'), and this policy network does "
                        f"not read the mask (recurrent policies and heads not made by rlplug.networks.wrap do "
                        f"not yet)", path=f"algorithm.{component.path}")


def state_dependent_actor(policy: TensorDictModuleBase, config, *, action_spec, algorithm: str,
                          steps_per_batch: int, learn_features: bool) -> TensorDictModuleBase:
    """gSDE (``use_sde``) for either family: ``policy`` (the actor the loss trains) given gSDE's scale in place,
    and the acting actor exploring around it (:mod:`rlplug.core.sde`); one line at ``algorithm.use_sde`` where
    the policy has no Gaussian for it to move. ``log_std_init`` is read from the policy's table (0 where its
    network takes none); ``learn_features``: the scale's gradient reaches the policy's body (Stable-Baselines3's
    SAC; its PPO detaches it)."""
    from rlplug.core.heads import is_discrete
    from rlplug.core.recurrent import is_recurrent
    from rlplug.core.sde import state_dependent_exploration

    if is_discrete(action_spec):
        raise UserError("gSDE moves the mean of a Gaussian policy, and this env's actions are discrete; leave "
                        "use_sde unset", path="algorithm.use_sde")
    if is_recurrent(policy):
        raise UserError("gSDE takes feed-forward policies for now, and this one is recurrent (lstm, gru)",
                        path="algorithm.use_sde")
    try:
        return state_dependent_exploration(policy, log_std_init=float(config.policy.params.get("log_std_init", 0.0)),
                                           steps_per_batch=steps_per_batch, sample_freq=config.sde_sample_freq,
                                           learn_features=learn_features)
    except TypeError:  # not a ProbabilisticActor: a deterministic actor
        raise UserError(f"gSDE moves the mean of a Gaussian policy, and {algorithm}'s actor is deterministic; "
                        f"explore with exploration_noise, or use sac", path="algorithm.use_sde") from None
    except ValueError as error:
        raise UserError(str(error), path="algorithm.use_sde") from None
