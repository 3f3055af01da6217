"""What a checkpoint's first critic values across the action range, at states drawn from its replay (an offline
run's dataset): for each state the data's action, the policy's deterministic action, the action of highest value
on a grid, and the values on that grid. A diagnostic for issue 40's CQL: whether the critics' maximum is where the
data act or where the actor went. One-dimensional continuous actions (Pendulum), TorchRL losses that keep their
critics as ``qvalue_network`` with stacked ``qvalue_network_params`` (SAC's, CQL's, IQL's).

    python benchmarks/critic_grid.py runs/cql/checkpoints/frames-000000256000.pt runs/cql/checkpoint.pt
    python benchmarks/critic_grid.py CHECKPOINT --states 12 --points 41 --seed 1
"""

from __future__ import annotations

import argparse
import tempfile

import torch
from tensordict import TensorDict
from torchrl.envs.utils import ExplorationType, set_exploration_type

import rlplug


def rows(checkpoint: str, states: int, points: int, seed: int) -> list[str]:
    with tempfile.TemporaryDirectory() as out:
        algorithm = rlplug.Agent.load(checkpoint, out=out).run.algorithm
        torch.manual_seed(seed)
        sample = algorithm.replay.sample(states)
        low, high = (bound.reshape(-1)[0].item() for bound in (algorithm.action_spec.space.low,
                                                               algorithm.action_spec.space.high))
        grid = torch.linspace(low, high, points)
        with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
            policy_actions = algorithm.actor(sample.select("observation").clone())["action"]
            loss = algorithm.loss_module
            lines = []
            for i in range(states):
                at = TensorDict({"observation": sample["observation"][i].expand(points, -1),
                                 "action": grid[:, None]}, [points])
                with loss.qvalue_network_params[0].to_module(loss.qvalue_network):
                    values = loss.qvalue_network(at)["state_action_value"].squeeze(-1)
                lines.append(f"data {sample['action'][i].item():+.2f}  policy {policy_actions[i].item():+.2f}  "
                             f"argmax {grid[values.argmax()].item():+.2f}  values "
                             + " ".join(f"{v:.0f}" for v in values.tolist()))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoints", nargs="+")
    parser.add_argument("--states", type=int, default=8)
    parser.add_argument("--points", type=int, default=21, help="actions on the grid, bounds included")
    parser.add_argument("--seed", type=int, default=0, help="which replay states are drawn")
    args = parser.parse_args()
    torch.set_num_threads(1)
    for checkpoint in args.checkpoints:
        print(checkpoint)
        for line in rows(checkpoint, args.states, args.points, args.seed):
            print("  " + line)


if __name__ == "__main__":
    main()
