import networkx as nx
import pytest
import torch

from graphseq.active.strategies import (STRATEGIES, age_sampling, coreset_sampling, degree_sampling,
                                        entropy_sampling, get_strategy, least_confidence_sampling,
                                        kmeans, margin_sampling, pagerank_centrality, percentile,
                                        random_sampling)
from graphseq.errors import GraphseqError

# A 6-node star around node 0 plus the edge 4-5, both directions.
EDGES = [(0, 1), (0, 2), (0, 3), (0, 4), (4, 5)]
EDGE_INDEX = torch.tensor(EDGES + [(b, a) for a, b in EDGES]).t()
PROBABILITIES = torch.tensor([[0.9, 0.1], [0.5, 0.5], [0.6, 0.4], [0.99, 0.01], [0.55, 0.45], [0.8, 0.2]])
POOL = torch.tensor([1, 2, 3, 4, 5])


@pytest.mark.parametrize("name", list(STRATEGIES))
def test_every_strategy_returns_k_distinct_items_of_the_pool(name):
    chosen = get_strategy(name)(PROBABILITIES, POOL, 3, generator=torch.Generator().manual_seed(0),
                                edge_index=EDGE_INDEX, embeddings=PROBABILITIES, round=1,
                                labelled=torch.tensor([0]))
    assert chosen.numel() == 3
    assert len(set(chosen.tolist())) == 3
    assert set(chosen.tolist()) <= set(POOL.tolist())


def test_uncertainty_strategies_rank_the_most_unsure_first():
    for select in (entropy_sampling, margin_sampling, least_confidence_sampling):
        assert select(PROBABILITIES, POOL, 3).tolist() == [1, 4, 2]


def test_degree_sampling_takes_the_best_connected_and_breaks_ties_by_index():
    # Node 4 has degree 2; 1, 2, 3 and 5 have degree 1.
    assert degree_sampling(PROBABILITIES, POOL, 2, edge_index=EDGE_INDEX).tolist() == [4, 1]


def test_pagerank_matches_networkx():
    graph = nx.DiGraph(EDGES + [(b, a) for a, b in EDGES])
    expected = nx.pagerank(graph)
    assert torch.allclose(pagerank_centrality(EDGE_INDEX, 6), torch.tensor([expected[i] for i in range(6)]))


def test_random_sampling_repeats_with_the_same_seed_and_differs_across_seeds():
    draws = [random_sampling(PROBABILITIES, torch.arange(100), 10, generator=torch.Generator().manual_seed(s)).tolist()
             for s in (0, 0, 1)]
    assert draws[0] == draws[1]
    assert draws[0] != draws[2]


def test_coreset_takes_the_point_farthest_from_the_labelled_ones():
    embeddings = torch.tensor([[0.0], [0.1], [0.2], [5.0], [5.1], [10.0]])
    chosen = coreset_sampling(PROBABILITIES, POOL, 2, embeddings=embeddings, labelled=torch.tensor([0]))
    # 5 is farthest from 0; then 3 (5.0 from both 0 and 5) beats 4 (4.9 from 5).
    assert chosen.tolist() == [5, 3]


def test_age_starts_with_centrality():
    # In round 0 PageRank weighs 0.995; the star's leaves 1-3 tie, node 4 leads.
    assert age_sampling(PROBABILITIES, POOL, 1, edge_index=EDGE_INDEX, round=0).tolist() == [4]


def test_percentile_ranks_scores_on_zero_to_one():
    assert percentile(torch.tensor([3.0, 1.0, 2.0])).tolist() == pytest.approx([2 / 3, 0.0, 1 / 3])


def test_unknown_strategy_lists_the_known_ones():
    with pytest.raises(GraphseqError, match="known strategies: random, entropy"):
        get_strategy("entropyy")


def test_kmeans_finds_the_same_centres_as_sklearn():
    from sklearn.cluster import KMeans

    torch.manual_seed(0)
    points = torch.cat([torch.randn(40, 2) + 8, torch.randn(40, 2) - 8, torch.randn(40, 2)])
    centres, assignment = kmeans(points, 3, torch.Generator().manual_seed(0))
    reference = KMeans(3, n_init=3, random_state=0).fit(points.numpy()).cluster_centers_
    order = lambda c: sorted(map(tuple, torch.as_tensor(c).round(decimals=4).tolist()))  # noqa: E731
    assert order(centres) == order(reference)
    assert torch.bincount(assignment).tolist() == [40, 40, 40]


def select_with(name, probabilities=PROBABILITIES, pool=POOL, k=2, **inputs):
    inputs = {"generator": torch.Generator().manual_seed(0), "edge_index": EDGE_INDEX,
              "embeddings": PROBABILITIES, "round": 1, "labelled": torch.tensor([0]), **inputs}
    return get_strategy(name)(probabilities, pool, k, **inputs)


@pytest.mark.parametrize("name", list(STRATEGIES))
def test_a_negative_k_is_refused(name):
    with pytest.raises(ValueError, match=f"{name}_sampling: k must be at least 0, got -1"):
        select_with(name, k=-1)


@pytest.mark.parametrize("name", list(STRATEGIES))
def test_a_boolean_mask_as_pool_is_refused(name):
    mask = torch.tensor([False, True, True, False, True, False])
    with pytest.raises(ValueError, match=rf"{name}_sampling: pool must hold item indices, got a boolean mask; "
                                         rf"pass mask.nonzero\(\).view\(-1\)"):
        select_with(name, pool=mask)


@pytest.mark.parametrize("name", ["entropy", "margin", "least_confidence", "age"])
def test_nan_probabilities_are_refused_not_ranked_first(name):
    probabilities = PROBABILITIES.clone()
    probabilities[3] = float("nan")
    with pytest.raises(GraphseqError, match=f"{name}_sampling: the probabilities hold NaN \\(item 3 first\\)"):
        select_with(name, probabilities=probabilities)


def test_nan_embeddings_are_refused_by_coreset():
    embeddings = PROBABILITIES.clone()
    embeddings[3, 0] = float("nan")
    with pytest.raises(GraphseqError, match=r"coreset_sampling: the embeddings hold NaN \(item 3 first\)"):
        select_with("coreset", embeddings=embeddings)


@pytest.mark.parametrize("name", ["degree", "pagerank", "age"])
def test_an_edge_index_not_shaped_two_by_edges_is_refused(name):
    with pytest.raises(ValueError, match=rf"{name}_sampling: edge_index must be an integer tensor of shape "
                                         rf"\[2, num_edges\], got shape \[10, 2\]"):
        select_with(name, edge_index=EDGE_INDEX.t().contiguous())
