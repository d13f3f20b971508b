import pytest
import torch
import torch_geometric.nn as pyg_nn

from graphseq.nn import GATConv

# A 6-node graph with a repeated edge (1 -> 0 twice), an existing self-loop
# (2 -> 2) and an isolated node (5).
EDGE_INDEX = torch.tensor([[1, 1, 2, 0, 3, 4, 2, 3],
                           [0, 0, 2, 1, 1, 3, 4, 2]])


def copied_pair(**kwargs):
    torch.manual_seed(0)
    ours = GATConv(5, 4, **kwargs)
    theirs = pyg_nn.GATConv(5, 4, **kwargs)
    theirs.load_state_dict(ours.state_dict())
    return ours.eval(), theirs.eval()


@pytest.mark.parametrize("heads,concat,add_self_loops,bias", [
    (1, True, True, True),
    (3, True, True, True),
    (3, False, True, True),
    (2, True, False, False),
    (4, False, False, True),
])
def test_equals_pyg_gatconv_with_copied_weights(heads, concat, add_self_loops, bias):
    ours, theirs = copied_pair(heads=heads, concat=concat, add_self_loops=add_self_loops,
                               bias=bias, negative_slope=0.1, dropout=0.5)
    x = torch.randn(6, 5)
    out, (edges, alpha) = ours(x, EDGE_INDEX, return_attention_weights=True)
    ref, (ref_edges, ref_alpha) = theirs(x, EDGE_INDEX, return_attention_weights=True)
    assert torch.allclose(out, ref, atol=1e-5)
    assert torch.equal(edges, ref_edges)
    assert torch.allclose(alpha, ref_alpha, atol=1e-5)


def test_state_dict_matches_pyg_keys_and_shapes():
    ours = GATConv(7, 3, heads=2)
    theirs = pyg_nn.GATConv(7, 3, heads=2)
    assert {k: v.shape for k, v in ours.state_dict().items()} == \
        {k: v.shape for k, v in theirs.state_dict().items()}


def test_loads_pyg_weights():
    theirs = pyg_nn.GATConv(5, 4, heads=2).eval()
    ours = GATConv(5, 4, heads=2).eval()
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(6, 5)
    assert torch.allclose(ours(x, EDGE_INDEX), theirs(x, EDGE_INDEX), atol=1e-5)


def test_gradients_match_pyg():
    ours, theirs = copied_pair(heads=2)
    x = torch.randn(6, 5)
    ours(x, EDGE_INDEX).square().sum().backward()
    theirs(x, EDGE_INDEX).square().sum().backward()
    for (name, p), q in zip(ours.named_parameters(), theirs.parameters()):
        assert torch.allclose(p.grad, q.grad, atol=1e-5), name


def test_isolated_node_without_self_loops_gets_only_bias():
    ours, _ = copied_pair(heads=2, add_self_loops=False)
    torch.nn.init.normal_(ours.bias)
    out = ours(torch.randn(6, 5), EDGE_INDEX)
    assert torch.allclose(out[5], ours.bias)


def test_sparse_features_give_the_dense_result():
    conv = GATConv(5, 4, heads=2).eval()
    x = torch.randn(6, 5) * (torch.rand(6, 5) < 0.3)
    assert torch.allclose(conv(x.to_sparse(), EDGE_INDEX), conv(x, EDGE_INDEX), atol=1e-6)


def test_attention_sums_to_one_per_node():
    conv = GATConv(5, 4, heads=3).eval()
    _, (edges, alpha) = conv(torch.randn(6, 5), EDGE_INDEX, return_attention_weights=True)
    totals = torch.zeros(6, 3).index_add_(0, edges[1], alpha)
    assert torch.allclose(totals, torch.ones(6, 3))


def test_wrong_input_shape_is_named():
    conv = GATConv(5, 4)
    with pytest.raises(ValueError, match=r"GATConv expects x of shape \[num_nodes, 5\]"):
        conv(torch.randn(6, 3), EDGE_INDEX)
    with pytest.raises(ValueError, match="edge_index of shape"):
        conv(torch.randn(6, 5), EDGE_INDEX.t())
    with pytest.raises(ValueError, match="refers to node 4, but there are only 4 nodes"):
        conv(torch.randn(4, 5), EDGE_INDEX)


def test_repr():
    assert repr(GATConv(16, 8, heads=4)) == "GATConv(16, 8, heads=4)"


def test_sparse_csr_features_give_dense_gradients():
    conv = GATConv(5, 4, heads=2)
    x = torch.randn(6, 5) * (torch.rand(6, 5) < 0.4)
    conv(x, EDGE_INDEX).square().sum().backward()
    dense_grad = conv.lin.weight.grad.clone()
    conv.zero_grad()
    conv(x.to_sparse_csr(), EDGE_INDEX).square().sum().backward()
    assert torch.allclose(conv.lin.weight.grad, dense_grad, atol=1e-5)


def test_fused_aggregation_equals_the_message_sum_with_gradients():
    from graphseq.nn.attention import attention_aggregate
    from torch_geometric.index import index2ptr

    source = torch.tensor([1, 2, 0, 3, 0, 2, 3])
    target = torch.tensor([0, 0, 1, 1, 2, 3, 3])  # Node 4 receives nothing.
    alpha = torch.rand(7, 2, dtype=torch.double, requires_grad=True)
    value = torch.randn(5, 2, 3, dtype=torch.double, requires_grad=True)
    ptr = index2ptr(target, 5)
    expected = torch.zeros(5, 2, 3, dtype=torch.double).index_add(
        0, target, value[source] * alpha.unsqueeze(-1))
    assert torch.allclose(attention_aggregate(ptr, source, alpha, value), expected)
    assert torch.autograd.gradcheck(lambda a, v: attention_aggregate(ptr, source, a, v), (alpha, value))


def test_layer_uses_the_fused_path(monkeypatch):
    conv = GATConv(5, 4, heads=2).eval()
    calls = []
    monkeypatch.setattr(GATConv, "message", lambda self, *a: calls.append(1))
    conv(torch.randn(6, 5), EDGE_INDEX)
    assert calls == []


def test_value_dropout_acts_only_in_training():
    torch.manual_seed(0)
    conv = GATConv(5, 4, heads=2, value_dropout=0.5)
    reference = GATConv(5, 4, heads=2)
    reference.load_state_dict(conv.state_dict())
    x = torch.randn(6, 5)
    assert torch.allclose(conv.eval()(x, EDGE_INDEX), reference.eval()(x, EDGE_INDEX))
    assert not torch.allclose(conv.train()(x, EDGE_INDEX), reference.train()(x, EDGE_INDEX))
