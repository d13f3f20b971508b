import warnings

import pytest
import torch

from graphseq import graphs


def test_chain_numbers_sequences_one_after_another():
    assert graphs.chain([3, 2]).tolist() == [[0, 1, 3], [1, 2, 4]]


def test_chain_skips_empty_and_single_node_sequences():
    assert graphs.chain([1, 0, 2]).tolist() == [[1], [2]]
    assert graphs.chain([]).shape == (2, 0)


def test_causal_receives_from_itself_and_earlier_nodes():
    edges = set(map(tuple, graphs.causal([3, 1]).t().tolist()))
    assert edges == {(0, 0), (0, 1), (1, 1), (0, 2), (1, 2), (2, 2), (3, 3)}


def test_fully_connected_blocks_do_not_touch():
    edge_index = graphs.fully_connected([2, 3])
    assert edge_index.size(1) == 4 + 9
    batch = graphs.lengths_to_batch([2, 3])
    assert torch.equal(batch[edge_index[0]], batch[edge_index[1]])


def test_fully_connected_without_self_loops():
    edge_index = graphs.fully_connected(3, self_loops=False)
    assert edge_index.size(1) == 6
    assert (edge_index[0] != edge_index[1]).all()


def test_fully_connected_is_ordered_by_target():
    assert graphs.fully_connected([2]).tolist() == [[0, 1, 0, 1], [0, 0, 1, 1]]


def test_reverse_flips_direction():
    assert graphs.reverse(graphs.chain([3])).tolist() == [[1, 2], [0, 1]]


def test_lengths_and_batch_round_trip():
    batch = graphs.lengths_to_batch([2, 0, 3])
    assert batch.tolist() == [0, 0, 2, 2, 2]
    assert graphs.batch_to_lengths(batch, num_graphs=3).tolist() == [2, 0, 3]


def test_negative_length_is_refused():
    with pytest.raises(ValueError, match="non-negative"):
        graphs.chain([2, -1])


@pytest.mark.parametrize("build", [graphs.chain, graphs.fully_connected, graphs.causal, graphs.lengths_to_batch])
@pytest.mark.parametrize("lengths,shown", [([2.7, 2], r"\[2.7, 2\]"), ([True, True], r"\[True, True\]"),
                                           (float("nan"), "nan")])
def test_sizes_that_are_not_whole_numbers_are_refused(build, lengths, shown):
    # int() would cut 2.7 to 2 and build a graph of other sizes without a word.
    with pytest.raises(ValueError, match=f"graph sizes must be whole numbers, got {shown}"):
        build(lengths)
    assert graphs.chain(torch.tensor([3, 2])).tolist() == [[0, 1, 3], [1, 2, 4]]  # integer tensors still do


def test_batch_to_lengths_refuses_a_batch_beyond_num_graphs():
    assert graphs.batch_to_lengths(torch.tensor([0, 0, 1]), 3).tolist() == [2, 1, 0]
    with pytest.raises(ValueError, match="batch names graph 2, but num_graphs is 2"):
        graphs.batch_to_lengths(torch.tensor([0, 1, 2]), 2)
    with pytest.raises(TypeError, match="batch must be a tensor, got list"):
        graphs.batch_to_lengths([0, 1])


def test_knn_and_with_self_loops_name_bad_arguments():
    assert graphs.knn(torch.rand(0, 2), 1).shape == (2, 0)
    with pytest.raises(ValueError, match="block_size must be at least 1, got 0"):
        graphs.knn(torch.rand(3, 2), 1, block_size=0)
    with pytest.raises(ValueError, match=r"knn needs x of shape \[num_items, dim\], got \[3\]"):
        graphs.knn(torch.rand(3), 1)
    with pytest.raises(ValueError, match="num_nodes must be a whole number >= 0, got 2.5"):
        graphs.with_self_loops(torch.tensor([[0], [1]]), 2.5)
    with pytest.raises(ValueError, match=r"edge_index must be a \[2, num_edges\] tensor, got \[3, 2\]"):
        graphs.with_self_loops(torch.zeros(3, 2, dtype=torch.long), 3)


def _edges(edge_index):
    return set(map(tuple, edge_index.t().tolist()))


def test_knn_joins_each_row_to_its_most_similar_rows_both_ways():
    x = torch.tensor([[1.0, 0.0, 0.0], [0.9, 0.1, 0.0], [0.0, 1.0, 0.0], [0.0, 0.9, 0.1]])
    assert _edges(graphs.knn(x, k=1)) == {(0, 1), (1, 0), (2, 3), (3, 2)}


def test_knn_never_joins_rows_with_nothing_in_common_nor_a_row_to_itself():
    x = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    # Row 2 shares nothing with the others: it stays alone although k = 2.
    assert _edges(graphs.knn(x, k=2)) == {(0, 1), (1, 0)}


def test_knn_breaks_ties_towards_the_lower_index():
    x = torch.tensor([[1.0, 1.0, 0.0, 0.0], [1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 1.0],
                      [0.0, 0.0, 2.0, 0.0], [0.0, 0.0, 0.0, 2.0]])
    # Rows 1 and 2 are equally similar to row 0 (1); each prefers another row (2).
    assert _edges(graphs.knn(x, k=1)) == {(0, 1), (1, 0), (1, 3), (3, 1), (2, 4), (4, 2)}


def test_knn_gives_the_same_graph_for_sparse_rows_and_any_block_size():
    torch.manual_seed(0)
    x = torch.rand(30, 12) * (torch.rand(30, 12) < 0.3)
    dense = graphs.knn(x, k=3)
    assert torch.equal(graphs.knn(x.to_sparse_csr(), k=3, block_size=7), dense)
    assert torch.equal(graphs.knn(x, k=3, block_size=1), dense)


def test_with_self_loops_replaces_loops_as_pyg_does():
    from torch_geometric.utils import add_self_loops, remove_self_loops
    edge_index = torch.tensor([[1, 2, 2, 0, 3], [0, 2, 1, 3, 3]])
    expected, _ = add_self_loops(remove_self_loops(edge_index)[0], num_nodes=5)
    assert torch.equal(graphs.with_self_loops(edge_index, 5), expected)
    grouped = graphs.with_self_loops(edge_index, 5, sort=True)
    assert grouped[1].tolist() == [0, 0, 1, 1, 2, 3, 3, 4]
    assert grouped[:, :2].tolist() == [[1, 0], [0, 0]]  # Stable: each target's edges keep their order.


def test_with_self_loops_traced_adds_a_loop_per_node_of_the_graph_given():
    # Under torch.jit.trace the node count is a traced size (a 0-d tensor):
    # the loops must follow it, not the count of the example graph.
    def loops_on(x, edge_index):
        return graphs.with_self_loops(edge_index, x.size(0))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        traced = torch.jit.trace(loops_on, (torch.zeros(3, 1), torch.tensor([[0, 1, 1], [1, 1, 2]])))
    edge_index = torch.tensor([[2, 4, 3], [3, 4, 0]])
    assert torch.equal(traced(torch.zeros(5, 1), edge_index), graphs.with_self_loops(edge_index, 5))


def test_sort_by_target_reports_whether_it_sorted():
    edge_index = torch.tensor([[0, 1, 2], [2, 0, 1]])
    grouped, perm = graphs.sort_by_target(edge_index)
    assert grouped.tolist() == [[1, 2, 0], [0, 1, 2]] and perm.tolist() == [1, 2, 0]
    assert graphs.sort_by_target(grouped)[1] is None


def test_fully_connected_bipartite():
    edge_index = graphs.fully_connected_bipartite([2, 1], [1, 2])
    assert edge_index.tolist() == [[0, 1, 2, 2], [0, 0, 1, 2]]
    assert torch.equal(graphs.fully_connected_bipartite([3, 2], [3, 2]), graphs.fully_connected([3, 2]))
    assert graphs.fully_connected_bipartite([0], [2]).shape == (2, 0)
