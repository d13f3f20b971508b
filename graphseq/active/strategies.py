"""Query strategies: which items of the pool to ask about next.

Each strategy is a plain function ``(probabilities, pool, k, **inputs) ->
indices``: ``probabilities`` ``[num_items, num_classes]`` are the model's
predictions for every item, ``pool`` ``[num_pool]`` the indices still
unlabelled (indices, not a boolean mask: pass ``mask.nonzero().view(-1)``),
and the result the ``k`` chosen indices (a subset of ``pool``, most wanted
first). A negative ``k``, a mask as ``pool``, an ``edge_index`` not shaped
``[2, num_edges]`` are refused (ValueError); so are probabilities or
embeddings holding NaN (GraphseqError: training diverged), which would
otherwise be ranked as the most wanted items. Every strategy accepts the
same keyword inputs that the loop offers and ignores those it does not need:

- ``generator`` (torch.Generator): the seeded source of randomness;
- ``edge_index`` ``[2, num_edges]``: the graph over the items;
- ``embeddings`` ``[num_items, dim]``: the model's hidden representation;
- ``labelled`` ``[num_labelled]``: the indices already labelled;
- ``round`` (int): how many rounds of queries came before this one.

Measures of uncertainty live in :mod:`graphseq.active.measures`; here they
are only ranked.
"""
from __future__ import annotations

import operator
from typing import Callable, Dict, Optional, Tuple

import networkx as nx
import torch
from torch import Tensor
from torch_geometric.utils import degree

from ..errors import GraphseqError
from .measures import entropy, least_confidence, margin

Strategy = Callable[..., Tensor]


# --------------------------------------------------------------------------- #
# Checks
# --------------------------------------------------------------------------- #

def check_query(name: str, pool: Tensor, k: int) -> None:
    """``pool`` is a 1-D tensor of item indices and ``k`` a count >= 0."""
    if pool.dtype == torch.bool:
        raise ValueError(f"{name}: pool must hold item indices, got a boolean mask; "
                         f"pass mask.nonzero().view(-1)")
    if pool.dim() != 1 or pool.is_floating_point() or pool.is_complex():
        raise ValueError(f"{name}: pool must be a 1-D tensor of item indices, "
                         f"got shape {list(pool.shape)} of {pool.dtype}")
    try:
        count = operator.index(k)
    except TypeError:
        raise ValueError(f"{name}: k must be a whole number, got {k!r}") from None
    if count < 0:
        raise ValueError(f"{name}: k must be at least 0, got {k}")


def check_edge_index(name: str, edge_index: Tensor) -> None:
    if edge_index.dim() != 2 or edge_index.size(0) != 2 or edge_index.is_floating_point():
        raise ValueError(f"{name}: edge_index must be an integer tensor of shape [2, num_edges], "
                         f"got shape {list(edge_index.shape)} of {edge_index.dtype}")


def check_no_nan(name: str, what: str, values: Tensor, items: Optional[Tensor] = None) -> None:
    """The rows of ``values`` for ``items`` (all rows if None) hold no NaN (one host sync)."""
    rows = values if items is None else values[items]
    if torch.isnan(rows).any():
        row = int(torch.isnan(rows).reshape(rows.size(0), -1).any(dim=1).nonzero()[0])
        item = row if items is None else int(items[row])
        raise GraphseqError(f"{name}: the {what} hold NaN (item {item} first); did training diverge?")


# --------------------------------------------------------------------------- #
# Selection
# --------------------------------------------------------------------------- #

def top_k(scores: Tensor, pool: Tensor, k: int) -> Tensor:
    """The ``k`` items of ``pool`` with the highest ``scores`` (one score per
    item, ``[num_items]``); ties go to the lower index, so the choice is
    reproducible."""
    k = min(k, pool.numel())
    order = torch.sort(scores[pool], descending=True, stable=True).indices[:k]
    return pool[order]


def percentile(scores: Tensor) -> Tensor:
    """Each score's rank among ``scores`` as a fraction in [0, 1); the
    highest score is closest to 1. Puts unlike measures on one scale."""
    ranks = torch.empty_like(scores, dtype=torch.float)
    ranks[scores.argsort(stable=True)] = torch.arange(scores.numel(), dtype=torch.float,
                                                      device=scores.device)
    return ranks / max(scores.numel(), 1)


# --------------------------------------------------------------------------- #
# Strategies that ignore the graph
# --------------------------------------------------------------------------- #

def random_sampling(probabilities: Tensor, pool: Tensor, k: int, *,
                    generator: Optional[torch.Generator] = None, **_) -> Tensor:
    """``k`` items of the pool drawn uniformly without replacement."""
    check_query("random_sampling", pool, k)
    order = torch.randperm(pool.numel(), generator=generator)[:k]
    return pool[order.to(pool.device)]


def entropy_sampling(probabilities: Tensor, pool: Tensor, k: int, **_) -> Tensor:
    """The items whose predicted class distribution has the highest entropy."""
    check_query("entropy_sampling", pool, k)
    check_no_nan("entropy_sampling", "probabilities", probabilities, pool)
    return top_k(entropy(probabilities), pool, k)


def margin_sampling(probabilities: Tensor, pool: Tensor, k: int, **_) -> Tensor:
    """The items whose two most probable classes are closest."""
    check_query("margin_sampling", pool, k)
    check_no_nan("margin_sampling", "probabilities", probabilities, pool)
    return top_k(margin(probabilities), pool, k)


def least_confidence_sampling(probabilities: Tensor, pool: Tensor, k: int, **_) -> Tensor:
    """The items whose most probable class is least probable."""
    check_query("least_confidence_sampling", pool, k)
    check_no_nan("least_confidence_sampling", "probabilities", probabilities, pool)
    return top_k(least_confidence(probabilities), pool, k)


# --------------------------------------------------------------------------- #
# Strategies that read the graph
# --------------------------------------------------------------------------- #

def degree_centrality(edge_index: Tensor, num_nodes: int) -> Tensor:
    """The number of edges into each node, ``[num_nodes]``."""
    return degree(edge_index[1], num_nodes=num_nodes)


def pagerank_centrality(edge_index: Tensor, num_nodes: int, damping: float = 0.85) -> Tensor:
    """PageRank of each node (networkx), ``[num_nodes]``, on the edge list's device."""
    graph = nx.DiGraph()
    graph.add_nodes_from(range(num_nodes))
    graph.add_edges_from(edge_index.t().tolist())
    rank = nx.pagerank(graph, alpha=damping)
    return torch.tensor([rank[i] for i in range(num_nodes)], device=edge_index.device)


def degree_sampling(probabilities: Tensor, pool: Tensor, k: int, *, edge_index: Tensor, **_) -> Tensor:
    """The best-connected items: the most edges first."""
    check_query("degree_sampling", pool, k)
    check_edge_index("degree_sampling", edge_index)
    return top_k(degree_centrality(edge_index, probabilities.size(0)), pool, k)


def pagerank_sampling(probabilities: Tensor, pool: Tensor, k: int, *, edge_index: Tensor, **_) -> Tensor:
    """The items of highest PageRank."""
    check_query("pagerank_sampling", pool, k)
    check_edge_index("pagerank_sampling", edge_index)
    return top_k(pagerank_centrality(edge_index, probabilities.size(0)), pool, k)


def kmeans(points: Tensor, num_clusters: int, generator: Optional[torch.Generator] = None,
           iterations: int = 30) -> Tuple[Tensor, Tensor]:
    """Lloyd's k-means with k-means++ seeding, on the points' device:
    returns the centres ``[num_clusters, dim]`` and each point's cluster
    ``[num_points]``. Small and exact enough for a few thousand points."""
    points = points.detach().float()
    num_clusters = min(num_clusters, points.size(0))
    first = int(torch.randint(points.size(0), (1,), generator=generator))
    centres = points[first].unsqueeze(0)  # [1, dim]
    for _ in range(num_clusters - 1):
        # k-means++: the next centre is drawn in proportion to the squared
        # distance to the nearest centre so far.
        nearest = torch.cdist(points, centres).min(dim=1).values.square()  # [num_points]
        weights = nearest.cpu() + 1e-12
        chosen = int(torch.multinomial(weights / weights.sum(), 1, generator=generator))
        centres = torch.cat([centres, points[chosen].unsqueeze(0)])
    for _ in range(iterations):
        assignment = torch.cdist(points, centres).argmin(dim=1)  # [num_points]
        sums = torch.zeros_like(centres).index_add_(0, assignment, points)
        counts = torch.bincount(assignment, minlength=num_clusters).unsqueeze(1)  # [num_clusters, 1]
        # An emptied cluster keeps its old centre.
        centres = torch.where(counts > 0, sums / counts.clamp_min(1), centres)
    return centres, torch.cdist(points, centres).argmin(dim=1)


def kmeans_density(embeddings: Tensor, num_clusters: int,
                   generator: Optional[torch.Generator] = None) -> Tensor:
    """How typical each item is: :math:`1 / (1 + \\lVert e_i - \\mu_{c(i)} \\rVert)`
    for its k-means centre, ``[num_items]``."""
    centres, assignment = kmeans(embeddings, num_clusters, generator)
    return 1.0 / (1.0 + (embeddings.detach().float() - centres[assignment]).norm(dim=1))


def age_sampling(probabilities: Tensor, pool: Tensor, k: int, *, edge_index: Tensor,
                 round: int = 0, embeddings: Optional[Tensor] = None,
                 generator: Optional[torch.Generator] = None, basef: float = 0.9, **_) -> Tensor:
    r"""AGE, from `"Active Learning for Graph Embedding"
    <https://arxiv.org/abs/1705.05085>`_ (Cai et al., 2017): a time-varying
    mix of three percentiles over the pool,

    .. math::
        \alpha\, P_{\text{entropy}} + \beta\, P_{\text{density}} + \gamma\, P_{\text{PageRank}},
        \qquad \gamma_t = \frac{1}{2.005 - b^t}, \quad \alpha = \beta = \frac{1 - \gamma_t}{2}.

    At first the model knows little and centrality leads (:math:`\gamma \approx 1`);
    with every round :math:`t` uncertainty and density weigh more, towards an
    even mix. :math:`\gamma_t` is the mean of AGE's draw
    :math:`\mathrm{Beta}(1, 1.005 - b^t)`, so the choice is reproducible.
    Density is measured by k-means (one cluster per class) on ``embeddings``,
    the model's predictions where none are given, as AGE does.
    """
    check_query("age_sampling", pool, k)
    check_edge_index("age_sampling", edge_index)
    check_no_nan("age_sampling", "probabilities", probabilities, pool)
    if embeddings is not None:
        check_no_nan("age_sampling", "embeddings", embeddings)
    gamma = 1.0 / (2.005 - basef ** round)
    alpha = beta = (1.0 - gamma) / 2.0
    points = probabilities if embeddings is None else embeddings
    scores = torch.zeros(probabilities.size(0), device=probabilities.device)
    scores[pool] = (alpha * percentile(entropy(probabilities[pool]))
                    + beta * percentile(kmeans_density(points, probabilities.size(1), generator)[pool])
                    + gamma * percentile(pagerank_centrality(edge_index, probabilities.size(0))[pool]))
    return top_k(scores, pool, k)


def coreset_sampling(probabilities: Tensor, pool: Tensor, k: int, *, embeddings: Tensor,
                     labelled: Tensor, **_) -> Tensor:
    """Greedy k-center, from `"Active Learning for Convolutional Neural
    Networks: A Core-Set Approach" <https://arxiv.org/abs/1708.00489>`_
    (Sener and Savarese, ICLR 2018): again and again, the pool item farthest
    from every labelled or already chosen item in embedding space."""
    check_query("coreset_sampling", pool, k)
    check_no_nan("coreset_sampling", "embeddings", embeddings, pool)
    check_no_nan("coreset_sampling", "embeddings", embeddings, labelled)
    points = embeddings.detach()
    if labelled.numel():
        nearest = torch.cdist(points[pool], points[labelled]).min(dim=1).values  # [num_pool]
    else:
        nearest = torch.full((pool.numel(),), float("inf"), device=points.device)
    chosen = []
    for _ in range(min(k, pool.numel())):
        best = int(nearest.argmax())
        chosen.append(best)
        distance = torch.cdist(points[pool], points[pool[best]].unsqueeze(0)).squeeze(1)
        nearest = torch.minimum(nearest, distance)
        nearest[best] = -1.0  # Never chosen twice.
    return pool[torch.tensor(chosen, dtype=torch.long, device=pool.device)]


STRATEGIES: Dict[str, Strategy] = {
    "random": random_sampling,
    "entropy": entropy_sampling,
    "margin": margin_sampling,
    "least_confidence": least_confidence_sampling,
    "degree": degree_sampling,
    "pagerank": pagerank_sampling,
    "age": age_sampling,
    "coreset": coreset_sampling,
}


def get_strategy(name: str) -> Strategy:
    if name not in STRATEGIES:
        raise GraphseqError(f"unknown query strategy {name!r}; known strategies: {', '.join(STRATEGIES)}")
    return STRATEGIES[name]
