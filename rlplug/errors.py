"""Errors a user can cause and fix.

Every one of them reaches the command line as a single line (no traceback) and exit status 2,
so the message itself must say where the problem is and what to do about it.
"""

from __future__ import annotations

import contextlib
import difflib
import re
import warnings
from collections.abc import Iterable
from typing import Any

#: Characters a message shows escaped: C0 and C1 controls (a newline in a key, say), line and paragraph
#: separators, and the invisible format characters that reorder or hide text on a terminal (bidirectional
#: overrides such as U+202E, zero-width spaces and joiners, the byte-order mark, language tags).
CONTROL_CHARACTERS = re.compile("[\x00-\x1f\x7f-\x9f\xad\u061c\u180e\u200b-\u200f\u2028-\u202e"
                                "\u2060-\u206f\ufeff\ufff9-\ufffb\U000e0000-\U000e007f]")
#: A run of this many characters without a space (a 20 MB id, say) is shown by its ends only.
LONGEST_WORD = 200


def one_line(text: str) -> str:
    """``text`` as one line of plain characters: overlong words shortened (``abc...[19999950 more]...xyz``)
    and control and format characters shown escaped, so no input can flood, break or reorder a message."""
    text = re.sub(rf"\S{{{LONGEST_WORD + 1},}}", _shortened, text)
    return CONTROL_CHARACTERS.sub(lambda match: repr(match.group())[1:-1], text)


def _shortened(match: re.Match) -> str:
    word = match.group()
    return f"{word[:120]}...[{len(word) - 160} more characters]...{word[-40:]}"


class UserError(Exception):
    """A problem in the user's input: a recipe, an override, a component name or parameter.

    ``path`` is the dotted key path inside the recipe (``algorithm.lr``), ``file`` the recipe
    it came from and ``line`` a line number where one is known (TOML syntax errors).
    """

    def __init__(self, message: str, *, path: str = "", file: str | None = None, line: int | None = None,
                 original: BaseException | None = None):
        super().__init__(message)
        self.message = message
        self.path = path
        self.file = file
        self.line = line
        #: the exception behind this one, if any (a plugin's factory raised it): its traceback is the one
        #: ``RLPLUG_DEBUG=1`` shows
        self.original = original

    def located(self, *, file: str | None = None, prefix: str = "") -> UserError:
        """The same error seen from further out: inside ``file``, under the key path ``prefix``."""
        path = ".".join(p for p in (prefix, self.path) if p)
        return type(self)(self.message, path=path, file=file or self.file, line=self.line, original=self.original)

    def __str__(self) -> str:
        where = ""
        if self.file:
            where = f"{self.file}:{self.line}: " if self.line else f"{self.file}: "
        if self.path:
            where += f"{self.path}: "
        return one_line(where + self.message)


class ComponentError(UserError):
    """A component name that is unknown, ambiguous or of the wrong kind."""


class ParameterError(UserError):
    """A component parameter that is unknown, missing, of the wrong type or out of range."""


class RecipeError(UserError):
    """A recipe file that is missing, unreadable or not valid TOML."""


class WorkersLost(UserError):
    """Workers collecting elsewhere were lost and not replaced (a Ray node gone, ``max_restarts`` used up):
    training stops there, with a checkpoint of the last update, and goes on with ``resume`` once the
    cluster has room again."""

    #: whether the training process still holds the run's whole state, so that the stop writes a checkpoint of it
    state_whole = True


class LearnerLost(WorkersLost):
    """A learner elsewhere (``runner.learners``) was lost: the run's exact state (optimiser, replay) went with it
    and cannot be replaced, so training stops keeping the last checkpoint, and goes on with ``resume``."""

    state_whole = False


class RlplugWarning(UserWarning):
    """Something the user may mean but should know about; the command line shows it as one line."""


class PluginError(Exception):
    """A plugin that failed to import or register; recorded, not raised, unless plugins are strict."""

def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest candidate, or an empty string when none is close."""
    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def numbers(values: Any) -> str:
    """Numbers as a message shows them, three significant digits each: ``[-2, 2]``; ``values`` any iterable of
    numbers, or an array or tensor of any shape (read flattened)."""
    if hasattr(values, "reshape"):
        values = values.reshape(-1).tolist()
    return "[" + ", ".join(f"{float(v):.3g}" for v in values) + "]"


def plural(noun: str) -> str:
    """The noun's plural: 'envs', 'losses'."""
    return f"{noun}es" if noun.endswith(("s", "sh", "ch", "x")) else f"{noun}s"


def a(noun: str) -> str:
    """The noun with its indefinite article: 'an algorithm', 'a network'."""
    return f"{'an' if noun[:1] in 'aeiou' else 'a'} {noun}"


@contextlib.contextmanager
def reported(warn: bool, what: str):
    """What fails in a clean-up as a warning (``warn``: training ends because of another error, which must
    say why it ended), or else as the error."""
    try:
        yield
    except Exception as error:
        if not warn:
            raise
        where = f"{error.filename}: " if isinstance(error, OSError) and error.filename else ""
        warnings.warn(RlplugWarning(f"{what}: {where}{type(error).__name__}: {error}"), stacklevel=2)
