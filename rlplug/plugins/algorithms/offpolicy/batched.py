"""Seeds of one off-policy recipe learning together (``rlplug run --seeds --batched``): SAC, DDPG, TD3, TQC and DQN
(not CrossQ: its batch-normalised critics' statistics are state that changes in every pass).

Each seed's algorithm is built as its own run builds it and stays the source of truth: its replay buffer (seeded
from its seed) takes its own batches and draws its own samples, its schedules follow its frames, its loss module
holds its networks and their target copies. What is done at once is the gradient step: the samples ``[seeds,
batch, ...]`` go through the first seed's loss module called under ``torch.vmap`` with every seed's parameters,
trained, target and fixed, swapped in (:meth:`rlplug.core.stacked.StackedParameters.vmapped`); one backward pass
of the summed losses gives each seed the gradient of its own loss; each learner (actor, critic, entropy
coefficient: the loss's ``parameter_groups``) clips each seed's gradient norm on its own and steps one optimiser
over its stack; the targets move towards the online rows of the same learner, all seeds at once (the loss's
``target_parameters`` pair them). DQN moves its targets by frames, in each seed's own ``before_update``: its
target network's parameters are views of its row of the stacked targets, so its own polyak step lands there.

Acting: one call of the first seed's actor network (DQN: its Q-network) with every seed's parameters, then each
seed's own exploration stages (its noise, its epsilon-greedy choice, its random-action phase) on its share.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import replace

import numpy as np
import torch
import torch.distributions.normal as normal_module
from tensordict import TensorDict, TensorDictBase

from rlplug.core.acting import ArrayActor, ChainArrayActor, TorchArrayActor, env_action
from rlplug.core.stacked import RETRY, StackedParameters, stacked_optimiser, store_rows
from rlplug.core.training import FlatParameters, set_learning_rate, summed, updates_stopped
from rlplug.errors import UserError
from rlplug.registry import protocols
from rlplug.registry.protocols import capability


def refuse_unbatchable(algorithm) -> None:
    """What the first seed's algorithm tells about stacking, as one-line errors naming the key."""
    config, loss = algorithm.config, algorithm.loss_module
    if not capability(loss, protocols.Loss.batchable) or (
            algorithm.update_targets is not None and capability(loss, protocols.Loss.target_parameters) is None):
        raise UserError(f"{config.loss.title} cannot compute several seeds at once (it does not declare "
                        f"'batchable' and its 'target_parameters'); use rlplug's own loss, or {RETRY}",
                        path="algorithm.loss")
    if config.mixed_precision:
        raise UserError(f"mixed precision is not stacked over seeds; {RETRY}", path="algorithm.mixed_precision")
    if algorithm.preprocessor is not None:
        raise UserError(f"the observation preprocessor's statistics are each seed's own, which the stacked actor "
                        f"does not read; use the env's normalize_observations, or {RETRY}",
                        path="algorithm.observation_preprocessor")
    if not all(isinstance(trained, FlatParameters) for trained in algorithm.learners.trained.values()):
        raise UserError(f"the networks' parameters are not of one dtype and device, so the seeds cannot be "
                        f"stacked; {RETRY}", path="algorithm")


class OffPolicyTogether:
    """A :class:`rlplug.registry.protocols.BatchedUpdate` of :class:`OffPolicy` copies, one per seed."""

    def __init__(self, algorithms: list, seeds: list[int]):
        refuse_unbatchable(algorithms[0])
        self.active = list(algorithms)
        self._stack()

    # -- stacking ---------------------------------------------------------------------------------------

    def _stack(self) -> None:
        """The active seeds' learners, targets and optimiser states stacked; the loss and actor over the stacks."""
        template, active = self.active[0], self.active
        loss = template.loss_module
        self.names = list(template.learners.groups)
        self.stacks = {name: StackedParameters([a.learners.trained[name] for a in active]) for name in self.names}
        self.optimisers = {name: stacked_optimiser([a.learners.optimisers[name] for a in active],
                                                   self.stacks[name].stacked) for name in self.names}
        # each learner's targets: every seed's made one flat tensor (views, as its learners'), then stacked
        pairs = [capability(a.loss_module, protocols.Loss.target_parameters) or {} for a in active]
        target_flats = {name: [FlatParameters(list(p[name]), trained=False) for p in pairs] for name in pairs[0]}
        self.targets = {name: StackedParameters(flats, trained=False) for name, flats in target_flats.items()}
        trained = [p for name in self.names for p in template.learners.trained[name].parameters]
        targets = [p for flats in target_flats.values() for p in flats[0].parameters]
        # what is neither trained nor a target (a fixed entropy coefficient): each seed's own values, stacked
        known = {id(p) for p in trained + targets}
        fixed = [name for name, p in loss.named_parameters() if id(p) not in known]
        self.fixed = [torch.stack([dict(a.loss_module.named_parameters())[name].detach() for a in active])
                      for name in fixed]
        owned = dict(loss.named_parameters())
        self._loss = self.stacks[self.names[0]].vmapped(loss, trained + targets + [owned[n] for n in fixed],
                                                        lambda sample: seed_loss(loss, sample),
                                                        randomness="different")
        self._actor = self._stacked_actor(template)

    def leaves(self) -> list[torch.Tensor]:
        """Every parameter the loss holds, stacked ``[seeds, *shape]``, in the order :meth:`_stack` gave."""
        return [leaf for name in self.names for leaf in self.stacks[name].leaves()] + \
            [leaf for stack in self.targets.values() for leaf in stack.leaves(trained=False)] + self.fixed

    def _stacked_actor(self, template) -> ArrayActor:
        """The first seed's acting network with every seed's parameters, then each seed's exploration stages."""
        actors = [ArrayActor.for_policy(a.policy, a.device, 0) for a in self.active]
        first = actors[0]
        if isinstance(first, TorchArrayActor):
            module = first.view.params_module
        elif isinstance(first, ChainArrayActor):
            module = first.module
        else:  # the collector's array road (which --batched needs) has no actor for this policy
            raise UserError(f"the policy has no array actor, so its seeds cannot act together; {RETRY}",
                            path="algorithm")
        held = {id(p) for p in module.parameters()}
        name = next(n for n in self.names if held <= {id(p) for p in template.learners.trained[n].parameters})
        stack = self.stacks[name]
        call = stack.vmapped(module, template.learners.trained[name].parameters, module)
        leaves = stack.leaves(trained=False)  # views of the stack: they read each optimiser step

        def stacked_module(observation: torch.Tensor) -> torch.Tensor:
            return call(leaves, observation)

        device = self.stacks[name].stacked.device
        if isinstance(first, TorchArrayActor):  # a stochastic actor alone (no stages: else no array actor)
            # ActorView only calls params_module: a function of the observation serves as well as a module
            view = replace(first.view, params_module=stacked_module)  # type: ignore[arg-type]  # any callable serves
            return TorchArrayActor(view, device)
        chains = [actor for actor in actors if isinstance(actor, ChainArrayActor)]
        if len(chains) != len(actors):  # seeds' copies of one policy: each has the first's kind of actor
            raise UserError(f"the policy has no array actor for every seed, so its seeds cannot act together; "
                            f"{RETRY}", path="algorithm")
        return StackedChainActor(first, stacked_module, [chain.stages for chain in chains], device)

    # -- the update -------------------------------------------------------------------------------------

    def actor(self) -> ArrayActor:
        return self._actor

    def update(self, batches: list) -> list[dict[str, float]]:
        """Each seed's :meth:`OffPolicy.update`: its batch stored and its schedules followed by its own algorithm,
        then every gradient step taken for all seeds at once."""
        results = [a.start_update(batch) for a, batch in zip(self.active, batches)]
        learning = {a.learning() for a in self.active}
        if len(learning) > 1:
            raise RuntimeError("the seeds disagree on whether to learn; their frames and buffers should be alike")
        if not learning.pop():
            return [{**result, **a.extra_metrics()} for a, result in zip(self.active, results)]
        template = self.active[0]
        for name, optimiser in self.optimisers.items():  # frame schedules: the same for every seed
            set_learning_rate(optimiser, template.learners.optimisers[name].param_groups[0]["lr"])
        sums: dict[str, torch.Tensor] = {}
        counts: dict[str, int] = {}  # per metric: TD3's actor term is there every policy_delay steps only
        for samples in zip(*(a.samples() for a in self.active)):
            if updates_stopped():  # a signal: the update ends here, not after every gradient step
                break
            for key, value in self.gradient_step(list(samples)).items():
                sums[key] = sums[key] + value if key in sums else value
                counts[key] = counts.get(key, 0) + 1
        means = {key: (total / counts[key]).tolist() for key, total in sums.items()}
        return [{**result, **{key: values[i] for key, values in means.items()}, **a.extra_metrics()}
                for i, (a, result) in enumerate(zip(self.active, results))]

    def gradient_step(self, samples: list[TensorDictBase]) -> dict[str, torch.Tensor]:
        """:meth:`OffPolicy.gradient_step` of every seed on its own sample; each metric ``[seeds]``."""
        template, seeds = self.active[0], len(self.active)
        stepped = template.stepped_learners()  # TD3's delay: the same step count for all; the loss called is its
        with normal_draws_per_seed():
            out, td_error = self._loss(self.leaves(), stacked(samples))
        learners = template.loss_module.term_learners
        terms = [value for key, value in out.items() if key in learners and learners[key] in stepped]
        moved = [name for name in self.names if name in stepped]
        for name in moved:
            grad = self.stacks[name].stacked.grad
            if grad is None:  # the stack keeps a gradient from its making on
                raise RuntimeError(f"the seeds' stacked {name} parameters have no gradient to zero")
            grad.zero_()
        summed(terms).sum().backward()  # seeds share no parameter: each gets its own loss's gradient
        max_grad_norm = template.config.max_grad_norm
        norms = {name: self.stacks[name].clip_and_step(self.optimisers[name], max_grad_norm) for name in moved}
        if template.update_targets is not None and template.moves_targets():
            self.move_targets(template.tau)
        for index, (algorithm, sample) in enumerate(zip(self.active, samples)):
            algorithm.steps += 1
            algorithm.new_priorities(sample, None if td_error is None else td_error[index])
        metrics = {key: value.detach().float() for key, value in out.items() if value.shape == (seeds,)}
        if max_grad_norm:
            metrics.update({f"grad_norm_{name}": norm for name, norm in norms.items()})
        return metrics

    @torch.no_grad()
    def move_targets(self, tau: float) -> None:
        """Polyak averaging of every seed's targets at once, as the loss's ``update_targets`` (``tau = 1``: a
        copy)."""
        for name, target in self.targets.items():
            online = self.stacks[name].stacked
            if tau == 1.0:
                target.stacked.copy_(online)
            else:
                target.stacked.lerp_(online, tau)

    # -- the rest of the protocol -----------------------------------------------------------------------

    def finite(self) -> list[bool]:
        rows = [stack.finite() for stack in self.stacks.values()]
        return [all(seed) for seed in zip(*rows)]

    def keep(self, indices: list[int]) -> None:
        self.sync()
        self.active = [self.active[i] for i in indices]
        if self.active:
            self._stack()

    def sync(self) -> None:
        for name, optimiser in self.optimisers.items():
            store_rows(optimiser, self.stacks[name].stacked, [a.learners.optimisers[name] for a in self.active])

    def restart(self, seeds: list[int]) -> None:
        """Nothing to restart: each seed's samples come from its replay buffer's own generator, kept in its
        checkpoint."""


def seed_loss(loss: torch.nn.Module, sample: dict) -> tuple[dict[str, torch.Tensor], torch.Tensor | None]:
    """One seed's loss terms on its sample (inside vmap), and the TD errors the loss wrote (for priorities)."""
    data = TensorDict(sample, batch_size=[sample["observation"].shape[0]])
    out = loss(data)
    return dict(out.items()), data.get("td_error", None)


def stacked(samples: list[TensorDictBase]) -> dict:
    """The seeds' samples as one nested dict of ``[seeds, batch, ...]`` tensors (the buffer's ``index`` left out:
    each seed's priorities are updated from its own sample)."""
    def walk(parts: list[TensorDictBase]) -> dict:
        result: dict[str, dict | torch.Tensor] = {}
        for key in parts[0].keys():
            value = parts[0].get(key)
            if isinstance(value, TensorDictBase):
                result[key] = walk([part.get(key) for part in parts])
            elif key != "index":
                result[key] = torch.stack([part.get(key) for part in parts])
        return result

    return walk(samples)


def _standard_normal(shape, dtype, device) -> torch.Tensor:
    return torch.randn(shape, dtype=dtype, device=device)


@contextlib.contextmanager
def normal_draws_per_seed():
    """torch's ``Normal.rsample`` draws its noise in place into a new tensor (``torch.empty(shape).normal_()``),
    which ``torch.vmap(randomness="different")`` refuses; inside, the same draws are taken out of place
    (``torch.randn``), which vmap gives each seed its own of (SAC's reparameterised actions)."""
    original = normal_module._standard_normal
    normal_module._standard_normal = _standard_normal
    try:
        yield
    finally:
        normal_module._standard_normal = original


class StackedChainActor(ChainArrayActor):
    """:class:`ChainArrayActor` for every seed: the first seed's chain with its network computed over the stacked
    parameters on ``[seeds, envs, ...]`` (a probabilistic one through its view: the actions and their
    log-probabilities), then each seed's own stages (its exploration noise, its random-action phase) on its share
    of the actions."""

    def __init__(self, first: ChainArrayActor, module: Callable, stages: list[list], device: torch.device):
        self.observation_key, self.action_key, self.one_hot = first.observation_key, first.action_key, first.one_hot
        self.log_prob_key, self.stages, self.device = first.log_prob_key, stages, device
        # ChainArrayActor.first_action reads these: any function of the observation serves as the module
        self.module = module  # type: ignore[assignment]
        self.view = None if first.view is None else replace(first.view, params_module=module)  # type: ignore[arg-type]

    @torch.no_grad()
    def act(self, observation: np.ndarray, deterministic: bool = False) -> tuple[np.ndarray, np.ndarray | None]:
        actions, log_probs = self.first_action(torch.from_numpy(observation).to(self.device), deterministic)
        chosen = []
        for action, stages in zip(actions, self.stages):
            for stage in stages:
                action = stage.act_on(action)
            chosen.append(action)
        return env_action(torch.stack(chosen), self.one_hot), None if log_probs is None else log_probs.cpu().numpy()
