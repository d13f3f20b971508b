import pytest
import torch

from graphseq.models.node_transformer import NodeTransformer

EDGE_INDEX = torch.tensor([[0, 1, 1, 2, 3], [1, 0, 2, 1, 4]])


def model(attention, **kwargs):
    torch.manual_seed(0)
    return NodeTransformer(6, 3, hidden_channels=8, heads=2, layers=2, dim_feedforward=8,
                           attention=attention, **kwargs).eval()


def test_neighbour_attention_sees_only_the_graph():
    net = model("neighbours")
    x = torch.randn(5, 6)
    changed = x.clone()
    changed[4] = torch.randn(6)  # Node 4 sends to nobody.
    assert torch.allclose(net(x, EDGE_INDEX)[:4], net(changed, EDGE_INDEX)[:4])


def test_full_attention_ignores_the_edges_but_sees_every_node():
    net = model("full")
    x = torch.randn(5, 6)
    assert torch.allclose(net(x, EDGE_INDEX), net(x, EDGE_INDEX.flip(0)), atol=1e-6)
    changed = x.clone()
    changed[4] = torch.randn(6)
    assert not torch.allclose(net(x, EDGE_INDEX)[0], net(changed, EDGE_INDEX)[0])


def test_sparse_features_and_positional_encodings():
    net = model("neighbours", positional_encoding=torch.randn(5, 4))
    x = torch.randn(5, 6) * (torch.rand(5, 6) < 0.3)
    out = net(x.to_sparse_csr(), EDGE_INDEX)
    assert out.shape == (5, 3)
    assert torch.allclose(out, net(x, EDGE_INDEX), atol=1e-5)


def test_positional_encodings_of_another_graph_are_named():
    net = model("neighbours", positional_encoding=torch.randn(4, 4))
    with pytest.raises(ValueError, match="positional encoding covers 4 nodes, but x has 5"):
        net(torch.randn(5, 6), EDGE_INDEX)


def test_unknown_attention_is_named():
    with pytest.raises(ValueError, match="neighbours, full"):
        NodeTransformer(6, 3, attention="everyone")
