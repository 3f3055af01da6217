"""Built-in callbacks: ``stop-at-return`` (end the run once an evaluation reaches a return) and ``keep-best``
(keep the best evaluated weights as ``best.pt``, which ``rlplug eval --best`` and ``rlplug export --best`` read),
rl-baselines3-zoo's ``StopTrainingOnRewardThreshold`` and ``--load-best``. Implemented in
:mod:`rlplug.plugins.callbacks.builtin`."""

from __future__ import annotations

from pathlib import Path

from rlplug.registry.hookspecs import hookimpl

#: the file keep-best writes in the run directory, and the one beside it saying which evaluation it holds
BEST_CHECKPOINT = "best.pt"
BEST_NOTE = "best.json"


def make_stop_at_return(threshold: float):
    """Stop the run (with a checkpoint) once an evaluation's mean return reaches the threshold."""
    from rlplug.plugins.callbacks.builtin import StopAtReturn

    return StopAtReturn(threshold)


def make_keep_best(run_dir: Path):
    """Keep the weights of the best evaluation so far (highest mean return) as best.pt in the run directory."""
    from rlplug.plugins.callbacks.builtin import KeepBest

    return KeepBest(run_dir / BEST_NOTE)


@hookimpl
def rlplug_register_callbacks(register):
    register("stop-at-return", make_stop_at_return)
    register("keep-best", make_keep_best)
