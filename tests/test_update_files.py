"""PPO's update reads in a few files: one PPO update of the canonical recipe runs functions of at most five rlplug
files (the family's shared update, PPO's module with its loss, the estimator, the training helpers, and the actor's
view that the collection acts through too, so that a categorical head's logits, masked where the env masks actions,
are computed in one place for acting and learning), so the spread over many modules cannot come back unseen. An
algorithm's rlplug loss takes its settings from the algorithm's own declared fields, so it serves only the
algorithm that has them.

``python tests/test_update_files.py`` prints the files and the functions of each that one update runs.
"""

from __future__ import annotations

import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import pytest
import torch
from conftest import CANONICAL, one_line_error, run_cli

import rlplug

PACKAGE = Path(rlplug.__file__).resolve().parent
MAX_FILES = 5


def functions_of_one_update(out: Path) -> dict[str, set[str]]:
    """The rlplug functions that run during the second ``algorithm.update(batch)`` of a short canonical run (the
    first may build what is kept), by file relative to the repository."""
    agent = rlplug.Agent.from_recipe(CANONICAL, out=out, run={"total_frames": 768}, eval={"every_frames": 0},
                                     loggers=[])
    algorithm = agent.run.algorithm
    update = algorithm.update
    ran: dict[str, set[str]] = defaultdict(set)
    updates = 0

    def record(frame, event, arg):
        if event == "call" and frame.f_code.co_filename.startswith(str(PACKAGE)):
            file = Path(frame.f_code.co_filename).relative_to(PACKAGE.parent).as_posix()
            ran[file].add(frame.f_code.co_qualname)

    def profiled_update(batch):
        nonlocal updates
        updates += 1
        if updates != 2:
            return update(batch)
        sys.setprofile(record)
        try:
            return update(batch)
        finally:
            sys.setprofile(None)

    algorithm.update = profiled_update
    assert agent.train()["status"] == "finished" and updates >= 2
    return dict(ran)


@pytest.mark.slow
def test_a_ppo_update_runs_in_at_most_five_rlplug_files(tmp_path):
    ran = functions_of_one_update(tmp_path / "run")
    assert "rlplug/plugins/algorithms/ppo/algorithm.py" in ran, "the profile saw PPO's own module"
    # the run's own watch, asked between gradient steps whether an `rlplug set` request waits (run/changes.py's
    # RequestWatch through core.training.end_updates_when), is the run's, not the update's to read: the update
    # cannot call the run layer otherwise (test_layout forbids the import); the watch looks in the run directory
    # (``waiting``) only once LOOK_EVERY seconds have passed, so whether this update looks depends on the host's speed
    assert set(ran.get("rlplug/run/changes.py", set())) <= {"RequestWatch.__call__", "waiting"}
    update_files = {file for file in ran if not file.startswith("rlplug/run/")}
    assert len(update_files) <= MAX_FILES, f"one PPO update runs {len(update_files)} rlplug files: {sorted(ran)}"


@pytest.mark.slow
@pytest.mark.parametrize("algorithm, loss", [("a2c", "ppo-loss"), ("ppo", "ppo-kl-loss")])
def test_an_rlplug_loss_without_its_algorithms_settings_is_one_line_before_anything_is_built(tmp_path, algorithm,
                                                                                             loss):
    recipe, out = tmp_path / "recipe.toml", tmp_path / "run"
    recipe.write_text(f'[env]\nuse = "gym"\nid = "CartPole-v1"\n\n[algorithm]\nuse = "{algorithm}"\n'
                      f'loss = {{use = "{loss}"}}\n')
    one_line_error(run_cli("run", str(recipe), "--out", str(out), timeout=120),
                   "algorithm.loss", f"'{loss}' is for", f"not {algorithm}", "losses for")
    assert not out.exists()


@pytest.mark.parametrize("loss, kept", [("ppo-loss", "clip_epsilon"), ("ppo-kl-loss", "beta"),
                                        ("policy-gradient-loss", None), ("surrogate-loss", None)])
def test_a_loss_state_written_when_one_class_held_every_objective_still_loads(loss, kept):
    """Checkpoints of runs from before each algorithm had its loss class hold both buffers (clip_epsilon and beta);
    each loss takes its own and leaves the other."""
    from types import SimpleNamespace

    env = rlplug.make("env", "gym", id="CartPole-v1")
    specs = {"observation_spec": env.observation_spec, "action_spec": env.action_spec}
    networks = {"policy": rlplug.make("network", "mlp", role="policy", hidden=[8], **specs),
                "critic": rlplug.make("network", "mlp", role="value", hidden=[8], **specs)}
    settings = SimpleNamespace(clip_epsilon=0.2, entropy_coef=0.0, value_coef=0.5, value_clip=None,
                               normalize_advantages=True, kl_target=0.01, kl_penalty=1.0)
    built = rlplug.make("loss", loss, networks=networks, settings=settings)
    former = {**built.state_dict(), "clip_epsilon": torch.tensor(0.125), "beta": torch.tensor(4.0)}
    built.load_state_dict(former)
    if kept is not None:
        assert getattr(built, kept).item() == former[kept].item()
    assert set(built.state_dict()) == set(rlplug.make("loss", loss, networks=networks, settings=settings).state_dict())


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as directory:
        files = functions_of_one_update(Path(directory) / "run")
    for name, functions in sorted(files.items()):
        print(f"{name}: {', '.join(sorted(functions))}")
    print(f"{len(files)} rlplug files")
