import pytest
import torch

from graphseq import graphs
from graphseq.nn import MetricAttentionConv


def dense_reference(conv: MetricAttentionConv, x, edge_index):
    """The layer's equations with an N x N matrix: MLP(|x_i - x_j|) for every
    edge j -> i (BatchNorm counting each node's zero difference with itself
    too), softmax over each node's in-neighbours, then Theta [x_i, sum_j alpha_ij x_j]."""
    n = x.size(0)
    sources, targets = edge_index
    rows = torch.cat([torch.abs(x[targets] - x[sources]), torch.zeros(n, x.size(1), dtype=x.dtype)])
    scores = conv.metric(rows)[:sources.numel(), 0] if conv.training else conv.metric(rows[:sources.numel()])[:, 0]
    score = torch.full((n, n), float("-inf"), dtype=x.dtype).index_put((targets, sources), scores)
    alpha = torch.nan_to_num(torch.softmax(score, dim=1))  # a node without in-neighbours sums nothing
    return conv.lin(torch.cat([x, alpha @ x], dim=1)), alpha


@pytest.fixture
def conv():
    torch.manual_seed(0)
    return MetricAttentionConv(6, 4, hidden_channels=[8, 5]).double()


def test_equals_dense_equations_on_any_graph(conv):
    x = torch.randn(5, 6, dtype=torch.float64, requires_grad=True)
    edge_index = torch.tensor([[0, 1, 2, 3, 4, 4, 1], [1, 0, 1, 1, 0, 2, 4]])
    for training in (True, False):
        conv.train(training)
        out = conv(x, edge_index)
        expected, _ = dense_reference(conv, x, edge_index)
        assert torch.allclose(out, expected, atol=1e-10)
        grads = torch.autograd.grad(out.pow(2).sum(), [x] + list(conv.parameters()))
        expected_grads = torch.autograd.grad(expected.pow(2).sum(), [x] + list(conv.parameters()))
        for ours, reference in zip(grads, expected_grads):
            assert torch.allclose(ours, reference, atol=1e-10)


def test_attention_weights_sum_to_one_over_each_nodes_in_edges(conv):
    x = torch.randn(4, 6, dtype=torch.float64)
    edge_index = graphs.fully_connected([4], self_loops=False)
    out, (edges, alpha) = conv(x, edge_index, return_attention_weights=True)
    assert out.shape == (4, 4) and torch.equal(edges, edge_index) and alpha.shape == (12, 1)
    sums = torch.zeros(4, dtype=torch.float64).index_add_(0, edges[1], alpha[:, 0])
    assert torch.allclose(sums, torch.ones(4, dtype=torch.float64))


def test_node_without_in_edges_keeps_its_own_features(conv):
    conv.eval()
    x = torch.randn(3, 6, dtype=torch.float64)
    out = conv(x, torch.tensor([[0], [1]]))
    expected = conv.lin(torch.cat([x[2], torch.zeros(6, dtype=torch.float64)]))
    assert torch.allclose(out[2], expected)


def test_scores_run_in_edge_update(conv):
    calls = []
    conv.register_edge_update_forward_hook(lambda module, inputs, output: calls.append(output.shape))
    conv(torch.randn(4, 6, dtype=torch.float64), graphs.fully_connected([4], self_loops=False))
    assert calls == [torch.Size([12, 1])]


def test_authors_batchnorm_counts_the_diagonal():
    torch.manual_seed(1)
    with_diagonal = MetricAttentionConv(3, 2, hidden_channels=[4]).double()
    without = MetricAttentionConv(3, 2, hidden_channels=[4], norm_diagonal=False).double()
    without.load_state_dict(with_diagonal.state_dict())
    x = torch.randn(4, 3, dtype=torch.float64)
    edge_index = graphs.fully_connected([4], self_loops=False)
    assert not torch.allclose(with_diagonal(x, edge_index), without(x, edge_index))
    # In evaluation BatchNorm uses its running statistics: the diagonal changes nothing.
    without.load_state_dict(with_diagonal.state_dict())
    with_diagonal.eval(), without.eval()
    assert torch.allclose(with_diagonal(x, edge_index), without(x, edge_index))


def test_repr_and_bad_input(conv):
    assert repr(conv) == "MetricAttentionConv(6, 4, hidden_channels=[8, 5])"
    with pytest.raises(ValueError, match="MetricAttentionConv"):
        conv(torch.randn(4, 5, dtype=torch.float64), graphs.fully_connected([4]))
    with pytest.raises(ValueError, match="edge_index"):
        conv(torch.randn(4, 6, dtype=torch.float64), torch.tensor([[0], [7]]))
    with pytest.raises(ValueError, match="MetricAttentionConv expects x of dtype torch.float64, like its weights, "
                                         "got torch.float32"):
        conv(torch.randn(4, 6), graphs.fully_connected([4]))


def test_one_pair_in_training_is_refused_by_name_and_scored_in_eval():
    conv = MetricAttentionConv(3, 2, hidden_channels=[4], norm_diagonal=False)
    x, edge_index = torch.randn(2, 3), torch.tensor([[0], [1]])
    with pytest.raises(ValueError, match=r"MetricAttentionConv in training mode needs two or more pairs for the "
                                         r"BatchNorm of its metric MLP, got one \(1 edge\(s\) and 0 node"):
        conv(x, edge_index)
    conv.norm_diagonal = True  # The diagonal's two zero differences make the batch.
    assert conv(x, edge_index).shape == (2, 2)
    conv.eval()
    conv.norm_diagonal = False
    assert conv(x, edge_index).shape == (2, 2)


def test_dropout_acts_in_training_only():
    torch.manual_seed(0)
    conv = MetricAttentionConv(3, 2, hidden_channels=[16], dropout=0.5)
    x, edge_index = torch.randn(5, 3), graphs.fully_connected([5], self_loops=False)
    assert not torch.allclose(conv(x, edge_index), conv(x, edge_index))
    conv.eval()
    assert torch.allclose(conv(x, edge_index), conv(x, edge_index))


def test_message_path_and_fused_path_agree(conv):
    """A message hook makes the layer build every edge's message (PyG's
    path); without one the fused sparse path runs. Same numbers either way."""
    x = torch.randn(6, 6, dtype=torch.float64, requires_grad=True)
    edge_index = torch.tensor([[1, 2, 3, 0, 5, 4, 2], [0, 0, 1, 2, 2, 3, 5]])
    conv.eval()
    fused = conv(x, edge_index)
    grad_fused, = torch.autograd.grad(fused.sum(), x)
    messages = []
    handle = conv.register_message_forward_hook(lambda module, inputs, output: messages.append(output.shape))
    plain = conv(x, edge_index)
    grad_plain, = torch.autograd.grad(plain.sum(), x)
    handle.remove()
    assert messages == [torch.Size([7, 1, 6])]
    assert torch.allclose(fused, plain) and torch.allclose(grad_fused, grad_plain)
