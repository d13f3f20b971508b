"""How unsure a model is about each item, from its class probabilities.
Every measure maps ``[num_items, num_classes]`` probabilities to one score
per item, higher meaning more unsure, so that selection is always "take the
highest scores"; the strategies in :mod:`graphseq.active.strategies` choose.
"""
from __future__ import annotations

import torch
from torch import Tensor


def check_probabilities(probabilities: Tensor) -> None:
    if probabilities.dim() != 2:
        raise ValueError(f"expected probabilities of shape [num_items, num_classes], "
                         f"got a tensor of shape {list(probabilities.shape)}")


def entropy(probabilities: Tensor) -> Tensor:
    r"""Shannon entropy :math:`-\sum_c p_c \log p_c` of each row (in nats);
    a certain prediction scores 0, a uniform one :math:`\log C`."""
    check_probabilities(probabilities)
    # 0 log 0 is 0: xlogy gives exactly that where p is 0.
    return -torch.special.xlogy(probabilities, probabilities).sum(dim=-1)  # [num_items]


def margin(probabilities: Tensor) -> Tensor:
    r"""One minus the gap between the two most probable classes,
    :math:`1 - (p_{(1)} - p_{(2)})`: a near tie scores close to 1."""
    check_probabilities(probabilities)
    if probabilities.size(1) < 2:
        raise ValueError("margin needs at least two classes, "
                         f"got probabilities of shape {list(probabilities.shape)}")
    top2 = probabilities.topk(2, dim=-1).values  # [num_items, 2]
    return 1.0 - (top2[:, 0] - top2[:, 1])


def least_confidence(probabilities: Tensor) -> Tensor:
    r"""One minus the probability of the most probable class,
    :math:`1 - \max_c p_c`."""
    check_probabilities(probabilities)
    return 1.0 - probabilities.max(dim=-1).values
