"""Recurrent (LSTM, GRU) networks: memory for partially observed envs, for DDPG, TD3 and SAC (learning from
replayed sequences) and the on-policy family (PPO, A2C, VPG, the surrogate, PPO-KL: learning from the batch's
sequences).

Where the hidden state lives, and when it restarts:

- acting: the network's core is TorchRL's ``LSTMModule`` / ``GRUModule``. Its hidden state is a TensorDict
  entry (``<role>_h``, ``<role>_c`` for an LSTM), written to ``("next", key)`` and carried to the next step
  by the env, which :func:`with_recurrent_state` gives TorchRL's ``InitTracker`` (``is_init``: the first
  step of an episode) and the module's ``TensorDictPrimer`` (the state in the env's specs, zeros at every
  reset). The core zeroes the incoming state wherever ``is_init`` is set, so an episode that ends (terminated
  or truncated) never passes its memory on. Collection and evaluation both go this way (TensorDict road).
- learning off-policy: the replay buffer stores each transition with its episode id and step
  (:meth:`rlplug.plugins.replay_buffers.buffers.ReplayBuffer.sample_sequences`, TorchRL's ``SliceSampler``), and
  samples sequences of consecutive steps of one episode. The core reads a sequence in TorchRL's recurrent mode from
  a zero state (``is_init`` set on its first step), the first ``burn_in`` steps only warming it up (R2D2's zero-state
  burn-in; the acting state is not stored, so a stored-state start is not possible for the critics).
- learning on-policy: the ``[envs, time]`` batch holds the state each step started from, so each env's row is cut
  into sequences that start from their collection-time state (:meth:`RecurrentNetwork.sequence_outputs`): the
  policy's log-probabilities before any step are the collection's, exactly. A recurrent critic does not act, so
  :func:`stepped_values` steps it along the rows once per batch to give its values and the states the sequences
  start from.

:class:`ObservationSequence` is how a sampled sequence reaches the algorithm's unchanged gradient step: it
stands where the observation tensor stands, and :func:`sequence_function` turns every network (recurrent or
not) into a function of it, so DDPG's and TD3's updates serve both kinds of networks with one code path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase, TensorDictSequential
from torch import nn
from torchrl.data import Composite, TensorSpec, Unbounded
from torchrl.envs import Compose, EnvBase, InitTracker, TransformedEnv
from torchrl.modules import GRUModule, LSTMModule, set_recurrent_mode
from torchrl.modules.utils import get_primers_from_module

from rlplug.core.acting import tensor_function
from rlplug.core.heads import observation_key, observation_shape, with_head
from rlplug.core.layers import Init, build_layers
from rlplug.errors import UserError

Cell = Literal["lstm", "gru"]
#: The roles a recurrent network can take: actors and critics (not DQN's Q-values of every action).
RECURRENT_ROLES = ("deterministic_policy", "q_value", "policy", "value")
CORES = (LSTMModule, GRUModule)


def is_recurrent(module: nn.Module) -> bool:
    """Whether ``module`` holds a recurrent core anywhere inside it."""
    return any(isinstance(m, CORES) for m in module.modules())


class RecurrentNetwork(TensorDictSequential):
    """A recurrent core (observation -> features, hidden state in the TensorDict) and a head for its role.

    Called on a TensorDict without ``is_init`` (``Agent.act`` on a lone observation), every row is taken as
    the first step of an episode: the state starts from zeros rather than failing.
    """

    def __init__(self, core: LSTMModule | GRUModule, head: TensorDictModuleBase, observation_key: str):
        super().__init__(core, head)
        self.core, self.head, self.observation_key = core, head, observation_key
        self.features_key = core.out_keys[0]
        #: the TensorDict entries of the hidden state (``<role>_h``, and ``<role>_c`` for an LSTM)
        self.state_keys: list[str] = list(core.in_keys[1:-1])

    def forward(self, tensordict: TensorDictBase, *args, **kwargs) -> TensorDictBase:
        if "is_init" not in tensordict.keys():
            tensordict.set("is_init", torch.ones((*tensordict.batch_size, 1), dtype=torch.bool,
                                                 device=tensordict.device))
        return super().forward(tensordict, *args, **kwargs)

    def sequence_features(self, observations: torch.Tensor, is_init: torch.Tensor) -> torch.Tensor:
        """The core's features along ``[batch, time]`` observations, from a zero state, restarting wherever
        ``is_init`` (``[batch, time, 1]``) is set: TorchRL's recurrent mode, the same resets as acting."""
        data = TensorDict({self.observation_key: observations, "is_init": is_init},
                          batch_size=observations.shape[:2])
        with set_recurrent_mode(True):
            return self.core(data).get(self.features_key)

    def sequence_outputs(self, sequences: TensorDictBase) -> torch.Tensor:
        """The core's features along ``[batch, time]`` ``sequences`` holding the observations, ``is_init`` and
        the state each step started from: each sequence starts from its first step's state (zeros where an
        episode starts) and restarts wherever ``is_init`` is set."""
        is_init = sequences.get("is_init")
        data = TensorDict({self.observation_key: sequences.get(self.observation_key), "is_init": is_init},
                          batch_size=sequences.batch_size[:2])
        for key in self.state_keys:
            state = sequences.get(key)
            data.set(key, torch.where(is_init.unsqueeze(-1), torch.zeros_like(state), state))
        with set_recurrent_mode(True):
            return self.core(data).get(self.features_key)


def make_recurrent(cell: Cell, *, observation_spec: Composite, action_spec: TensorSpec, role: str,
                   hidden_size: int, num_layers: int, head_layers: list[dict], init: Init,
                   device: str = "cpu") -> RecurrentNetwork:
    """An LSTM or GRU core over the observation, then a head of ``head_layers`` (layer tables) for ``role``.

    The critic's core reads the observation only; the action joins the features at the head's first layer
    (Q(h_t, a_t)), so the actor loss reuses one pass of the critic's core.
    """
    if role not in RECURRENT_ROLES:
        raise UserError(f"{cell} networks serve actors and critics (ppo, a2c, vpg, surrogate, ppo-kl, sac, ddpg, "
                        f"td3), not the role '{role}'; use mlp here")
    shape = observation_shape(observation_spec)
    if len(shape) != 1:
        raise UserError(f"{cell} networks read one-dimensional observations, got shape {list(shape)}; "
                        f"flatten them where the env can (the gym env's flatten_observations = true)")
    key = observation_key(observation_spec)
    state = [f"{role}_h", f"{role}_c"] if cell == "lstm" else [f"{role}_h"]
    features = f"{role}_features"
    core_class = LSTMModule if cell == "lstm" else GRUModule
    core = core_class(input_size=shape[0], hidden_size=hidden_size, num_layers=num_layers, device=device,
                      in_keys=[key, *state, "is_init"], out_keys=[features, *(("next", k) for k in state)])
    features_spec = Composite({features: Unbounded(shape=(*observation_spec.shape, hidden_size))},
                              shape=observation_spec.shape)
    body, out = build_layers(head_layers, (hidden_size,), init=init)
    head = with_head(body, out[0], role=role, observation_spec=features_spec, action_spec=action_spec,
                     init=init, device=device)
    return RecurrentNetwork(core, head, key).to(torch.device(device))


def with_recurrent_state(env: EnvBase, policy: nn.Module) -> EnvBase:
    """``env`` carrying ``policy``'s recurrent state from step to step and restarting it at every reset
    (wrapped around ``env``, which stays as it is: its own transforms are not unwrapped and copied)."""
    return TransformedEnv(env, Compose(InitTracker(), get_primers_from_module(policy, warn=False)),
                          auto_unwrap=False)


@torch.no_grad()
def stepped_values(network: RecurrentNetwork, batch: TensorDictBase,
                   start: list[torch.Tensor] | None) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    """A recurrent critic stepped along ``batch``'s ``[envs, time]`` rows as if it had acted: each step's value,
    the value of its next observation (from the state after the step: bootstraps at truncation are right), and
    the state each step started from written under the critic's state keys (zeros where ``is_init``). ``start``:
    the state the rows start from (the one returned for the previous batch of the same envs; None: zeros).
    Returns the values, the next values and the state after the rows' last steps."""
    key, envs = network.observation_key, batch.batch_size[:1]
    observations, following = batch.get(key), batch.get(("next", key))
    is_init = batch.get("is_init")
    state = start if start is not None else zero_state(network, envs[0], observations.device)
    started: list[list[torch.Tensor]] = [[] for _ in network.state_keys]
    values, next_values = [], []
    for t in range(observations.shape[1]):
        state = [torch.where(is_init[:, t].unsqueeze(-1), torch.zeros_like(s), s) for s in state]
        for kept, s in zip(started, state):
            kept.append(s)
        step = network.core(TensorDict({key: observations[:, t], "is_init": is_init[:, t],
                                        **dict(zip(network.state_keys, state))}, batch_size=envs))
        values.append(network.head(step).get(network.head.out_keys[0]))
        state = [step.get(("next", k)) for k in network.state_keys]
        ahead = network.core(TensorDict({key: following[:, t], "is_init": torch.zeros_like(is_init[:, t]),
                                         **dict(zip(network.state_keys, state))}, batch_size=envs))
        next_values.append(network.head(ahead).get(network.head.out_keys[0]))
    for name, kept in zip(network.state_keys, started):
        batch.set(name, torch.stack(kept, 1))
    return torch.stack(values, 1), torch.stack(next_values, 1), state


def zero_state(network: RecurrentNetwork, envs: int, device: torch.device) -> list[torch.Tensor]:
    """A fresh hidden state of ``network`` for ``envs`` envs: ``[envs, num_layers, hidden_size]`` per key."""
    cell = network.core.lstm if isinstance(network.core, LSTMModule) else network.core.gru
    return [torch.zeros(envs, cell.num_layers, cell.hidden_size, device=device) for _ in network.state_keys]


# -- learning from sequences -----------------------------------------------------------------------------

@dataclass(frozen=True)
class ObservationSequence:
    """Sampled sequences in place of an observation batch: ``observations`` ``[batch, L + 1, ...]`` (the L
    stored observations and the last one's next), ``is_init`` ``[batch, L + 1, 1]``; the positions that
    count are ``start + offset`` to ``start + offset + L - start`` (``offset`` 0: the observations, 1: the
    next observations; ``start``: the burn-in)."""

    observations: torch.Tensor
    is_init: torch.Tensor
    start: int
    offset: int

    def select(self, values: torch.Tensor) -> torch.Tensor:
        """The positions of ``values`` (``[batch, L + 1, ...]``) that count."""
        first = self.start + self.offset
        return values[:, first:first + values.shape[1] - 1 - self.start]

    def next(self) -> ObservationSequence:
        return ObservationSequence(self.observations, self.is_init, self.start, 1)


def sequence_function(network: TensorDictModuleBase, in_keys: list):
    """``network`` as a function of an :class:`ObservationSequence` (and the tensors of its other inputs,
    already at the positions that count): a recurrent network reads the whole sequence with its core and
    its head the positions that count; any other network reads those positions alone."""
    if isinstance(network, RecurrentNetwork):
        head = tensor_function(network.head, [network.features_key, *in_keys[1:]])

        def recurrent(sequence: ObservationSequence, *rest: torch.Tensor) -> torch.Tensor:
            features = network.sequence_features(sequence.observations, sequence.is_init)
            return head(sequence.select(features), *rest)

        return recurrent
    function = tensor_function(network, in_keys)

    def feedforward(sequence: ObservationSequence, *rest: torch.Tensor) -> torch.Tensor:
        return function(sequence.select(sequence.observations), *rest)

    return feedforward


__all__ = ["RecurrentNetwork", "ObservationSequence", "is_recurrent", "make_recurrent", "sequence_function",
           "stepped_values", "with_recurrent_state"]
