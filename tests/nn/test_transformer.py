import pytest
import torch
import torch.nn.functional as F

from graphseq import graphs
from graphseq.nn import TransformerEncoderLayer

D_MODEL, HEADS, FEEDFORWARD = 8, 2, 16


def copied_pair(**kwargs):
    torch.manual_seed(0)
    ours = TransformerEncoderLayer(D_MODEL, HEADS, FEEDFORWARD, **kwargs)
    for p in ours.parameters():  # Non-trivial biases and layer-norm scales.
        torch.nn.init.normal_(p, std=0.5)
    theirs = torch.nn.TransformerEncoderLayer(D_MODEL, HEADS, FEEDFORWARD, batch_first=True, **kwargs)
    theirs.load_state_dict(ours.state_dict())
    return ours.eval(), theirs.eval()


def test_state_dict_matches_torch_keys_and_shapes():
    ours = TransformerEncoderLayer(D_MODEL, HEADS, FEEDFORWARD)
    theirs = torch.nn.TransformerEncoderLayer(D_MODEL, HEADS, FEEDFORWARD, batch_first=True)
    assert {k: v.shape for k, v in ours.state_dict().items()} == \
        {k: v.shape for k, v in theirs.state_dict().items()}


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_fully_connected_equals_torch_encoder_layer(norm_first, activation):
    ours, theirs = copied_pair(norm_first=norm_first, activation=activation, dropout=0.2)
    x = torch.randn(3, 5, D_MODEL)
    out = ours(x.reshape(15, D_MODEL), batch=graphs.lengths_to_batch([5, 5, 5]))
    assert torch.allclose(out, theirs(x).reshape(15, D_MODEL), atol=1e-5)


@pytest.mark.parametrize("norm_first", [False, True])
def test_graphs_of_unequal_sizes_equal_key_padding_mask(norm_first):
    ours, theirs = copied_pair(norm_first=norm_first)
    sizes = [2, 5, 3]
    x = torch.randn(sum(sizes), D_MODEL)
    padded = torch.zeros(len(sizes), max(sizes), D_MODEL)
    padding = torch.ones(len(sizes), max(sizes), dtype=torch.bool)
    for i, part in enumerate(x.split(sizes)):
        padded[i, :len(part)], padding[i, :len(part)] = part, False
    out = ours(x, batch=graphs.lengths_to_batch(sizes))
    with torch.no_grad():
        expected = theirs(padded, src_key_padding_mask=padding)[~padding]
    assert torch.allclose(out, expected, atol=1e-5)


@pytest.mark.parametrize("norm_first", [False, True])
def test_causal_graph_equals_causal_mask(norm_first):
    ours, theirs = copied_pair(norm_first=norm_first)
    x = torch.randn(2, 5, D_MODEL)
    mask = torch.nn.Transformer.generate_square_subsequent_mask(5)
    out = ours(x.reshape(10, D_MODEL), graphs.causal([5, 5]))
    assert torch.allclose(out, theirs(x, src_mask=mask, is_causal=True).reshape(10, D_MODEL), atol=1e-5)


def test_gradients_match_torch_in_training_without_dropout():
    ours, theirs = copied_pair(dropout=0.0, norm_first=True)
    ours.train(), theirs.train()
    x = torch.randn(2, 4, D_MODEL, requires_grad=True)
    x_ours = x.detach().reshape(8, D_MODEL).clone().requires_grad_()
    ours(x_ours, batch=graphs.lengths_to_batch([4, 4])).square().sum().backward()
    theirs(x).square().sum().backward()
    assert torch.allclose(x_ours.grad, x.grad.reshape(8, D_MODEL), atol=1e-4)
    for (name, p), q in zip(ours.named_parameters(), theirs.parameters()):
        assert torch.allclose(p.grad, q.grad, atol=1e-4), name


def test_sparse_graph_attends_along_its_edges_only():
    torch.manual_seed(0)
    layer = TransformerEncoderLayer(D_MODEL, HEADS, FEEDFORWARD, dropout=0.0).eval()
    x = torch.randn(4, D_MODEL)
    edge_index = torch.tensor([[0, 1, 1], [1, 0, 1]])  # Nodes 0 and 1 talk; 2 and 3 hear nothing.
    out = layer(x, edge_index)
    changed = x.clone()
    changed[2:] = torch.randn(2, D_MODEL)
    assert torch.allclose(layer(changed, edge_index)[:2], out[:2])
    assert not out.isnan().any()


def test_unknown_activation_is_named():
    with pytest.raises(ValueError, match="TransformerEncoderLayer needs activation 'relu' or 'gelu' or a function, "
                                         "got 'tanh'"):
        TransformerEncoderLayer(D_MODEL, HEADS, activation="tanh")


@pytest.mark.parametrize("norm_first", [False, True])
def test_features_of_another_dtype_are_named(norm_first):
    with pytest.raises(ValueError, match="TransformerEncoderLayer expects x of dtype torch.float32, like its weights, "
                                         "got torch.float64"):
        TransformerEncoderLayer(D_MODEL, HEADS, norm_first=norm_first)(torch.randn(4, D_MODEL, dtype=torch.double))


def test_torchs_arguments_mean_the_same_positional_ones_too():
    """(d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
    batch_first, norm_first, bias, device, dtype), a callable activation included."""
    torch.manual_seed(0)
    args = (D_MODEL, HEADS, FEEDFORWARD, 0.0, F.gelu, 1e-6, True, True, False)
    ours = TransformerEncoderLayer(*args, dtype=torch.float64).eval()
    theirs = torch.nn.TransformerEncoderLayer(*args, dtype=torch.float64).eval()
    assert ours.norm_first and ours.norm1.eps == 1e-6 and ours.linear1.bias is None
    theirs.load_state_dict(ours.state_dict())
    x = torch.randn(5, D_MODEL, dtype=torch.float64)
    assert torch.allclose(ours(x), theirs(x.unsqueeze(0))[0])


def test_repr():
    assert repr(TransformerEncoderLayer(16, 4, 32)) == \
        "TransformerEncoderLayer(16, nhead=4, dim_feedforward=32, norm_first=False)"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_on_cpu(dtype):
    ours, _ = copied_pair(dropout=0.0)
    x = torch.randn(6, D_MODEL)
    half = TransformerEncoderLayer(D_MODEL, HEADS, FEEDFORWARD, dropout=0.0).to(dtype).eval()
    half.load_state_dict(ours.state_dict())
    for edge_index in (graphs.causal([6]), None):
        out = half(x.to(dtype), edge_index)
        assert out.dtype == dtype and torch.allclose(out.float(), ours(x, edge_index), atol=0.1)


@pytest.mark.slow
def test_second_derivatives():
    torch.manual_seed(0)
    layer = TransformerEncoderLayer(4, 2, 8, dropout=0.0).double()
    x = torch.randn(5, 4, dtype=torch.double, requires_grad=True)
    assert torch.autograd.gradgradcheck(lambda x: layer(x, graphs.causal([3, 2])), (x,))
    assert torch.autograd.gradgradcheck(lambda x: layer(x, batch=graphs.lengths_to_batch([3, 2])), (x,))


def test_compiles():
    torch.manual_seed(0)
    layer = TransformerEncoderLayer(D_MODEL, HEADS, FEEDFORWARD, dropout=0.0)
    x = torch.randn(6, D_MODEL)
    torch._dynamo.reset()
    compiled = torch.compile(layer, backend="aot_eager")
    for edge_index in (graphs.causal([6]), None):
        out = compiled(x, edge_index)
        assert torch.allclose(out, layer(x, edge_index), atol=1e-5)
        out.sum().backward()


def test_no_nodes_keep_the_graph_of_gradients():
    layer = TransformerEncoderLayer(D_MODEL, HEADS, FEEDFORWARD)
    out = layer(torch.randn(0, D_MODEL), torch.empty(2, 0, dtype=torch.long))
    assert out.shape == (0, D_MODEL) and out.grad_fn is not None
