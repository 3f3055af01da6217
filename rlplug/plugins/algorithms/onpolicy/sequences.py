"""Recurrent policies in the on-policy family: what the recipe must give them, and a batch cut into whole
sequences (see :mod:`rlplug.plugins.algorithms.onpolicy.base`'s docstring for why each starts from the hidden
state it was collected with)."""

from __future__ import annotations

from typing import Any

from tensordict import TensorDictBase

from rlplug.core.recurrent import is_recurrent
from rlplug.core.training import Prepared, explained_variance
from rlplug.errors import UserError


class Sequences:
    """Mixed into :class:`~rlplug.plugins.algorithms.onpolicy.base.OnPolicy`, whose attributes it reads."""

    policy: Any
    critic: Any
    actor: Any
    config: Any
    observation_key: Any
    learns_sequences: bool

    def estimate(self, batch: TensorDictBase) -> TensorDictBase:
        raise NotImplementedError

    def check_recurrence(self) -> bool:
        """Whether the policy is recurrent; what recurrent networks need of the recipe, as one-line errors."""
        recurrent = is_recurrent(self.policy)
        if self.critic is not None and is_recurrent(self.critic) and not recurrent:
            raise UserError("a recurrent critic needs a recurrent policy (episodes are told apart by the policy's "
                            "collection): set use = 'lstm' or 'gru' here too", path="algorithm.policy")
        if recurrent and not self.learns_sequences:
            raise UserError(f"{type(self).__name__.lower()} does not learn from the sequences of recurrent networks "
                            f"(lstm, gru) yet; use ppo, a2c, vpg, surrogate or ppo-kl", path="algorithm.policy")
        if recurrent and self.config.shared_body:
            raise UserError("recurrent networks (lstm, gru) do not share a body; set shared_body = false",
                            path="algorithm.shared_body")
        return recurrent

    def prepare_sequences(self, batch: TensorDictBase, minibatch_size: int) -> Prepared:
        """:meth:`prepare` for a recurrent policy: the estimates along each env's row, then the rows cut into
        sequences of ``sequence_length`` steps, each with the states its first step started from; a minibatch
        holds ``minibatch_size // sequence_length`` whole sequences (at least one)."""
        rows = batch.reshape(-1, batch.batch_size[-1]) if batch.ndim != 2 else batch  # one env: one row
        rows = self.estimate(rows)
        steps = rows.batch_size[1]
        length = self.config.sequence_length or steps
        if steps % length:
            raise UserError(f"must divide the steps each env collects per batch (frames_per_batch / num_envs = "
                            f"{steps}), got {length}", path="algorithm.sequence_length")
        actor = self.actor
        keys = [self.observation_key, "is_init", *getattr(self.policy, "state_keys", []), actor.action_key,
                actor.log_prob_key, "advantage"]
        if self.critic is not None:
            keys += ["value_target", "state_value", *getattr(self.critic, "state_keys", [])]
        data = {}
        for key in keys:
            value = rows.get(key)
            data[key] = value.reshape(-1, length, *value.shape[2:])
        variance = explained_variance(data["state_value"].reshape(-1), data["value_target"].reshape(-1)) \
            if self.critic else None
        return Prepared(data, max(1, minibatch_size // length), variance, sequence_length=length)
