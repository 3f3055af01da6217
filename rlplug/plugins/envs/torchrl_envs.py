"""TorchRL's own envs as rlplug envs: ``torchrl-pendulum`` (``PendulumEnv``) and ``dm_control``
(``DMControlEnv``). Both step through TensorDicts (no array road) and declare several observation entries,
which :func:`rlplug.core.observations.one_observation` concatenates into the ``observation`` networks read."""

from __future__ import annotations

import importlib.util
import os
import signal
import sys
import warnings
from collections.abc import Callable, Sequence

from torchrl.envs import (
    Compose,
    DoubleToFloat,
    EnvBase,
    ParallelEnv,
    PendulumEnv,
    SerialEnv,
    StepCounter,
    ToTensorImage,
    TransformedEnv,
)

from rlplug.envs import one_observation
from rlplug.errors import UserError, did_you_mean


class BatchedPendulum(PendulumEnv):
    """TorchRL's ``PendulumEnv`` with ``num_envs`` pendulums stepped as one batch.

    ``PendulumEnv`` is not batch-locked: it steps whatever batch it is handed, but its specs describe one
    pendulum and its ``batch_size`` cannot be set afterwards; a collector needs specs with the batch in
    front, so they are made here from one pendulum's, expanded."""

    def __init__(self, num_envs: int, seed: int = 0, device: str | None = None):
        EnvBase.__init__(self, device=device, batch_size=[num_envs])
        self._make_spec(self.gen_params(device=self.device))
        self.set_seed(seed)

    def _make_spec(self, td_params) -> None:
        one = PendulumEnv(td_params, seed=0, device=self.device)
        batch = tuple(self.batch_size)
        self.observation_spec = one.observation_spec.expand(batch)
        self.state_spec = one.state_spec.expand(batch)
        self.action_spec = one.action_spec.expand(*batch, *one.action_spec.shape)
        self.reward_spec = one.reward_spec.expand(*batch, *one.reward_spec.shape)


def make_pendulum(num_envs: int, max_episode_steps: int, in_keys: Sequence[str] | None, device: str) -> EnvBase:
    """Batched pendulums, truncated after ``max_episode_steps`` (``PendulumEnv`` never ends by itself)."""
    env = TransformedEnv(BatchedPendulum(num_envs, device=device), StepCounter(max_steps=max_episode_steps))
    return one_observation(env, in_keys)


def import_suite(from_pixels: bool):
    """``dm_control.suite``, or a :class:`UserError` saying how to install it. Without a display, pixels are
    rendered through EGL unless ``MUJOCO_GL`` says otherwise (dm_control would try a window first); state
    alone leaves the renderer to dm_control. Its warnings about a missing display are dropped."""
    if importlib.util.find_spec("dm_control") is None:
        raise UserError('the dm_control env needs the dm-control package: pip install "rlplug[dm-control]"',
                        path="env")
    if from_pixels and "dm_control" not in sys.modules and not os.environ.get("DISPLAY"):
        os.environ.setdefault("MUJOCO_GL", "egl")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from dm_control import suite
    except Exception as error:  # a MuJoCo that does not load here, a renderer that fails to start
        detail = " ".join(str(error).split())
        raise UserError(f"dm_control does not start here: {type(error).__name__}: {detail} (MuJoCo's renderer is "
                        f"chosen by MUJOCO_GL: egl, osmesa, or disable for state alone)", path="env") from None
    try:
        from absl import logging as absl_logging

        absl_logging.set_verbosity(absl_logging.ERROR)  # deprecation notes of the suite's models, every build
    except ImportError:
        pass
    return suite


def check_task(suite, domain: str, task: str) -> None:
    tasks = {f"{d}-{t}": (d, t) for d, t in suite.ALL_TASKS}
    if (domain, task) in tasks.values():
        return
    domains = sorted({d for d, _ in tasks.values()})
    if domain not in domains:
        raise UserError(f"no dm_control domain '{domain}'{did_you_mean(domain, domains)}", path="env.domain")
    names = sorted(t for d, t in tasks.values() if d == domain)
    raise UserError(f"dm_control's {domain} has no task '{task}'{did_you_mean(task, names)}; its tasks: "
                    f"{', '.join(names)}", path="env.task")


def deaf_to_interrupts(make: Callable[[], EnvBase]) -> Callable[[], EnvBase]:
    """``make`` that, called in a worker process, first makes the worker ignore SIGINT: a terminal's Ctrl-C
    reaches the whole process group, and the run, which stops at the end of its iteration, closes its workers
    itself (as the gym env's ``async`` workers do)."""
    builder = os.getpid()

    def made() -> EnvBase:
        if os.getpid() != builder:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        return make()

    return made


def make_dm_control(domain: str, task: str, *, num_envs: int, vectorization: str = "sync", from_pixels: bool,
                    pixels_size: int, frame_skip: int, in_keys: Sequence[str] | None, device: str) -> EnvBase:
    """``num_envs`` copies of a DeepMind Control task, stepped one after the other in this process
    (``vectorization = "sync"``) or each in a worker process (``"async"``, TorchRL's ``ParallelEnv``), with
    float32 observations, actions and rewards (dm_control's are float64). ``from_pixels``: the camera's
    image only, as a float ``[3, pixels_size, pixels_size]`` entry ``pixels``."""
    suite = import_suite(from_pixels)
    check_task(suite, domain, task)
    from torchrl.envs import DMControlEnv, DMControlWrapper

    def one() -> EnvBase:
        suite = import_suite(from_pixels)  # again in a worker process: its renderer and quieted warnings
        if not from_pixels:
            return DMControlEnv(domain, task, frame_skip=frame_skip, device=device)
        # DMControlEnv renders at dm_control's default size; the camera is asked for pixels_size here instead
        # (a resize transform would need torchvision).
        from dm_control.suite.wrappers import pixels

        camera = {"height": pixels_size, "width": pixels_size, "camera_id": 0}
        return DMControlWrapper(pixels.Wrapper(suite.load(domain, task), pixels_only=True, render_kwargs=camera),
                                frame_skip=frame_skip, device=device)

    try:
        if vectorization == "async":
            env = ParallelEnv(num_envs, deaf_to_interrupts(one))
        else:
            env = SerialEnv(num_envs, one)  # batch [num_envs], as every rlplug env, one copy included
        transforms = [DoubleToFloat()]
        if from_pixels:
            transforms.append(ToTensorImage(in_keys=["pixels"]))
        env = TransformedEnv(env, Compose(*transforms))
    except UserError:
        raise
    except Exception as error:  # MuJoCo's renderer failing to start for from_pixels, mostly
        detail = " ".join(str(error).split())
        raise UserError(f"dm_control {domain}-{task} could not be built: {type(error).__name__}: {detail}"
                        + ("; rendering needs an OpenGL backend (MUJOCO_GL=egl or osmesa)" if from_pixels else ""),
                        path="env") from None
    return one_observation(env, in_keys)

