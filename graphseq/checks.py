"""Parameter domains: the values a stage's keyword parameters may take.

A stage declares them where it is registered, and the runner checks every
section of a pipeline (after ``--set``) against them before anything is
written::

    from graphseq.checks import at_least, one_of, positive, probability

    @stage("train_nodes", checks={"lr": positive, "dropout": probability,
                                   "max_epochs": at_least(1), "stop_on": one_of("gat", "loss")})
    def train_nodes(ctx, *, lr=0.005, dropout=0.6, max_epochs=100_000, stop_on="gat"): ...

A domain is a test and the words that say what it allows, so that a refusal
reads ``train.lr = -1.0 is not allowed: it must be a number > 0``. The type
of a value (int, float, str, list) is checked separately, from the default.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any, Callable, Tuple, Union


@dataclass(frozen=True)
class Domain:
    """The values a parameter may take: ``test(value)`` and, for messages, ``allowed``."""

    allowed: str
    test: Callable[[Any], bool]

    def __call__(self, value: Any) -> bool:
        return self.test(value)


def is_whole_number(text: str) -> bool:
    """``text`` is written with the digits 0-9 only (``str.isdigit`` also
    accepts superscripts such as "²", which ``int`` refuses)."""
    return text.isascii() and text.isdigit()


def is_integer(value: Any) -> bool:
    """A whole number: a Python or NumPy integer, not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """A finite int or float (not a bool, not nan or inf)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _bound(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def at_least(low: float) -> Domain:
    return Domain(f"a number >= {_bound(low)}", lambda v: is_number(v) and v >= low)


def between(low: float, high: float) -> Domain:
    """From ``low`` to ``high``, both included."""
    return Domain(f"a number from {_bound(low)} to {_bound(high)}",
                  lambda v: is_number(v) and low <= v <= high)


def one_of(*choices: Any) -> Domain:
    return Domain(f"one of {', '.join(map(str, choices))}", lambda v: v in choices)


def each(domain: Domain, distinct: bool = False) -> Domain:
    """A non-empty list whose every item is in ``domain``; with ``distinct``,
    no item twice (a list of things to do, each of which a repeat would redo)."""
    return Domain(f"a non-empty list{' of distinct items' if distinct else ''}, each item {domain.allowed}",
                  lambda v: isinstance(v, (list, tuple)) and len(v) > 0 and all(map(domain, v))
                  and (not distinct or _distinct(v)))


def _distinct(items: Any) -> bool:
    return all(item not in items[:i] for i, item in enumerate(items))  # lists are not hashable


finite = Domain("a finite number", is_number)
positive = Domain("a number > 0", lambda v: is_number(v) and v > 0)
non_negative = Domain("a number >= 0", lambda v: is_number(v) and v >= 0)
probability = between(0, 1)
fraction = Domain("a number between 0 and 1, both excluded", lambda v: is_number(v) and 0 < v < 1)
text_list = Domain("a list of strings", lambda v: isinstance(v, list) and all(isinstance(i, str) for i in v))


# When a key applies (see ``applies`` in :func:`graphseq.stages.stage`): the
# values another key must hold, ``("onlstm",)``, or a domain it must be in,
# ``positive`` or ``Domain("a list with an item other than 'gat'", ...)``.
Condition = Union[Tuple[Any, ...], Domain]


def holds(condition: Condition, value: Any) -> bool:
    """Whether ``value`` meets ``condition``: one of its values, or in its domain."""
    return condition(value) if isinstance(condition, Domain) else value in condition


def refusal(key: str, value: Any, domain: Domain) -> str:
    """The one-line message for ``key = value`` outside ``domain``."""
    return f"{key} = {value!r} is not allowed: it must be {domain.allowed}"
