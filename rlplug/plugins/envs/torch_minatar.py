"""``torch-classic``'s MinAtar Breakout: Young and Tian's (2019) 10 x 10 Breakout written in torch, every copy
stepped as one batch of tensors on the env's device.

It follows MinAtar's own game and gym env for ``MinAtar/Breakout-v1`` (the minimal action set: no-op, left,
right): the paddle moves, then the ball moves one cell diagonally and is reflected by the side walls, the
ceiling, a brick (broken for +1, unless the ball broke one on the step before: then it enters the brick's cell)
and the paddle; the three rows of bricks come back when the ball reaches the bottom row with none left; the ball
missing the paddle ends the episode. Each episode starts with the ball in row 3 at the left or the right wall
(one random draw), and with probability ``sticky_action_prob`` a step repeats the action before it (MinAtar's
sticky actions, 0.1 as its gym env has them, kept across episodes as MinAtar keeps them). Observations are
MinAtar's ``[10, 10, 4]`` booleans (paddle, ball, trail, bricks), the spec rlplug's ``gym`` env gives for the
id; the id has no time limit (``max_episode_steps`` sets one). tests/test_torch_minatar.py steps it beside
MinAtar's env under the same actions and random draws."""

from __future__ import annotations

from collections.abc import Callable

import torch
from tensordict import TensorDict
from torchrl.data import Composite, Unbounded

from rlplug.plugins.envs.torch_classic import BatchedEnv, where_copies

SIZE = 10
#: the observation's channels, in MinAtar's order
PADDLE, BALL, TRAIL, BRICK = range(4)
#: the ball's four diagonal directions, as MinAtar numbers them: (dx, dy), y growing downwards
STEPS = ((-1, -1), (1, -1), (1, 1), (-1, 1))
#: a direction reflected by a side wall, by the ceiling or a brick (or the paddle's middle), by the paddle's edge
FLIP_X, FLIP_Y, FLIP_BOTH = (1, 0, 3, 2), (3, 2, 1, 0), (2, 3, 0, 1)
#: the paddle's move for each action of the minimal set: no-op, left, right
MOVES = (0, -1, 1)
#: the rows of bricks, refilled when all are broken
BRICK_ROWS = slice(1, 4)


class Breakout(BatchedEnv):
    """``num_envs`` copies of MinAtar's Breakout (``MinAtar/Breakout-v1``).

    :attr:`state` is a TensorDict of the copies' games (``ball_x``, ``ball_y``, ``ball_dir``, ``paddle``,
    ``last_x``, ``last_y`` (the trail), ``strike`` (a brick broken on the step before), ``over`` and
    ``bricks`` ``[10, 10]``); :attr:`last_action` is each copy's action before, for sticky actions.
    ``draw(count)`` gives ``count`` uniform numbers in [0, 1), one per copy, for the sticky-action test of
    each step (below ``sticky_action_prob``: the action before is repeated) and for each start (0.5 or above:
    the ball starts at the right wall); by default they come from the env's seeded :attr:`generator`, and
    the equality tests give MinAtar's own draws through it."""

    env_id, max_steps, actions = "MinAtar/Breakout-v1", None, 3

    def __init__(self, num_envs: int = 1, max_episode_steps: int | None = None, device: str | None = "cpu",
                 sticky_action_prob: float = 0.1, draw: Callable[[int], torch.Tensor] | None = None):
        super().__init__(num_envs, max_episode_steps=max_episode_steps, device=device)
        n, device = num_envs, self.device
        self.sticky_action_prob = sticky_action_prob
        self.draw = draw or self.uniform
        self.copies = torch.arange(n, device=device)
        self.flip_x, self.flip_y, self.flip_both = (torch.tensor(f, device=device)
                                                    for f in (FLIP_X, FLIP_Y, FLIP_BOTH))
        self.step_x, self.step_y = (torch.tensor(d, device=device) for d in zip(*STEPS, strict=True))
        self.moves = torch.tensor(MOVES, device=device)
        self.last_action = torch.zeros(n, dtype=torch.int64, device=device)
        self.state = self.lay_out(torch.zeros(n, dtype=torch.bool, device=device))  # until the first reset
        self.observation_spec = Composite(
            observation=Unbounded(shape=(n, SIZE, SIZE, 4), dtype=torch.bool, device=device), shape=(n,),
            device=device)

    def uniform(self, count: int) -> torch.Tensor:
        return torch.rand(count, generator=self.generator, device=self.device)

    def _set_seed(self, seed: int | None) -> None:
        """A seed also forgets the actions before (MinAtar's copies start at no-op), so that a run's episodes
        after a seeded reset depend on its seed alone, whatever was played before (resume)."""
        super()._set_seed(seed)
        self.last_action = torch.zeros_like(self.last_action)

    def lay_out(self, right: torch.Tensor) -> TensorDict:
        """New games: the ball in row 3 at the left wall going down-right, or (``right``) at the right wall
        going down-left; the paddle in column 4; three full rows of bricks."""
        count = right.shape[0]
        ball_x = torch.where(right, SIZE - 1, 0)
        bricks = torch.zeros(count, SIZE, SIZE, dtype=torch.bool, device=self.device)
        bricks[:, BRICK_ROWS] = True
        row = torch.full((count,), 3, dtype=torch.int64, device=self.device)
        return TensorDict({"ball_x": ball_x, "ball_y": row, "ball_dir": torch.where(right, 3, 2),
                           "paddle": torch.full_like(row, 4), "last_x": ball_x.clone(), "last_y": row.clone(),
                           "strike": torch.zeros_like(right), "over": torch.zeros_like(right), "bricks": bricks},
                          batch_size=[count], device=self.device)

    def start(self, count: int) -> TensorDict:
        return self.lay_out(self.draw(count) >= 0.5)

    def observe(self, state) -> torch.Tensor:
        observation = torch.zeros(*self.batch_size, SIZE, SIZE, 4, dtype=torch.bool, device=self.device)
        copies = self.copies
        observation[copies, SIZE - 1, state["paddle"], PADDLE] = True
        observation[copies, state["ball_y"], state["ball_x"], BALL] = True
        observation[copies, state["last_y"], state["last_x"], TRAIL] = True
        observation[..., BRICK] = state["bricks"]
        return observation

    def advance(self, state, action):
        """One step of every game, as MinAtar's ``Environment.act`` then ``Env.act`` take it, branch for branch;
        a game already over stays as it is (reward 0), as MinAtar's does."""
        stuck = self.draw(self.batch_size[0]) < self.sticky_action_prob
        action = torch.where(stuck, self.last_action, action.to(torch.int64))
        self.last_action = action
        copies, bricks, strike = self.copies, state["bricks"].clone(), state["strike"]
        paddle = (state["paddle"] + self.moves[action]).clamp(0, SIZE - 1)
        x, y, direction = state["ball_x"], state["ball_y"], state["ball_dir"]
        new_x, new_y = x + self.step_x[direction], y + self.step_y[direction]
        side = (new_x < 0) | (new_x > SIZE - 1)
        new_x = new_x.clamp(0, SIZE - 1)
        direction = torch.where(side, self.flip_x[direction], direction)
        top = new_y < 0
        new_y = new_y.clamp(min=0)
        direction = torch.where(top, self.flip_y[direction], direction)
        brick = ~top & bricks[copies, new_y.clamp(max=SIZE - 1), new_x]
        breaks = brick & ~strike
        bricks[copies, new_y.clamp(max=SIZE - 1), new_x] &= ~breaks
        new_y = torch.where(breaks, y, new_y)
        direction = torch.where(breaks, self.flip_y[direction], direction)
        bottom = ~top & ~brick & (new_y == SIZE - 1)
        bricks[:, BRICK_ROWS] |= (bottom & ~bricks.flatten(1).any(1)).view(-1, 1, 1)  # cleared: three new rows
        middle = bottom & (x == paddle)  # the ball came down onto the paddle: straight back up
        edge = bottom & ~middle & (new_x == paddle)  # it hit the paddle's corner: back the way it came
        direction = torch.where(middle, self.flip_y[direction], torch.where(edge, self.flip_both[direction],
                                                                            direction))
        new_y = torch.where(middle | edge, y, new_y)
        lost = bottom & ~middle & ~edge
        played = TensorDict({"ball_x": new_x, "ball_y": new_y, "ball_dir": direction, "paddle": paddle,
                             "last_x": x, "last_y": y, "strike": brick, "over": lost, "bricks": bricks},
                            batch_size=state.batch_size, device=self.device)
        over = state["over"]
        if bool(over.any()):  # only where a lost game is stepped without a restart (both roads restart it)
            return where_copies(over, state, played), (breaks & ~over).to(torch.float32), over | lost
        return played, breaks.to(torch.float32), lost
