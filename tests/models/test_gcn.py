"""The two-layer GCN the active-learning loop retrains."""
import torch
import torch_geometric.nn as pyg_nn

from graphseq.models import GCN

EDGE_INDEX = torch.tensor([[1, 2, 0, 3, 4, 2],
                           [0, 1, 1, 4, 3, 0]])


def test_gcn_equals_two_pyg_layers_with_relu_between():
    torch.manual_seed(0)
    model = GCN(5, 4, 3).eval()
    conv1, conv2 = pyg_nn.GCNConv(5, 4), pyg_nn.GCNConv(4, 3)
    conv1.load_state_dict(model.conv1.state_dict())
    conv2.load_state_dict(model.conv2.state_dict())
    x = torch.randn(5, 5)
    hidden = conv1(x, EDGE_INDEX).relu()
    logits, embeddings = model(x, EDGE_INDEX)
    assert torch.allclose(embeddings, hidden, atol=1e-6)
    assert torch.allclose(logits, conv2(hidden, EDGE_INDEX), atol=1e-6)


def test_gcn_takes_sparse_features():
    torch.manual_seed(0)
    model = GCN(5, 4, 3).eval()
    x = torch.randn(5, 5) * (torch.rand(5, 5) < 0.5)
    assert torch.allclose(model(x.to_sparse_csr(), EDGE_INDEX)[0], model(x, EDGE_INDEX)[0], atol=1e-6)



def copy_of(model):
    """A fresh model with the same weights: it keeps no graph yet."""
    fresh = GCN(5, 4, 3).eval()
    fresh.load_state_dict(model.state_dict())
    return fresh


def test_the_kept_normalisation_follows_the_graph():
    """GCNConv(cached=True) keeps the first graph's normalisation; the model
    makes it again for another graph, an edited one, or across inference mode."""
    torch.manual_seed(0)
    model = GCN(5, 4, 3).eval()
    x, other = torch.randn(5, 5), EDGE_INDEX.flip(0)
    first = model(x, EDGE_INDEX)[0]
    assert torch.allclose(model(x, other)[0], copy_of(model)(x, other)[0])
    edges = EDGE_INDEX.clone()
    assert torch.allclose(model(x, edges)[0], first)
    edges[0, 0] = 3  # Edited in place.
    assert torch.allclose(model(x, edges)[0], copy_of(model)(x, edges)[0])
    with torch.inference_mode():
        assert torch.allclose(model(x, EDGE_INDEX)[0], first)
    model.train()
    model(x, EDGE_INDEX)[0].sum().backward()  # No inference tensor kept from inside.
    assert model.conv1.lin.weight.grad is not None
