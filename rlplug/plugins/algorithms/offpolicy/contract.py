"""What an off-policy algorithm checks of its loss, the plugin's or its own, as early as each can be known: at build,
the learners it names and how its targets move; after the first gradient step, that its state kept its keys."""

from __future__ import annotations

from typing import Any

from rlplug.registry import protocols


def plugin_mistake(title: str, problem: str) -> protocols.ContractError:
    return protocols.ContractError(f"{title}: {problem}; this is the plugin's mistake: tell its author")


def check_loss_contract(loss: Any, title: str, algorithm: str, learner_names: tuple[str, ...]) -> None:
    """:class:`~rlplug.registry.protocols.ContractError` naming the loss ``title`` where it lacks what an
    off-policy update reads (``parameter_groups``, ``term_learners``), names a learner ``algorithm`` does not have
    (it would train with no learning rate of its own), or neither moves targets nor declares ``no_targets``."""
    for member in (protocols.Loss.parameter_groups, protocols.Loss.term_learners):
        if protocols.capability(loss, member) is None:
            raise plugin_mistake(title, f"an off-policy loss needs '{protocols.optional_name(member)}' (which "
                                        f"optimiser each of its terms trains)")
    known = ", ".join(learner_names)
    unknown = [name for name in loss.parameter_groups if name not in learner_names]
    if unknown:
        raise plugin_mistake(title, f"its parameter_groups name the learner '{unknown[0]}', which {algorithm} does "
                                    f"not have (its learners: {known})")
    stray = {term: name for term, name in loss.term_learners.items() if name not in loss.parameter_groups}
    if stray:
        term, name = next(iter(stray.items()))
        raise plugin_mistake(title, f"its term_learners send '{term}' to the learner '{name}', which its "
                                    f"parameter_groups do not have ({', '.join(loss.parameter_groups)})")
    moves = protocols.capability(loss, protocols.Loss.update_targets) is not None
    if not moves and not protocols.capability(loss, protocols.Loss.no_targets):
        raise plugin_mistake(title, "an off-policy loss defines update_targets (moving its target networks), or "
                                    "declares no_targets = True where it keeps none; with neither, its targets "
                                    "would stay as built")


def check_state_kept(loss: Any, built_keys: set[str], title: str) -> None:
    """:class:`~rlplug.registry.protocols.ContractError` where the loss's ``state_dict`` gained keys in its first
    gradient step: a checkpoint holding them would not load into a freshly built loss (resume, eval, export)."""
    appeared = sorted(set(loss.state_dict()) - built_keys)
    if appeared:
        raise plugin_mistake(title, f"its state gained '{appeared[0]}' in its first gradient step, so no checkpoint "
                                    f"of this run could be loaded again; a loss creates all its state when built")
