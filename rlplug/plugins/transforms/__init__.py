"""Env transforms: TorchRL's own ``Transform`` classes, registered under their class names.

A recipe lists them as ``[[env.transforms]]`` tables (``use = "RewardScaling"`` and the constructor's
keyword arguments); rlplug applies them in order through ``TransformedEnv`` to every env the recipe builds,
training, evaluation and video alike (:mod:`rlplug.core.transformed`). Each factory below is the class's
constructor with annotations the recipe schema checks; keys are TensorDict keys, a nested one written as a
list (``["next", "reward"]``). Nothing TorchRL does is re-implemented here.
"""

from __future__ import annotations

from typing import Annotated, Literal

from rlplug.registry.hookspecs import hookimpl
from rlplug.registry.schema import Check, Range

#: a TensorDict key: a name, or a list of names for a nested key
Key = str | list[str]
Keys = list[Key]
Positive = Annotated[float, Range(gt=0.0)]


def nonzero(value: float) -> str | None:
    return "must not be 0" if value == 0 else None


def torchrl_transform(name: str, **kwargs):
    """TorchRL's transform ``name`` built with ``kwargs``: keys given as lists become nested-key tuples, and
    keys left unset (None) take TorchRL's own default."""
    import torchrl.envs as envs

    def key(value):
        return tuple(value) if isinstance(value, list) else value

    for name_ in ("in_keys", "out_keys", "in_keys_inv", "out_keys_inv", "reset_keys"):
        if kwargs.get(name_) is not None:
            kwargs[name_] = [key(k) for k in kwargs[name_]]
    for name_ in ("out_key", "reset_key"):
        if kwargs.get(name_) is not None:
            kwargs[name_] = key(kwargs[name_])
    return getattr(envs, name)(**{k: v for k, v in kwargs.items() if v is not None})


def make_step_counter(
    #: truncate episodes after this many steps (unset: count only)
    max_steps: Annotated[int, Range(ge=1)] | None = None,
    #: where the truncation is written
    truncated_key: str = "truncated",
    #: where the step count is written (an observation entry)
    step_count_key: str = "step_count",
    #: mark truncated episodes as done
    update_done: bool = True,
):
    """TorchRL's StepCounter: counts steps per episode, and truncates them at max_steps."""
    return torchrl_transform("StepCounter", max_steps=max_steps, truncated_key=truncated_key,
                             step_count_key=step_count_key, update_done=update_done)


def make_reward_scaling(
    #: added after scaling: reward * scale + loc
    loc: float = 0.0,
    #: the reward's factor
    scale: Annotated[float, Check(nonzero)] = 1.0,
    #: the rewards to scale (unset: reward)
    in_keys: Keys | None = None,
    out_keys: Keys | None = None,
    #: (reward - loc) / scale instead
    standard_normal: bool = False,
):
    """TorchRL's RewardScaling: an affine map of the reward the algorithm learns from.

    Returns are still reported in the env's own units."""
    return torchrl_transform("RewardScaling", loc=loc, scale=scale, in_keys=in_keys, out_keys=out_keys,
                             standard_normal=standard_normal)


def make_reward_sum(
    #: the rewards to sum (unset: the env's reward keys)
    in_keys: Keys | None = None,
    #: where the sums go (unset: episode_reward)
    out_keys: Keys | None = None,
    reset_keys: Keys | None = None,
    #: declare the sums in the reward spec instead of the observation spec
    reward_spec: bool = False,
):
    """TorchRL's RewardSum: the episode's reward so far, as an entry of each step."""
    return torchrl_transform("RewardSum", in_keys=in_keys, out_keys=out_keys, reset_keys=reset_keys,
                             reward_spec=reward_spec)


def zero_factor(scale: float | list[float]) -> str | None:
    """ObservationNorm's ``scale``: a 0 anywhere turns that entry into a constant (or divides by nothing)."""
    if any(factor == 0 for factor in (scale if isinstance(scale, list) else [scale])):
        return f"must not be 0 (got {scale!r}): it would turn the observation into a constant, or divide by 0"
    return None


def make_observation_norm(
    #: the shift: one number, or one per observation entry
    loc: float | list[float],
    #: the factor: one number, or one per entry (not 0)
    scale: Annotated[float | list[float], Check(zero_factor)],
    in_keys: Keys = ("observation",),  # type: ignore[assignment]  # the schema makes defaults lists
    out_keys: Keys | None = None,
    #: (x - loc) / scale instead of x * scale + loc
    standard_normal: bool = False,
    #: added to scale where standard_normal divides by it (unset: TorchRL's)
    eps: Positive | None = None,
):
    """TorchRL's ObservationNorm with fixed statistics (running ones: VecNorm)."""
    import torch

    return torchrl_transform("ObservationNorm", loc=torch.as_tensor(loc, dtype=torch.float32),
                             scale=torch.as_tensor(scale, dtype=torch.float32), in_keys=list(in_keys),
                             out_keys=out_keys, standard_normal=standard_normal, eps=eps)


def make_vec_norm(
    #: the entries to normalise (observations and/or the reward)
    in_keys: Keys = ("observation",),  # type: ignore[assignment]  # the schema makes defaults lists
    out_keys: Keys | None = None,
    #: the statistics' memory: 1 weighs every sample alike, lower values favour recent ones
    decay: Annotated[float, Range(gt=0.0, le=1.0)] = 0.9999,
    #: the smallest standard deviation it divides by
    eps: Positive = 1e-4,
    #: one set of statistics over the env's copies (false: per copy, which an eval env with another number
    #: of copies cannot take)
    reduce_batch_dims: bool = True,
):
    """TorchRL's VecNorm (its new API, VecNormV2): normalisation by running statistics.

    The statistics are saved in checkpoints, and frozen and copied into the evaluation env."""
    return torchrl_transform("VecNorm", in_keys=list(in_keys), out_keys=out_keys, decay=decay, eps=eps,
                             reduce_batch_dims=reduce_batch_dims, new_api=True)


def make_cat_frames(
    #: how many frames
    N: Annotated[int, Range(ge=1)],
    #: the axis they are concatenated along (negative: counted from the end)
    dim: Annotated[int, Range(lt=0)] = -1,
    in_keys: Keys = ("observation",),  # type: ignore[assignment]  # the schema makes defaults lists
    out_keys: Keys | None = None,
    #: what precedes an episode's first frame: copies of it ('same') or padding_value ('constant')
    padding: Literal["same", "constant"] = "same",
    padding_value: float = 0.0,
):
    """TorchRL's CatFrames: the last N observations, concatenated (oldest first)."""
    return torchrl_transform("CatFrames", N=N, dim=dim, in_keys=list(in_keys), out_keys=out_keys, padding=padding,
                             padding_value=padding_value)


def make_to_tensor_image(
    #: scale from [0, 255] to [0, 1] (unset: when the input is an integer type)
    from_int: bool | None = None,
    #: add a leading axis
    unsqueeze: bool = False,
    dtype: Literal["float32", "float64", "float16", "bfloat16"] | None = None,
    #: the images (unset: pixels)
    in_keys: Keys | None = None,
    out_keys: Keys | None = None,
    #: accept inputs that are not [..., H, W, C] images
    shape_tolerant: bool = False,
):
    """TorchRL's ToTensorImage: HWC images to CHW float tensors."""
    import torch

    return torchrl_transform("ToTensorImage", from_int=from_int, unsqueeze=unsqueeze,
                             dtype=getattr(torch, dtype) if dtype else None, in_keys=in_keys, out_keys=out_keys,
                             shape_tolerant=shape_tolerant)


def make_resize(
    #: the width
    w: Annotated[int, Range(ge=1)],
    #: the height (unset: w)
    h: Annotated[int, Range(ge=1)] | None = None,
    interpolation: Literal["bilinear", "bicubic", "nearest", "nearest-exact"] = "bilinear",
    in_keys: Keys | None = None,
    out_keys: Keys | None = None,
):
    """TorchRL's Resize: images resized to h x w."""
    return torchrl_transform("Resize", w=w, h=h, interpolation=interpolation, in_keys=in_keys, out_keys=out_keys)


def make_gray_scale(in_keys: Keys | None = None, out_keys: Keys | None = None):
    """TorchRL's GrayScale: CHW colour images to one channel."""
    return torchrl_transform("GrayScale", in_keys=in_keys, out_keys=out_keys)


def make_cat_tensors(
    #: the entries to concatenate (unset: every observation entry)
    in_keys: Keys | None = None,
    #: the entry they become
    out_key: Key = "observation_vector",
    dim: int = -1,
    #: remove the entries concatenated
    del_keys: bool = True,
    #: add the axis dim where an entry lacks it
    unsqueeze_if_oor: bool = False,
    #: concatenate in sorted key order
    sort: bool = True,
):
    """TorchRL's CatTensors: several entries concatenated into one."""
    return torchrl_transform("CatTensors", in_keys=in_keys, out_key=out_key, dim=dim, del_keys=del_keys,
                             unsqueeze_if_oor=unsqueeze_if_oor, sort=sort)


def make_double_to_float(
    #: the entries (unset: every float64 entry)
    in_keys: Keys | None = None,
    out_keys: Keys | None = None,
    #: entries written by the policy (actions) to turn back into float64
    in_keys_inv: Keys | None = None,
    out_keys_inv: Keys | None = None,
):
    """TorchRL's DoubleToFloat: float64 entries to float32."""
    return torchrl_transform("DoubleToFloat", in_keys=in_keys, out_keys=out_keys, in_keys_inv=in_keys_inv,
                             out_keys_inv=out_keys_inv)


def make_rename(
    #: the entries to rename
    in_keys: Keys,
    #: their new names, one each
    out_keys: Keys,
    in_keys_inv: Keys | None = None,
    out_keys_inv: Keys | None = None,
    #: keep the old entries too
    create_copy: bool = False,
):
    """TorchRL's RenameTransform: entries under other names."""
    return torchrl_transform("RenameTransform", in_keys=in_keys, out_keys=out_keys, in_keys_inv=in_keys_inv,
                             out_keys_inv=out_keys_inv, create_copy=create_copy)


def make_clip(
    #: the entries to clip (observations, or the reward)
    in_keys: Keys | None = None,
    out_keys: Keys | None = None,
    in_keys_inv: Keys | None = None,
    out_keys_inv: Keys | None = None,
    #: the lower bound (unset: none)
    low: float | None = None,
    #: the upper bound (unset: none)
    high: float | None = None,
):
    """TorchRL's ClipTransform: entries clipped to [low, high]."""
    return torchrl_transform("ClipTransform", in_keys=in_keys, out_keys=out_keys, in_keys_inv=in_keys_inv,
                             out_keys_inv=out_keys_inv, low=low, high=high)


def make_noop_reset(
    #: the most random actions taken after each reset
    noops: Annotated[int, Range(ge=0)] = 30,
    #: a random number of them, up to noops (false: always noops)
    random: bool = True,
):
    """TorchRL's NoopResetEnv: random actions after each reset, for varied start states."""
    return torchrl_transform("NoopResetEnv", noops=noops, random=random)


def make_frame_skip(
    #: how many env steps each action is repeated for (their rewards summed)
    frame_skip: Annotated[int, Range(ge=1)] = 1,
):
    """TorchRL's FrameSkipTransform: each action repeated, the rewards summed."""
    return torchrl_transform("FrameSkipTransform", frame_skip=frame_skip)


def make_time_max_pool(
    in_keys: Keys | None = None,
    out_keys: Keys | None = None,
    #: over how many steps the maximum is taken
    T: Annotated[int, Range(ge=1)] = 1,
    reset_key: Key | None = None,
):
    """TorchRL's TimeMaxPool: each entry's maximum over the last T steps."""
    return torchrl_transform("TimeMaxPool", in_keys=in_keys, out_keys=out_keys, T=T, reset_key=reset_key)


@hookimpl
def rlplug_register_transforms(register):
    register("StepCounter", make_step_counter)
    register("RewardScaling", make_reward_scaling)
    register("RewardSum", make_reward_sum)
    register("ObservationNorm", make_observation_norm)
    register("VecNorm", make_vec_norm, aliases=("VecNormV2",))
    register("CatFrames", make_cat_frames)
    register("ToTensorImage", make_to_tensor_image)
    register("Resize", make_resize)
    register("GrayScale", make_gray_scale)
    register("CatTensors", make_cat_tensors)
    register("DoubleToFloat", make_double_to_float)
    register("RenameTransform", make_rename)
    register("ClipTransform", make_clip)
    register("NoopResetEnv", make_noop_reset)
    register("FrameSkipTransform", make_frame_skip)
    register("TimeMaxPool", make_time_max_pool)
