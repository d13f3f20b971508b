import pytest
import torch
import torch_geometric.nn as pyg_nn

from graphseq.models import GAT
from graphseq.nn.sparse import sparse_dropout

EDGE_INDEX = torch.tensor([[1, 2, 0, 3, 4, 2, 3, 3],
                           [0, 2, 1, 1, 3, 4, 2, 3]])


def test_gat_model_equals_two_pyg_layers_with_copied_weights():
    torch.manual_seed(0)
    model = GAT(5, 3, hidden_channels=4, heads=2, output_heads=2).eval()
    conv1 = pyg_nn.GATConv(5, 4, heads=2)
    conv2 = pyg_nn.GATConv(8, 3, heads=2, concat=False)
    conv1.load_state_dict(model.conv1.state_dict())
    conv2.load_state_dict(model.conv2.state_dict())
    x = torch.randn(6, 5)
    expected = conv2(torch.nn.functional.elu(conv1(x, EDGE_INDEX)), EDGE_INDEX)
    assert torch.allclose(model(x, EDGE_INDEX), expected, atol=1e-5)
    assert torch.allclose(model(x.to_sparse_csr(), EDGE_INDEX), expected, atol=1e-5)


def test_sparse_dropout_keeps_the_dense_distribution_on_non_zeros():
    torch.manual_seed(0)
    x = torch.rand(200, 50) * (torch.rand(200, 50) < 0.1)
    dropped = sparse_dropout(x.to_sparse_csr(), 0.6, training=True).to_dense()
    kept = dropped[x != 0] != 0
    assert abs(kept.float().mean().item() - 0.4) < 0.05
    assert torch.allclose(dropped[x != 0][kept], x[x != 0][kept] / 0.4)
    assert (dropped[x == 0] == 0).all()


def test_sparse_dropout_is_identity_in_eval():
    x = torch.rand(4, 3).to_sparse_csr()
    assert sparse_dropout(x, 0.6, training=False) is x


def test_prepared_graph_is_reused_only_for_the_same_unchanged_edges():
    model = GAT(5, 3, hidden_channels=4, heads=2).eval()
    x = torch.randn(6, 5)
    first = model(x, EDGE_INDEX)
    assert model.graph_with_self_loops(EDGE_INDEX, 6) is model.graph_with_self_loops(EDGE_INDEX, 6)
    edges = EDGE_INDEX.clone()
    assert torch.allclose(model(x, edges), first)
    edges[0, 0] = 4  # Edited in place: the cached graph must not be used.
    changed = model(x, edges)
    fresh = GAT(5, 3, hidden_channels=4, heads=2).eval()
    fresh.load_state_dict(model.state_dict())
    assert torch.allclose(changed, fresh(x, edges))
    assert torch.allclose(first, fresh(x, EDGE_INDEX))


def test_runs_under_inference_mode():
    model = GAT(5, 3, hidden_channels=4, heads=2).eval()
    x = torch.randn(6, 5)
    with torch.no_grad():
        expected, other = model(x, EDGE_INDEX), model(x, EDGE_INDEX.flip(0))
    with torch.inference_mode():
        edges = EDGE_INDEX.clone()
        assert torch.allclose(model(x, edges), expected)
        edges.copy_(EDGE_INDEX.flip(0))  # Inference tensors count no edits: nothing may be kept.
        assert torch.allclose(model(x, edges), other)
        assert torch.allclose(model(x, EDGE_INDEX), expected)  # The graph kept outside is not used inside,
    model(x, EDGE_INDEX).sum().backward()  # nor the one made inside outside.


def test_a_malformed_edge_index_is_named_before_the_layers():
    model = GAT(5, 3, hidden_channels=4, heads=2)
    with pytest.raises(ValueError, match=r"edge_index must be a \[2, num_edges\] tensor, got \[3, 4\]"):
        model(torch.randn(6, 5), torch.zeros(3, 4, dtype=torch.long))
    with pytest.raises(TypeError, match="GAT expects edge_index to be a tensor, got list"):
        model(torch.randn(6, 5), [[0, 1], [1, 0]])
