"""``torch-classic``: gymnasium's classic-control envs written in torch, every copy stepped as one tensor.

Each class follows its gymnasium namesake's dynamics (constants, integration, bounds, rewards, terminations,
start states, and the float64 or float32 arithmetic it keeps its state in), so its steps equal gymnasium's to
float precision (tests/test_torch_classic.py); its specs are those rlplug's ``gym`` env gives for the same id.
The copies live in one ``[num_envs, ...]`` float64 state on the env's device: nothing goes through numpy or
the host, so envs, policy and update can all stay on a GPU. On the CPU it also offers rlplug's array road
(``reset_arrays``, ``step_arrays``: numpy views of the same tensors, no TensorDict per step).

Episodes end as gymnasium's vector envs end them: ``terminated`` by the dynamics, ``truncated`` after
``max_episode_steps`` (its ``TimeLimit``, the id's own limit by default); TorchRL's ``step_and_maybe_reset``
then restarts only the copies that ended (``_reset`` with its ``_reset`` mask)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.data import Bounded, Categorical, Composite, OneHot, Unbounded
from torchrl.envs import EnvBase

F64 = torch.float64


class BatchedEnv(EnvBase):
    """``num_envs`` copies of one env as a batched TorchRL env: what every ``torch-classic`` env shares.

    It keeps the copies' seeded random stream (:attr:`generator`), their steps into the episode
    (:attr:`elapsed`) and time limit, restarts the copies that ended, and offers TorchRL's road and rlplug's
    array road. A subclass keeps its copies in :attr:`state` (a tensor or a TensorDict, the copies first:
    setting it sets them), sets its observation spec and gives :meth:`start`, :meth:`observe` and
    :meth:`advance`."""

    #: the gymnasium id it follows, and that id's time limit (None: it has none)
    env_id: str
    max_steps: int | None
    #: discrete actions: how many; continuous (one float): None, with its bounds
    actions: int | None = None
    action_bounds: tuple[float, float] = (-1.0, 1.0)
    state: torch.Tensor | TensorDictBase

    def __init__(self, num_envs: int = 1, max_episode_steps: int | None = None, device: str | None = "cpu"):
        super().__init__(device=device, batch_size=[num_envs])
        self.max_episode_steps = max_episode_steps or self.max_steps
        n, device = num_envs, self.device
        self.elapsed = torch.zeros(n, dtype=torch.int64, device=device)
        self.generator = torch.Generator(device=device)
        # unseeded, the copies start from torch's global random stream (torch.manual_seed makes them repeat)
        self.generator.manual_seed(int(torch.randint(2**62, ())))
        if self.actions is not None:
            self.action_spec = OneHot(self.actions, shape=(n, self.actions), dtype=torch.int64, device=device)
        else:
            self.action_spec = Bounded(*self.action_bounds, shape=(n, 1), dtype=torch.float32, device=device)
        self.reward_spec = Unbounded(shape=(n, 1), dtype=torch.float32, device=device)
        flag = Categorical(2, shape=(n, 1), dtype=torch.bool, device=device)
        self.done_spec = Composite(done=flag, terminated=flag.clone(), truncated=flag.clone(), shape=(n,),
                                   device=device)

    # -- what a subclass gives ------------------------------------------------------------------------

    def start(self, count: int) -> torch.Tensor | TensorDictBase:
        """``count`` start states, drawn from :attr:`generator`."""
        raise NotImplementedError

    def observe(self, state) -> torch.Tensor:
        """The observations of states, in the dtype of the observation spec."""
        raise NotImplementedError

    def advance(self, state, action: torch.Tensor) -> tuple:
        """One step of every copy: ``(next state, reward, terminated)``, all ``[num_envs, ...]``;
        ``action`` is an index per copy (discrete) or the float32 action ``[num_envs, 1]``."""
        raise NotImplementedError

    # -- TorchRL's EnvBase --------------------------------------------------------------------------------

    def _set_seed(self, seed: int | None) -> None:
        self.generator.manual_seed(int(torch.randint(2**62, ())) if seed is None else seed)

    def restart(self, ended: torch.Tensor | None = None) -> torch.Tensor:
        """New episodes for the copies ``ended`` marks (``[num_envs]`` bool; None: all); every copy's
        observation. Start states are drawn for all copies either way, so both roads use the stream alike."""
        fresh = self.start(self.batch_size[0])
        if ended is None:
            self.state, self.elapsed = fresh, torch.zeros_like(self.elapsed)
        else:
            self.state = where_copies(ended, fresh, self.state)
            self.elapsed = torch.where(ended, 0, self.elapsed)
        return self.observe(self.state)

    def transition(self, action: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """One step of every copy: ``(observation, reward (float32), terminated, truncated)``, ``[num_envs]``
        but the observation; an episode over ``max_episode_steps`` is truncated, as gymnasium's ``TimeLimit``
        does, whether or not it also terminated."""
        self.state, reward, terminated = self.advance(self.state, action)
        self.elapsed = self.elapsed + 1
        truncated = (self.elapsed >= self.max_episode_steps if self.max_episode_steps is not None
                     else torch.zeros_like(terminated))
        return self.observe(self.state), reward.to(torch.float32), terminated, truncated

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs) -> TensorDictBase:
        mask = tensordict.get("_reset", None) if tensordict is not None else None
        observation = self.restart(None if mask is None else mask.reshape(-1))
        flag = torch.zeros(*self.batch_size, 1, dtype=torch.bool, device=self.device)
        return TensorDict({"observation": observation, "done": flag, "terminated": flag.clone(),
                           "truncated": flag.clone()}, batch_size=self.batch_size, device=self.device)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        action = tensordict.get("action")
        observation, reward, terminated, truncated = self.transition(
            action.argmax(-1) if self.actions is not None else action.to(torch.float32))
        terminated, truncated = terminated.unsqueeze(-1), truncated.unsqueeze(-1)
        return TensorDict({"observation": observation, "reward": reward.unsqueeze(-1), "done": terminated | truncated,
                           "terminated": terminated, "truncated": truncated},
                          batch_size=self.batch_size, device=self.device)

    # -- rlplug's array road (rlplug.registry.protocols.Env) -------------------------------------------------

    @property
    def supports_tensor_steps(self) -> bool:
        """The array road is offered on the CPU, where numpy shares the tensors' memory; on a GPU the
        TensorDict road keeps every step on the device."""
        return self.device is None or self.device.type == "cpu"

    def reset_arrays(self, seed: int | None = None) -> np.ndarray:
        if seed is not None:
            self.set_seed(seed)
        return self.restart().numpy()

    def step_arrays(self, action: np.ndarray) -> tuple[np.ndarray, ...]:
        """One step with gymnasium's actions (an index per copy, or floats); the copies that ended restart at
        once, as TorchRL's ``step_and_maybe_reset`` restarts them, from the same random stream."""
        taken = torch.from_numpy(np.asarray(action))
        if self.actions is None:
            taken = taken.to(torch.float32).reshape(-1, 1)
        next_observation, reward, terminated, truncated = self.transition(taken)
        ended = terminated | truncated
        observation = self.restart(ended) if bool(ended.any()) else next_observation
        return (next_observation.numpy(), reward.numpy(), terminated.numpy(), truncated.numpy(),
                observation.numpy())


def where_copies(chosen: torch.Tensor, these: Any, others: Any) -> Any:
    """States (tensors or TensorDicts, the copies first) taken from ``these`` for the copies ``chosen`` marks
    (``[num_envs]`` bool) and from ``others`` for the rest."""
    # one flag per copy, broadcast over a tensor's trailing dims (a TensorDict's batch is the copies alone)
    return torch.where(chosen.view(-1, *[1] * (others.ndim - 1)), these, others)


class ClassicControl(BatchedEnv):
    """``num_envs`` copies of one classic-control env: :attr:`state` is ``[num_envs, state_size]`` float64 (the
    equality tests start the copies from gymnasium's states by setting it); observations are float32 vectors
    within gymnasium's Box bounds; start states are uniform draws between the start bounds."""

    max_steps: int
    state: torch.Tensor
    state_size: int
    #: the observation's bounds, as gymnasium's Box gives them (float32)
    observation_low: tuple[float, ...]
    observation_high: tuple[float, ...]
    #: start states are drawn uniformly between these (a bound equal on both sides: that value)
    start_low: tuple[float, ...]
    start_high: tuple[float, ...]

    def __init__(self, num_envs: int = 1, max_episode_steps: int | None = None, device: str | None = "cpu"):
        super().__init__(num_envs, max_episode_steps=max_episode_steps, device=device)
        n, device = num_envs, self.device
        self.state = torch.zeros(n, self.state_size, dtype=F64, device=device)
        self.start_from = torch.tensor(self.start_low, dtype=F64, device=device)
        self.start_span = torch.tensor(self.start_high, dtype=F64, device=device) - self.start_from
        size = len(self.observation_low)
        low = torch.tensor(self.observation_low, dtype=torch.float32, device=device).expand(n, size)
        high = torch.tensor(self.observation_high, dtype=torch.float32, device=device).expand(n, size)
        self.observation_spec = Composite(
            observation=Bounded(low, high, shape=(n, size), dtype=torch.float32, device=device), shape=(n,),
            device=device)

    def start(self, count: int) -> torch.Tensor:
        """``count`` start states, float64 ``[count, state_size]``: uniform draws from :attr:`generator` between
        the start bounds, as numpy's ``uniform`` makes them (``low + (high - low) * u``)."""
        draws = torch.rand(count, self.state_size, generator=self.generator, dtype=F64, device=self.device)
        return self.start_from + self.start_span * draws


def as_float32(values: torch.Tensor) -> torch.Tensor:
    """float64 values rounded to float32 and kept as float64: where gymnasium stores or computes in float32."""
    return values.to(torch.float32).to(F64)


class CartPole(ClassicControl):
    """gymnasium's ``CartPole-v1``: Euler steps of a pole on a cart pushed left or right; +1 a step."""

    env_id, max_steps, state_size, actions = "CartPole-v1", 500, 4, 2
    THETA_LIMIT = 12 * 2 * math.pi / 360
    X_LIMIT = 2.4
    observation_high = (X_LIMIT * 2, math.inf, THETA_LIMIT * 2, math.inf)
    observation_low = tuple(-x for x in observation_high)
    GRAVITY, MASS_CART, MASS_POLE, HALF_LENGTH, FORCE, TAU = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
    TOTAL_MASS = MASS_POLE + MASS_CART
    POLE_MASS_LENGTH = MASS_POLE * HALF_LENGTH

    start_low, start_high = (-0.05,) * 4, (0.05,) * 4

    def observe(self, state):
        return state.to(torch.float32)

    def advance(self, state, action):
        x_dot, theta, theta_dot = state[:, 1], state[:, 2], state[:, 3]
        force = action.to(F64) * (2 * self.FORCE) - self.FORCE  # action 0: pushed left, 1: right
        cos, sin = torch.cos(theta), torch.sin(theta)
        temp = (force + self.POLE_MASS_LENGTH * theta_dot.square() * sin) / self.TOTAL_MASS
        theta_acc = (self.GRAVITY * sin - cos * temp) / (
            self.HALF_LENGTH * (4.0 / 3.0 - self.MASS_POLE * cos.square() / self.TOTAL_MASS))
        x_acc = temp - self.POLE_MASS_LENGTH * theta_acc * cos / self.TOTAL_MASS
        state = state + self.TAU * torch.stack((x_dot, x_acc, theta_dot, theta_acc), -1)  # gymnasium's Euler step
        terminated = (state[:, 0].abs() > self.X_LIMIT) | (state[:, 2].abs() > self.THETA_LIMIT)
        return state, torch.ones_like(x_dot), terminated


class Pendulum(ClassicControl):
    """gymnasium's ``Pendulum-v1``: swing a pendulum up with a torque in [-2, 2]; never terminates."""

    env_id, max_steps, state_size = "Pendulum-v1", 200, 2
    MAX_SPEED, MAX_TORQUE, DT, G, M, L = 8.0, 2.0, 0.05, 10.0, 1.0, 1.0
    observation_high = (1.0, 1.0, MAX_SPEED)
    observation_low = tuple(-x for x in observation_high)
    action_bounds = (-MAX_TORQUE, MAX_TORQUE)

    start_low, start_high = (-math.pi, -1.0), (math.pi, 1.0)

    def observe(self, state):
        theta, theta_dot = state.unbind(-1)
        return torch.stack((torch.cos(theta), torch.sin(theta), theta_dot), -1).to(torch.float32)

    def advance(self, state, action):
        theta, theta_dot = state.unbind(-1)
        torque = action[:, 0].clamp(-self.MAX_TORQUE, self.MAX_TORQUE)  # float32, as gymnasium's action
        upright = torch.remainder(theta + math.pi, 2 * math.pi) - math.pi
        costs = upright.square() + 0.1 * theta_dot.square() + (0.001 * torque.square()).to(F64)
        pushed = (3.0 / (self.M * self.L**2) * torque).to(F64)
        theta_dot = theta_dot + (3 * self.G / (2 * self.L) * torch.sin(theta) + pushed) * self.DT
        theta_dot = theta_dot.clamp(-self.MAX_SPEED, self.MAX_SPEED)
        theta = theta + theta_dot * self.DT
        return torch.stack((theta, theta_dot), -1), -costs, torch.zeros_like(theta, dtype=torch.bool)


class Acrobot(ClassicControl):
    """gymnasium's ``Acrobot-v1`` ("book" dynamics, no torque noise): two links, a torque of -1, 0 or +1 on
    the joint between them, one 4th-order Runge-Kutta step of 0.2 s; -1 a step until the tip is a link's
    length above the base."""

    env_id, max_steps, state_size, actions = "Acrobot-v1", 500, 4, 3
    DT = 0.2
    LENGTH_1, MASS_1, MASS_2, COM_1, COM_2, MOI, G = 1.0, 1.0, 1.0, 0.5, 0.5, 1.0, 9.8
    MAX_VEL_1, MAX_VEL_2 = 4 * math.pi, 9 * math.pi
    observation_high = (1.0, 1.0, 1.0, 1.0, MAX_VEL_1, MAX_VEL_2)
    observation_low = tuple(-x for x in observation_high)

    start_low, start_high = (-0.1,) * 4, (0.1,) * 4

    def start(self, count):
        return as_float32(super().start(count))  # gymnasium keeps the draw in float32

    def observe(self, state):
        theta_1, theta_2, dtheta_1, dtheta_2 = state.unbind(-1)
        return torch.stack((torch.cos(theta_1), torch.sin(theta_1), torch.cos(theta_2), torch.sin(theta_2),
                            dtheta_1, dtheta_2), -1).to(torch.float32)

    def derivatives(self, state: torch.Tensor, torque: torch.Tensor) -> torch.Tensor:
        m1, m2, l1, lc1, lc2, i1, i2, g = (self.MASS_1, self.MASS_2, self.LENGTH_1, self.COM_1, self.COM_2,
                                           self.MOI, self.MOI, self.G)
        theta_1, theta_2, dtheta_1, dtheta_2 = state.unbind(-1)
        d1 = m1 * lc1**2 + m2 * (l1**2 + lc2**2 + 2 * l1 * lc2 * torch.cos(theta_2)) + i1 + i2
        d2 = m2 * (lc2**2 + l1 * lc2 * torch.cos(theta_2)) + i2
        phi2 = m2 * lc2 * g * torch.cos(theta_1 + theta_2 - math.pi / 2.0)
        phi1 = (-m2 * l1 * lc2 * dtheta_2**2 * torch.sin(theta_2)
                - 2 * m2 * l1 * lc2 * dtheta_2 * dtheta_1 * torch.sin(theta_2)
                + (m1 * lc1 + m2 * l1) * g * torch.cos(theta_1 - math.pi / 2) + phi2)
        ddtheta_2 = ((torque + d2 / d1 * phi1 - m2 * l1 * lc2 * dtheta_1**2 * torch.sin(theta_2) - phi2)
                     / (m2 * lc2**2 + i2 - d2**2 / d1))
        ddtheta_1 = -(d2 * ddtheta_2 + phi1) / d1
        return torch.stack((dtheta_1, dtheta_2, ddtheta_1, ddtheta_2), -1)

    def advance(self, state, action):
        torque = action.to(F64) - 1  # indices 0, 1, 2: torques -1, 0, +1
        half = self.DT / 2.0
        k1 = self.derivatives(state, torque)
        k2 = self.derivatives(state + half * k1, torque)
        k3 = self.derivatives(state + half * k2, torque)
        k4 = self.derivatives(state + self.DT * k3, torque)
        theta_1, theta_2, dtheta_1, dtheta_2 = (state + self.DT / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)).unbind(-1)
        theta_1, theta_2 = wrap_angle(theta_1), wrap_angle(theta_2)
        dtheta_1 = dtheta_1.clamp(-self.MAX_VEL_1, self.MAX_VEL_1)
        dtheta_2 = dtheta_2.clamp(-self.MAX_VEL_2, self.MAX_VEL_2)
        terminated = -torch.cos(theta_1) - torch.cos(theta_2 + theta_1) > 1.0
        reward = torch.where(terminated, 0.0, -1.0).to(F64)
        return torch.stack((theta_1, theta_2, dtheta_1, dtheta_2), -1), reward, terminated


def wrap_angle(angle: torch.Tensor) -> torch.Tensor:
    """An angle brought into [-pi, pi] by whole turns, as gymnasium's ``wrap`` does one turn at a time (one
    turn, the usual case, gives its very numbers)."""
    turn = 2 * math.pi
    above = torch.ceil((angle - math.pi) / turn).clamp(min=0)
    below = torch.ceil((-math.pi - angle) / turn).clamp(min=0)
    return angle - above * turn + below * turn


class MountainCarContinuous(ClassicControl):
    """gymnasium's ``MountainCarContinuous-v0``: a car in a valley pushed by a force in [-1, 1]; 100 for
    reaching the flag, less 0.1 times the squared action (the action as given, unclipped) every step.

    gymnasium steps numpy scalars: its start state is float64 and every later one float32, and NumPy 2 computes
    a float32 scalar with a Python float in float32 (comparisons too), while a clipped action becomes a Python
    float. Each step here keeps to those precisions (float64 at an episode's first step, float32 after), or
    the rounding differences add up over long episodes."""

    env_id, max_steps, state_size = "MountainCarContinuous-v0", 999, 2
    MIN_POSITION, MAX_POSITION, MAX_SPEED, GOAL_POSITION, GOAL_VELOCITY, POWER = -1.2, 0.6, 0.07, 0.45, 0.0, 0.0015
    observation_low = (MIN_POSITION, -MAX_SPEED)
    observation_high = (MAX_POSITION, MAX_SPEED)

    start_low, start_high = (-0.6, 0.0), (-0.4, 0.0)  # at rest

    def observe(self, state):
        return state.to(torch.float32)

    def advance(self, state, action):
        pushed = action[:, 0]  # float32, as gymnasium's action
        position, velocity = state.unbind(-1)
        first = self.elapsed == 0  # the state is still the float64 start state
        position, velocity, terminated = (
            torch.where(first, *pair) for pair in zip(self.move(position, velocity, pushed),
                                                      self.move(position.to(torch.float32),
                                                                velocity.to(torch.float32), pushed)))
        reward = torch.where(terminated, 100.0, 0.0).to(F64) - pushed.to(F64).square() * 0.1
        return torch.stack((position, velocity), -1).to(torch.float32).to(F64), reward, terminated

    def move(self, position: torch.Tensor, velocity: torch.Tensor,
             pushed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """gymnasium's step in the precision of ``position`` and ``velocity`` (float64 or float32): the next
        position and velocity (as float64) and whether the car reached the flag."""
        dtype = position.dtype
        def bound(value: float) -> torch.Tensor:  # a Python float as numpy meets it beside a scalar of dtype
            return torch.tensor(value, dtype=dtype, device=position.device)
        slope = 0.0025 * torch.cos((3 * position).to(F64))  # math.cos of the scalar: a Python float
        clipped = pushed.abs() > 1.0  # min(max(action, -1.0), 1.0) gives a Python float: float64 arithmetic
        force = pushed.clamp(-1.0, 1.0)
        kept = force * torch.tensor(self.POWER, dtype=torch.float32) - slope.to(torch.float32)  # float32 arithmetic
        velocity = velocity + torch.where(clipped, force.to(F64) * self.POWER - slope, kept.to(F64)).to(dtype)
        velocity = velocity.clamp(bound(-self.MAX_SPEED), bound(self.MAX_SPEED))
        position = (position + velocity).clamp(bound(self.MIN_POSITION), bound(self.MAX_POSITION))
        velocity = torch.where((position == bound(self.MIN_POSITION)) & (velocity < 0), 0.0, velocity)
        terminated = (position >= bound(self.GOAL_POSITION)) & (velocity >= bound(self.GOAL_VELOCITY))
        return position.to(F64), velocity.to(F64), terminated


#: the envs by gymnasium id (the registration's list, rlplug.plugins.envs.TORCH_CLASSIC_IDS, names the same)
CLASSES: dict[str, type[ClassicControl]] = {cls.env_id: cls for cls in (CartPole, Pendulum, Acrobot,
                                                                         MountainCarContinuous)}


def make_classic(env_id: str, *, num_envs: int, max_episode_steps: int | None, device: str) -> ClassicControl:
    """``num_envs`` copies of the classic-control env ``env_id`` (validated: one of :data:`CLASSES`)."""
    return CLASSES[env_id](num_envs, max_episode_steps=max_episode_steps, device=device)
