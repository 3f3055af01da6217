"""'Did you mean' hints, shared by every lookup that can be misspelled."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest candidate, or an empty string when none is close."""
    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def a(noun: str) -> str:
    """The noun with its indefinite article: 'an algorithm', 'a network'."""
    return f"{'an' if noun[:1] in 'aeiou' else 'a'} {noun}"
