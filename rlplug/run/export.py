"""A run's deterministic policy as a file that runs without rlplug: ONNX (for onnxruntime) or TorchScript.

The exported module is what :meth:`rlplug.Agent.select_action` computes, as one torch module:

- the env's observation normalisation and clipping (``Env.observation_normalizer``), with the statistics of
  the checkpoint frozen in, computed in float64 as the env computes them;
- the policy, deterministic: the most probable action of a categorical policy, the mean of a Gaussian (squashed
  into the bounds where the recipe squashes), a deterministic actor's action, the greedy action of Q-values.

Input ``observation``: float32 ``[batch, *observation shape]``, observations as the recipe's env gives them
(after its per-env wrappers: frame stacking, entries kept), before normalisation; where the env masks actions,
a second input ``action_mask``, bool ``[batch, choices]``, and the action is an allowed one. Outputs: ``action``, the
action in gymnasium's format (int64 ``[batch]``, the index, for discrete actions; float32 ``[batch, n]`` for
continuous ones) and, for categorical policies, ``logits`` (float32 ``[batch, choices]``). What each output is
is also written into the file (ONNX metadata and output doc strings; a TorchScript extra file
``rlplug.json``): see :func:`describe`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDict, unravel_key
from torch import nn
from torchrl.envs.utils import ExplorationType, set_exploration_type

from rlplug.core.acting import ActorView, deterministic_sample
from rlplug.core.actions import ActionLayout, action_layout
from rlplug.core.env_members import env_capability
from rlplug.core.heads import observation_entries, observation_key
from rlplug.core.masks import MASK, masked_logits
from rlplug.core.recurrent import is_recurrent
from rlplug.core.transformed import TransformedRecipeEnv
from rlplug.errors import UserError
from rlplug.registry import protocols

FORMATS = ("onnx", "torchscript")
#: The ONNX opset written (onnxruntime 1.17 and later run it).
OPSET = 18
#: The TorchScript extra file that describes the inputs and outputs.
TORCHSCRIPT_INFO = "rlplug.json"


class CategoricalPolicy(nn.Module):
    """``observation -> (action index, logits)``: the most probable action, as :class:`ActorView` picks it."""

    def __init__(self, view: ActorView):
        super().__init__()
        self.params = view.params_module

    def forward(self, observation: torch.Tensor, mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.params(observation)
        if mask is not None:  # the env's allowed actions: the head's MaskedCategorical numbers
            logits = masked_logits(logits, mask)
        return logits.log_softmax(-1).argmax(-1), logits


class DistributionPolicy(nn.Module):
    """``observation -> action``: the deterministic sample of the policy's distribution (a Gaussian's mean,
    squashed into the bounds where the head squashes)."""

    def __init__(self, view: ActorView):
        super().__init__()
        self.params = view.params_module
        self.view = view

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        params = self.params(observation)
        params = params if isinstance(params, tuple) else (params,)
        view = self.view
        return deterministic_sample(view.distribution_class(**dict(zip(view.param_keys, params)),
                                                            **view.distribution_kwargs))


class TensorDictPolicy(nn.Module):
    """``observation -> action`` through the policy's TensorDict interface (deterministic actors with their
    exploration stages, Q-value policies); one-hot actions become indices."""

    def __init__(self, policy: nn.Module, observation_key: str, one_hot: bool):
        super().__init__()
        self.policy, self.observation_key, self.one_hot = policy, observation_key, one_hot

    def forward(self, observation: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        data = TensorDict({self.observation_key: observation, **({MASK: mask} if mask is not None else {})},
                          batch_size=observation.shape[:1])
        action = self.policy(data).get("action")
        return action.argmax(-1) if self.one_hot else action


class Affine(nn.Module):
    """TorchRL's ObservationNorm on one tensor, its statistics as constants: ``(x - loc) / scale`` (standard
    normal) or ``x * scale + loc``. Its own module since the transform's branch on a tensor flag cannot be
    exported."""

    loc: torch.Tensor
    scale: torch.Tensor

    def __init__(self, norm):
        super().__init__()
        self.register_buffer("loc", norm.loc.detach().clone().float())
        self.register_buffer("scale", norm.scale.detach().clone().float())
        self.standard_normal = bool(norm.standard_normal)

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        if self.standard_normal:
            return (observation - self.loc) / self.scale
        return observation * self.scale + self.loc


def transforms_normalizer(env, key: str) -> nn.Module | None:
    """``env.transforms`` that read the policy's observation, as a module export can carry: VecNorm (its
    statistics as they are now, as TorchRL's ObservationNorm gives them) and ObservationNorm, each writing where
    it reads; ``UserError`` naming any other, whose change the file would leave out. None when none reads it."""
    from torchrl.envs import Compose, ObservationNorm

    steps = []
    for index, transform in enumerate(env.recipe_transforms if isinstance(env, TransformedRecipeEnv) else ()):
        reads = [unravel_key(k) for k in transform.in_keys or ()]
        if unravel_key(key) not in reads:
            continue  # rewards, step counts: not what the policy reads
        writes = [unravel_key(k) for k in transform.out_keys or reads]
        norm = transform if isinstance(transform, ObservationNorm) else None
        if norm is None and callable(getattr(transform, "to_observation_norm", None)):
            norm = transform.to_observation_norm()  # VecNorm: its running statistics, frozen
        norms = list(norm.transforms) if isinstance(norm, Compose) else [norm]
        mine = [n for n in norms if n is not None and unravel_key(key) in [unravel_key(k) for k in n.in_keys]]
        if writes != reads or len(mine) != 1:
            raise UserError(f"env.transforms[{index}] ({type(transform).__name__}) changes the observation the "
                            f"policy reads, and export carries only VecNorm and ObservationNorm (writing where "
                            f"they read) into the file; the checkpoint still runs with rlplug.Agent.load")
        steps.append(Affine(mine[0]))
    return nn.Sequential(*steps) if steps else None


class DeployedPolicy(nn.Module):
    """The observation normalisation, then the deterministic policy."""

    def __init__(self, normalizer: nn.Module | None, policy: nn.Module):
        super().__init__()
        self.normalizer, self.policy = normalizer, policy

    def forward(self, observation: torch.Tensor, mask: torch.Tensor | None = None):
        if self.normalizer is not None:
            observation = self.normalizer(observation)
        return self.policy(observation) if mask is None else self.policy(observation, mask)


@dataclass
class Deployable:
    """A run's policy ready to be exported, and what its inputs and outputs are."""

    module: DeployedPolicy
    example: torch.Tensor
    outputs: list[str]
    info: dict[str, Any]
    #: an example ``action_mask`` (bool ``[batch, choices]``), the second input, where the env masks actions
    mask_example: torch.Tensor | None = None

    @property
    def examples(self) -> tuple[torch.Tensor, ...]:
        return (self.example,) if self.mask_example is None else (self.example, self.mask_example)

    @property
    def inputs(self) -> list[str]:
        return ["observation"] if self.mask_example is None else ["observation", MASK]


def deployable(run) -> Deployable:
    """The deterministic policy of ``run`` (a :class:`rlplug.run.trainer.Run`) with its env's observation
    normalisation in front; ``UserError`` for what cannot be exported."""
    policy = run.algorithm.policy
    if is_recurrent(policy):
        raise UserError("the policy is recurrent (lstm, gru): export takes feed-forward policies for now; the "
                        "checkpoint still runs with rlplug.Agent.load")
    env = run.env
    key = observation_key(env.observation_spec)
    if observation_entries(env.observation_spec) is not None:
        raise UserError("the policy reads a Dict observation (named entries): export takes one observation "
                        "tensor for now; the checkpoint still runs with rlplug.Agent.load")
    layout = action_layout(env.action_spec, env.batch_dims)
    if layout.kind == "parts":
        raise UserError(f"the policy acts in {layout.describe()}: export writes one Discrete or Box action for "
                        f"now; the checkpoint still runs with rlplug.Agent.load")
    normalizer = None
    if env_capability(env, protocols.Env.normalize_observation):
        make = env_capability(env, protocols.Env.observation_normalizer)
        if make is None:
            raise UserError(f"the env ({run.recipe.env.title}) normalises observations but offers no "
                            f"observation_normalizer() to export it with")
        normalizer = make()
    transformed = transforms_normalizer(env, key)
    if transformed is not None:  # the env's own normalisation comes first: the transforms wrap the env
        normalizer = transformed if normalizer is None else nn.Sequential(normalizer, transformed)
    try:
        view = ActorView.of(policy)
    except TypeError:
        view = None
    actor: nn.Module
    if view is not None and view.categorical:
        actor, outputs = CategoricalPolicy(view), ["action", "logits"]
    elif view is not None:
        actor, outputs = DistributionPolicy(view), ["action"]
    else:
        actor, outputs = TensorDictPolicy(policy, key, layout.one_hot), ["action"]
    shape = tuple(env.observation_spec[key].shape[env.batch_dims:])
    module = DeployedPolicy(normalizer, actor).eval()
    example = env.observation_spec[key].zero()[(0,) * env.batch_dims].expand(2, *shape).to(torch.float32)
    masked = MASK in env.observation_spec.keys()
    if masked and isinstance(actor, DistributionPolicy):
        raise UserError("the policy's masked distribution reads no mask in export; the checkpoint still runs with "
                        "rlplug.Agent.load")
    mask_example = torch.ones(2, layout.parts[0], dtype=torch.bool) if masked else None
    info = describe(run, outputs, layout, shape, normalizer is not None, masked)
    return Deployable(module, example.contiguous(), outputs, info, mask_example)


def describe(run, outputs: list[str], layout: ActionLayout, shape: tuple[int, ...],
             normalised: bool, masked: bool = False) -> dict[str, Any]:
    """What the exported file holds, in words and numbers (ONNX metadata, TorchScript's extra file)."""
    recipe = run.recipe
    env_id = recipe.env.params.get("id") if isinstance(recipe.env.params.get("id"), str) else None
    discrete = layout.kind == "categorical"
    if discrete:
        action = ("int64 [batch]: the index of the chosen action (the most probable one), as gymnasium's Discrete "
                  "space takes it (counted from 0: add a space's start); not logits")
    else:
        dims = ", ".join(map(str, layout.shape))
        action = (f"float32 [batch, {dims}]: the action in the env's units, deterministic (a Gaussian policy's "
                  f"mean, squashed into the bounds where the policy squashes)")
    described = {"action": action}
    if "logits" in outputs:
        described["logits"] = "float32 [batch, choices]: the policy's logits (unnormalised log-probabilities)"
    names = recipe.env.policy_in_keys
    listed = ", ".join(map(repr, names))
    given = "observations as the env gives them" if not names else \
        f"the env's observation entry {listed} ([algorithm.policy] in_keys)" if len(names) == 1 else \
        f"the env's observation entries {listed}, concatenated in that order ([algorithm.policy] in_keys)"
    observation = f"float32 [batch, {', '.join(map(str, shape))}]: {given}"
    inputs = {"observation": observation + (" (normalised inside the file)" if normalised else "")}
    if masked:
        inputs[MASK] = (f"bool [batch, {layout.parts[0]}]: the env's action_mask, true where an action is allowed; "
                        f"the action is chosen among those")
    return {
        "producer": "rlplug export", "env": env_id or recipe.env.spec.name, "algorithm": recipe.algorithm.spec.name,
        "frames": run.frames, "seed": recipe.run.seed,
        "input": inputs,
        "outputs": described, "action_type": "discrete" if discrete else "continuous",
        "observation_normalization": "included, statistics frozen at export" if normalised else "none",
    }


@contextlib.contextmanager
def exporting():
    """The deterministic branch of every policy, no distribution argument checks (constants to the tracer),
    and torch's exporters' own chatter kept off the console."""
    loggers = [logging.getLogger(name) for name in ("torch.onnx", "torch.export", "torch._export", "onnxscript")]
    levels = [logger.level for logger in loggers]
    validate = torch.distributions.Distribution._validate_args
    try:
        for logger in loggers:
            logger.setLevel(logging.ERROR)
        torch.distributions.Distribution.set_default_validate_args(False)
        with warnings.catch_warnings(), set_exploration_type(ExplorationType.DETERMINISTIC), torch.no_grad():
            warnings.simplefilter("ignore")
            yield
    finally:
        torch.distributions.Distribution.set_default_validate_args(validate)
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def exported_program(item: Deployable):
    """``item`` captured by ``torch.export`` (aten operations only, the batch dimension left free): what both
    formats are written from, so that they compute the same graph."""
    with exporting():
        batch = torch.export.Dim("batch")
        shapes = {name: {0: batch} for name in ("observation", "mask")[:len(item.examples)]}
        return torch.export.export(item.module, item.examples, dynamic_shapes=shapes, strict=False)


def export_onnx(item: Deployable, path: Path) -> Path:
    """Write ``item`` as an ONNX model with a dynamic batch dimension, its description in the metadata."""
    import onnx

    program = exported_program(item)
    with exporting():
        onnx_program = torch.onnx.export(program, item.examples, dynamo=True, input_names=item.inputs,
                                         output_names=item.outputs, opset_version=OPSET, verbose=False)
    if onnx_program is None:
        raise RuntimeError("torch.onnx.export returned no ONNX program")
    model = onnx_program.model_proto
    for output in model.graph.output:
        output.doc_string = item.info["outputs"].get(output.name, "")
    for graph_input in model.graph.input:
        graph_input.doc_string = item.info["input"].get(graph_input.name, "")
    model.doc_string = f"rlplug policy: {item.info['algorithm']} on {item.info['env']}"
    for key, value in flat_info(item.info).items():
        entry = model.metadata_props.add()
        entry.key, entry.value = f"rlplug.{key}", value
    onnx.checker.check_model(model)
    write_bytes(path, model.SerializeToString())
    return path


def export_torchscript(item: Deployable, path: Path) -> Path:
    """Write ``item`` as TorchScript (``torch.jit.load`` runs it), its description as an extra file. The
    exported program's graph is traced, not the module: TorchRL's distributions call Python autograd
    functions, which TorchScript cannot hold, and ``torch.export`` has already inlined them."""
    import io

    program = exported_program(item)
    with exporting():
        traced = torch.jit.trace(program.module(), item.examples, check_trace=False)
        buffer = io.BytesIO()
        torch.jit.save(traced, buffer, _extra_files={TORCHSCRIPT_INFO: json.dumps(item.info, indent=2)})
    write_bytes(path, buffer.getvalue())
    return path


def flat_info(info: dict[str, Any], prefix: str = "") -> dict[str, str]:
    flat: dict[str, str] = {}
    for key, value in info.items():
        if isinstance(value, dict):
            flat.update(flat_info(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = str(value)
    return flat


def write_bytes(path: Path, data: bytes) -> None:
    from rlplug.run.directory import write_atomically, writing_output

    with writing_output("-o", path, "the exported policy"):
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(path, data)


def export(run, path: Path, fmt: str) -> tuple[Path, Deployable]:
    """Export ``run``'s deterministic policy to ``path`` in ``fmt`` ("onnx" or "torchscript")."""
    if fmt not in FORMATS:
        raise UserError(f"--format {fmt}: expected one of {', '.join(FORMATS)}")
    item = deployable(run)
    writer = export_onnx if fmt == "onnx" else export_torchscript
    return writer(item, Path(path)), item
