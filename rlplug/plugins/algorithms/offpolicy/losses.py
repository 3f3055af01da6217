"""What the off-policy losses share, written once: each algorithm's loss (in its folder's ``algorithm.py``:
``ddpg/``, ``td3/``, ``sac/``, ``crossq/``, ``mpo/``, ``dqn/``) subclasses :class:`ActorCriticLoss` or uses these
pieces.

rlplug's losses are TorchRL ``LossModule``s: a replay sample in (TorchRL's keys: ``observation``, ``action``,
``("next", "observation" | "reward" | "terminated")``, prioritised replay's ``weight``), ``loss_*`` terms out,
the TD error written back under ``td_error`` for new priorities. They call the networks on the sample's tensors
directly, say which optimiser each term trains (``parameter_groups``, ``term_learners``), and either own target
networks (:class:`TargetCritics`, ``update_targets``) or declare ``no_targets``. Every term is computed from the
parameters as they are before the step, and each term's gradient reaches only its own learner's parameters;
the algorithm takes one backward pass of their sum.

With recurrent networks (:mod:`rlplug.core.recurrent`), a sample is ``[sequences]`` with observations
``[sequences, L + 1, ...]`` and ``is_init``, the other entries from the burn-in on.

Also here: what rlplug adds to TorchRL's own off-policy losses (:func:`with_learners`) and the default target
entropy of the entropy-tuned actors.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn
from torchrl.objectives import LossModule

from rlplug.core.acting import ActorView, tensor_function
from rlplug.core.actions import one_env_spec
from rlplug.core.masks import MASK
from rlplug.core.recurrent import ObservationSequence, is_recurrent, sequence_function
from rlplug.core.training import forget_former_buffers
from rlplug.errors import UserError
from rlplug.networks import action_size
from rlplug.registry.networks import ActorCriticNetworks

Network = TypeVar("Network", bound=nn.Module)


# -- targets ---------------------------------------------------------------------------------------------

def target_copy(network: Network) -> Network:
    """A frozen deep copy of ``network``, moved towards it by :func:`polyak_update`."""
    target = copy.deepcopy(network)
    target.requires_grad_(False)
    return target


@torch.no_grad()
def polyak_update(target: nn.Module, online: nn.Module, tau: float) -> None:
    """``target = (1 - tau) target + tau online`` for every parameter, in place (``tau = 1``: a copy)."""
    for t, o in zip(target.parameters(), online.parameters()):
        if tau == 1.0:
            t.copy_(o)
        else:
            t.lerp_(o, tau)


class HeldStill(nn.Module):
    """A function of ``networks`` that :meth:`still` computes with their parameters out of the autograd graph:
    the gradient of what it returns flows to its inputs, not to them (the critics under the actor's term).
    The networks' own parameters are switched to ``requires_grad = False`` for the call (a few microseconds);
    under ``torch.func.functional_call`` and ``torch.vmap`` (seeds trained together) the networks hold tensors
    swapped in, whose flag cannot be switched, and torch.compile cannot trace the switch (``run.compile``), so
    there they are swapped for their detached selves."""

    def __init__(self, networks: nn.Module, function):
        super().__init__()
        self.networks, self.function = networks, function

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        return self.function(*args)

    def still(self, *args: torch.Tensor) -> torch.Tensor:
        parameters = list(self.networks.parameters())
        own = all(isinstance(p, nn.Parameter) for p in parameters)
        if own and not torch.compiler.is_compiling():  # the networks' own: switched off, then on
            trained = [p for p in parameters if p.requires_grad]
            for p in trained:
                p.requires_grad_(False)
            try:
                return self.function(*args)
            finally:
                for p in trained:
                    p.requires_grad_(True)
        # tensors swapped in by an outer functional_call (seeds under vmap), or a compiled loss (torch.compile
        # cannot trace the flag's switch): swapped for their detached selves
        detached = {f"networks.{name}": value.detach() for name, value in self.networks.named_parameters()}
        return torch.func.functional_call(self, detached, args)


# -- samples ---------------------------------------------------------------------------------------------

@dataclass
class Sample:
    """A replay sample's tensors as the losses read them."""

    observation: torch.Tensor | ObservationSequence
    next_observation: torch.Tensor | ObservationSequence
    action: torch.Tensor
    reward: torch.Tensor
    not_terminated: torch.Tensor
    weight: torch.Tensor | None
    #: with n-step returns (``algorithm.n_steps``), the rewards each transition sums (``[batch, 1]``); else None
    steps: torch.Tensor | None = None
    #: the next state's allowed actions, where the env masks them (``("next", "action_mask")``)
    next_mask: torch.Tensor | None = None

    @classmethod
    def of(cls, data: TensorDictBase, burn_in: int = 0) -> Sample:
        terminated = data.get(("next", "terminated"))
        weight = data.get("weight", None)
        if "is_init" in data.keys():  # sequences of recurrent networks
            observations = ObservationSequence(data.get("observation"), data.get("is_init").bool(), burn_in, 0)
            observation, next_observation = observations, observations.next()
        else:
            observation, next_observation = data.get("observation"), data.get(("next", "observation"))
        steps = data.get("steps_to_next_obs", None)
        return cls(observation, next_observation, data.get("action"), data.get(("next", "reward")).float(),
                   (~terminated.bool()).float(), None if weight is None else weight.reshape(-1, 1),
                   None if steps is None else steps.reshape(-1, 1), data.get(("next", MASK), None))

    def mean(self, loss: torch.Tensor) -> torch.Tensor:
        """Per-sample losses averaged, with prioritised replay's importance weights where there are some."""
        return (loss * self.weight).mean() if self.weight is not None else loss.mean()

    def target(self, gamma: float, next_value: torch.Tensor) -> torch.Tensor:
        """``reward + gamma * next_value``, the bootstrap dropped where the episode terminated; with n-step
        returns ``gamma ** k`` for a transition summing k rewards (its next observation is k steps on)."""
        if self.steps is None:
            return self.reward + gamma * self.not_terminated * next_value.float()
        discount = gamma ** self.steps.float()
        return self.reward + discount * self.not_terminated * next_value.float()


# -- the actor-critic losses -----------------------------------------------------------------------------

class ActorCriticLoss(LossModule):
    """An actor and its critics of (observation, action): the learners ``actor`` and ``critic``, the critics'
    squared TD errors (:meth:`critic_term`), the critics held still under the actor's term (:attr:`held_still`).
    A subclass computes its terms (:meth:`terms`); it keeps targets by mixing in :class:`TargetCritics`, or
    declares ``no_targets``."""

    #: the name of the critics' term (DDPG's is TorchRL's ``loss_value``)
    critic_term_name = "loss_qvalue"
    #: whether the actor's term reads every critic (the lower of them) or the first alone
    actor_reads_all_critics = False
    #: its targets discount by gamma ** steps_to_next_obs (:meth:`Sample.target`): n-step returns serve it
    n_step_targets = True

    def __init__(self, actor: nn.Module, critics: list, *, gamma: float, observation_key: str = "observation",
                 burn_in: int = 0):
        super().__init__()
        self.gamma, self.burn_in, self.observation_key = gamma, burn_in, observation_key
        self.actor_network, self.critic_networks = actor, nn.ModuleList(critics)
        self.sequences = is_recurrent(actor) or is_recurrent(self.critic_networks)
        self.q = [self.function(c, [observation_key, "action"]) for c in self.critic_networks]
        # every critic's value of (observation, action), the critics held still: not a submodule of the loss
        # (its parameters are the critics'), so set past nn.Module's registration
        read = self.q if self.actor_reads_all_critics else self.q[:1]
        object.__setattr__(self, "held_still", HeldStill(self.critic_networks, lambda observation, action: [
            q(observation, action) for q in read]))
        #: whether to compute the actor's term (a delayed actor is not moved every step)
        self.with_actor = True
        self.parameter_groups = {"actor": list(actor.parameters()), "critic": list(self.critic_networks.parameters())}
        self.term_learners = {"loss_actor": "actor", self.critic_term_name: "critic"}
        # one class held every actor-critic's loss, and the action bounds, before each had its own
        forget_former_buffers(self, ("action_low", "action_high"))

    def function(self, network: nn.Module, in_keys: list) -> Callable[..., torch.Tensor]:
        """``network`` as a function of tensors (of observation sequences, for recurrent networks)."""
        return (sequence_function if self.sequences else tensor_function)(network, in_keys)

    @property
    def batchable(self) -> bool:
        """Several seeds at once under ``torch.vmap`` (seeds trained together): feed-forward networks only (the
        sequences of recurrent ones are not stacked)."""
        return not self.sequences

    def forward(self, data: TensorDictBase) -> TensorDictBase:
        sample = Sample.of(data, self.burn_in)
        out, td_error = self.terms(sample)
        if not isinstance(sample.observation, ObservationSequence):  # sequences learn without priorities
            data.set("td_error", td_error.detach().abs().reshape(-1))
        return TensorDict(out, batch_size=[])

    def terms(self, sample: Sample) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """The loss's terms and diagnostics on ``sample``; and the TD error of its first critic."""
        raise NotImplementedError

    def critic_term(self, sample: Sample, target: torch.Tensor,
                    values: list[torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Sum over the critics of the weighted squared TD errors of their ``values`` (unset: each critic's
        value of the sample); and the first critic's TD error."""
        if values is None:
            values = [q(sample.observation, sample.action) for q in self.q]
        errors = [value.float() - target for value in values]
        total = sample.mean(errors[0].pow(2))
        for error in errors[1:]:
            total = total + sample.mean(error.pow(2))
        return total, errors[0]


class TargetCritics(ActorCriticLoss):
    """An :class:`ActorCriticLoss` with target copies of the critics (and of the actor where the loss keeps one:
    :meth:`keep_target_actor`), moved by polyak averaging (:meth:`update_targets`)."""

    def keep_targets(self) -> None:
        """Build the critics' target copies; called in the loss's ``__init__``."""
        key = self.observation_key
        self.target_critics = target_copy(self.critic_networks)
        self.target_q = [self.function(c, [key, "action"]) for c in self.target_critics]
        #: each learner's target copies, parameter by parameter as in parameter_groups (update_targets' pairs)
        self.target_parameters = {"critic": list(self.target_critics.parameters())}
        self.target_actor: nn.Module | None = None

    def keep_target_actor(self) -> nn.Module:
        """Build the actor's target copy too (DDPG's and TD3's), after :meth:`keep_targets`; return it."""
        target = self.target_actor = target_copy(self.actor_network)
        self.target_parameters["actor"] = list(target.parameters())
        return target

    def lower_target(self, observation, action: torch.Tensor) -> torch.Tensor:
        """The lowest of the target critics' values of (observation, action)."""
        return torch.stack([q(observation, action).float() for q in self.target_q]).min(0).values

    @torch.no_grad()
    def update_targets(self, tau: float) -> None:
        polyak_update(self.target_critics, self.critic_networks, tau)
        if self.target_actor is not None:
            polyak_update(self.target_actor, self.actor_network, tau)


class EntropyTerms(ActorCriticLoss):
    """An :class:`ActorCriticLoss` with a stochastic actor (SAC's, CrossQ's): the entropy coefficient
    ``alpha = exp(log_alpha)`` (the learner ``entropy`` where it is learned), reparameterised actions, and the
    actor's and alpha's terms."""

    actor_reads_all_critics = True

    def keep_entropy(self, actor: nn.Module, alpha_init: float, learn_alpha: bool, target_entropy: float) -> None:
        """Set up alpha and the actor's distribution; called in the loss's ``__init__``."""
        self.view = ActorView.of(actor)
        self.target_entropy = target_entropy
        self.log_alpha = nn.Parameter(torch.tensor(math.log(alpha_init)), requires_grad=learn_alpha)
        self.learn_alpha = learn_alpha  # not log_alpha.requires_grad: False under vmap
        if learn_alpha:
            self.parameter_groups["entropy"] = [self.log_alpha]
            self.term_learners["loss_alpha"] = "entropy"

    def sample_actions(self, observation: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Reparameterised actions and their log-probabilities (``[batch, 1]``), scored on the same pre-tanh
        sample where the distribution allows (TanhNormal's ``rsample_and_log_prob``)."""
        action, log_prob = self.view.rsample_and_log_prob(observation)
        return action, log_prob.float().reshape(-1, 1)

    def actor_value(self, values: list[torch.Tensor]) -> torch.Tensor:
        """What the actor ascends of the critics' ``values`` at its own actions: the lowest (SAC's twins)."""
        return torch.stack([q.float() for q in values]).min(0).values

    def actor_terms(self, observation: torch.Tensor | ObservationSequence, action: torch.Tensor, log_prob: torch.Tensor,
                    alpha: torch.Tensor) -> dict[str, torch.Tensor]:
        """For ``action`` drawn from the actor at ``observation``: ``loss_actor`` ``alpha log pi(a|s) - Q(s, a)``
        (Q the :meth:`actor_value` of the critics held still), alpha and the entropy, ``loss_alpha`` ``-log alpha
        (log pi(a|s) + target entropy)`` where alpha is learned."""
        q_pi = self.actor_value(self.held_still.still(observation, action))
        out = {"loss_actor": (alpha * log_prob - q_pi).mean(), "alpha": alpha, "entropy": -log_prob.detach().mean()}
        if self.learn_alpha:
            out["loss_alpha"] = -(self.log_alpha * (log_prob.detach() + self.target_entropy)).mean()
        return out


def single_transitions(observation: Any, algorithm: str) -> torch.Tensor:
    """``observation`` where it is a tensor; the stochastic actors learn from no sequences."""
    if isinstance(observation, ObservationSequence):
        raise TypeError(f"{algorithm} learns from single transitions: recurrent networks (sequences) serve ddpg "
                        f"and td3")
    return observation


def default_target_entropy(settings: Any, observation_spec, action_spec) -> float:
    """The algorithm's ``target_entropy``, or minus the number of action dimensions where it is unset."""
    if settings.target_entropy is not None:
        return settings.target_entropy
    return -float(action_size(action_spec, observation_spec))


# -- TorchRL's losses ------------------------------------------------------------------------------------

#: which of TorchRL's parameters each learner steps, and which learner each term trains, in the losses of the
#: entropy-tuned actor-critics (TorchRL's SACLoss layout: SAC's, REDQ's and CrossQ's)
ENTROPY_GROUPS = {"actor": "actor_network_params", "critic": "qvalue_network_params", "entropy": "log_alpha"}
ENTROPY_TERMS = {"loss_actor": "actor", "loss_qvalue": "critic", "loss_alpha": "entropy"}


def entropy_defaults(settings: Any) -> dict[str, Any]:
    """The algorithm's entropy settings under the names of TorchRL's ``SACLoss`` and ``CrossQLoss``."""
    target = settings.target_entropy if settings.target_entropy is not None else "auto"
    return {"alpha_init": settings.initial_entropy_coef, "fixed_alpha": not settings.learn_entropy_coef,
            "target_entropy": target, "loss_function": "l2", "num_qvalue_nets": 2}


def one_env_actions(action_spec, observation_spec):
    """The action spec TorchRL's losses read, one transition's: the env's ``action_spec`` without its copies' dims
    (those of ``observation_spec``'s batch), or as given where no observation spec is (a plugin's call)."""
    return one_env_spec(action_spec, observation_spec.ndim) if observation_spec is not None else action_spec


def refuse_sequences(networks: ActorCriticNetworks, name: str, own: str | None = None) -> None:
    """TorchRL's actor-critic losses learn from single transitions: a one-line error for recurrent networks,
    naming rlplug's loss ``own`` that learns from sequences, where the algorithm has one."""
    if is_recurrent(networks["policy"]) or is_recurrent(networks["critic"]):
        instead = f"set use = '{own}'" if own else "use an mlp"
        raise UserError(f"TorchRL's {name} learns from single transitions, not from the sequences of recurrent "
                        f"networks (lstm, gru); {instead}", path="algorithm.loss")


def with_learners(loss, gamma: float, groups: dict[str, str], terms: dict[str, str], targets: bool = True,
                  weighted: bool = True, n_step: bool = True):
    """TorchRL's ``loss`` with its discount set, and what an off-policy algorithm needs to step it: each learner's
    parameters (``parameter_groups``) and which learner each loss term trains (``term_learners``); targets moved
    by ``update_targets`` where the loss keeps some (``targets``), ``no_targets`` declared where it keeps none;
    prioritised replay's importance weights read where the loss takes them (``weighted``); ``n_step_targets``
    declared where its value estimator reads the sample's ``steps_to_next_obs`` (``n_step``: TorchRL's REDQLoss
    drops the entry before its estimator sees it)."""
    from tensordict import TensorDictBase

    from rlplug.plugins.algorithms.loss_parts import with_target_updates

    loss.make_value_estimator(gamma=gamma)
    if weighted:
        loss.set_keys(priority_weight="weight")  # where rlplug's prioritised buffers put importance weights

    def parameters_of(attribute: str) -> list:
        value = getattr(loss, attribute)  # TorchRL's functional parameters hold the modules' buffers too
        tensors = list(value.values(True, True)) if isinstance(value, TensorDictBase) else [value]
        return [tensor for tensor in tensors if tensor.requires_grad]

    # a group with nothing to train (TorchRL's fixed_alpha keeps log_alpha a buffer) gets no learner, and its
    # terms train nothing
    trained = {name: parameters_of(attribute) for name, attribute in groups.items()}
    loss.parameter_groups = {name: parameters for name, parameters in trained.items() if parameters}
    loss.term_learners = {term: name for term, name in terms.items() if name in loss.parameter_groups}
    loss.n_step_targets = n_step
    if not targets:
        loss.no_targets = True
        return loss
    loss = with_target_updates(loss)
    loss.target_parameters = torchrl_targets(loss, groups)  # read once SoftUpdate is associated: no warning
    return loss


def torchrl_targets(loss, groups: dict[str, str]) -> dict[str, list]:
    """Each learner's target copies in TorchRL's ``loss`` (its ``target_<attribute>`` beside ``<attribute>``),
    in the order of ``parameter_groups``: the pairs TorchRL's ``SoftUpdate`` moves (a target that is the online
    tensor itself, as SACLoss's actor's, is none), so that the algorithm can move them in one kernel. Empty
    where a target is laid out otherwise (then SoftUpdate alone moves them)."""
    from tensordict import TensorDictBase

    targets = {}
    for name, attribute in groups.items():
        source, target = getattr(loss, attribute), getattr(loss, f"target_{attribute}", None)
        if target is None:
            continue
        if not isinstance(source, TensorDictBase) or not isinstance(target, TensorDictBase):
            return {}
        keys = list(source.keys(True, True))
        if set(keys) != set(target.keys(True, True)):
            return {}
        pairs = [(source.get(key), target.get(key)) for key in keys if source.get(key).requires_grad]
        distinct = {not copy.is_set_to(online.data) for online, copy in pairs}
        if distinct == {True}:
            targets[name] = [copy for _, copy in pairs]
        elif distinct != {False}:  # some copies, some the online tensors themselves
            return {}
    return targets
