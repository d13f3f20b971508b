"""Parameter domains: each says what it allows, and every stage declares one
for every numeric parameter, with defaults inside it."""
import inspect
import math
import re

import pytest

from graphseq.checks import (at_least, between, each, fraction, holds, non_negative, one_of, positive,
                             probability, refusal)
from graphseq.stages import SPECS, STAGES, stage, stage_params


@pytest.mark.parametrize("domain, inside, outside", [
    (positive, [1e-9, 3], [0, -1, math.nan, math.inf, True]),
    (non_negative, [0, 2.5], [-1e-9, math.nan, -math.inf]),
    (probability, [0, 0.5, 1], [-0.1, 1.01, math.nan]),
    (fraction, [0.1, 0.9], [0, 1, math.nan]),
    (at_least(1), [1, 10**6], [0, -1, math.inf]),
    (between(0, 10), [0, 10], [-1, 11, math.nan]),
    (one_of("gat", "loss"), ["gat", "loss"], ["Gat", "", 1]),
    (each(one_of("a", "b")), [["a"], ["b", "a"], ["a", "a"]], [[], ["c"], ["a", "c"], "a"]),
    (each(one_of("a", "b"), distinct=True), [["a"], ["b", "a"]], [["a", "a"], ["b", "a", "b"], []]),
    (each(each(positive), distinct=True), [[[1], [2]], [[1, 2]]], [[[1], [1]]]),  # unhashable items
])
def test_domain_takes_what_it_allows_and_nothing_else(domain, inside, outside):
    assert all(domain(v) for v in inside)
    assert not any(domain(v) for v in outside)


def test_a_list_of_distinct_items_says_so():
    assert refusal("compare.variants", ["gat", "gat"], each(one_of("gat", "full"), distinct=True)) == (
        "compare.variants = ['gat', 'gat'] is not allowed: it must be a non-empty list of distinct items, "
        "each item one of gat, full")


def test_a_condition_is_values_or_a_domain():
    assert holds(("onlstm",), "onlstm") and not holds(("onlstm",), "lstm")
    assert holds(positive, 3) and not holds(positive, 0)


def test_every_numeric_stage_parameter_has_a_domain():
    missing = [f"{name}.{key}" for name, fn in STAGES.items()
               for key, default in stage_params(fn).items()
               if isinstance(default, (int, float)) and not isinstance(default, bool)
               and key not in SPECS[name].checks]
    assert missing == []


def test_every_default_lies_in_its_domain():
    outside = [f"{name}.{key} = {stage_params(STAGES[name])[key]!r}"
               for name, spec in SPECS.items() for key, domain in spec.checks.items()
               if stage_params(STAGES[name])[key] is not inspect.Parameter.empty  # a required key has none
               and not domain(stage_params(STAGES[name])[key])]
    assert outside == []


def test_a_check_of_no_parameter_is_refused_at_registration():
    with pytest.raises(ValueError, match="lr"):
        stage("test_typo_stage", checks={"lr": positive})(lambda ctx, *, rate=1.0: None)
    assert "test_typo_stage" not in STAGES


# The context attribute each ctx.require asks for, by the slot of the registry's `needs` that promises it.
SLOT_OF = {"data": "data", "num_features": "data", "num_classes": "data", "task": "data", "model": "model",
           "make_model": "model", "make_learner": "model", "encoder": "encoder", "corpus": "corpus",
           "tokenizer": "tokenizer", "trained": "trained", "curves": "curves", "pretrained": "pretrained"}


@pytest.mark.parametrize("name", sorted(n for n in STAGES if STAGES[n].__module__.startswith("graphseq.stages.")))
def test_every_stage_declares_what_it_takes_from_earlier_tables(name):
    # The runner refuses a wrongly ordered pipeline by these declarations, before a file is written; a stage
    # whose ctx.require has none found it only when it ran, after the stages before it had stored theirs.
    asked = re.findall(r'ctx\.require\("(\w+)"', inspect.getsource(STAGES[name]))
    assert all(attribute in SLOT_OF for attribute in asked)
    assert {SLOT_OF[attribute] for attribute in asked} <= set(SPECS[name].needs)
