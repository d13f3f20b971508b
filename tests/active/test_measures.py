import math

import pytest
import torch

from graphseq.active.measures import entropy, least_confidence, margin

PROBABILITIES = torch.tensor([[1.0, 0.0, 0.0],
                              [0.5, 0.5, 0.0],
                              [1 / 3, 1 / 3, 1 / 3],
                              [0.7, 0.2, 0.1]])


def test_entropy_matches_hand_computed_values():
    expected = torch.tensor([0.0, math.log(2), math.log(3),
                             -(0.7 * math.log(0.7) + 0.2 * math.log(0.2) + 0.1 * math.log(0.1))])
    assert torch.allclose(entropy(PROBABILITIES), expected, atol=1e-6)


def test_margin_is_one_minus_gap_of_the_top_two():
    assert torch.allclose(margin(PROBABILITIES), torch.tensor([0.0, 1.0, 1.0, 0.5]), atol=1e-6)


def test_least_confidence_is_one_minus_the_top_probability():
    assert torch.allclose(least_confidence(PROBABILITIES), torch.tensor([0.0, 0.5, 2 / 3, 0.3]), atol=1e-6)


def test_measures_reject_a_vector():
    with pytest.raises(ValueError, match=r"\[num_items, num_classes\].*\[3\]"):
        entropy(torch.tensor([0.2, 0.3, 0.5]))


def test_margin_needs_two_classes():
    with pytest.raises(ValueError, match="two classes"):
        margin(torch.ones(4, 1))
