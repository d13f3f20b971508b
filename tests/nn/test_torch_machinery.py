"""The layers under PyTorch's own machinery: torch.func transforms, forward-mode
AD, autocast, pickling, and torch.nn's positional arguments. The fast paths'
hand-written autograd Functions serve plain reverse mode only, so the layers
step aside from them elsewhere and must give the same numbers."""
import io
import warnings

import pytest
import torch
from torch.autograd import forward_ad

from graphseq.graphs import chain, lengths_to_batch
from graphseq.nn import (ChainGRU, ChainLSTM, ChainRNN, GATConv, MetricAttentionConv, SelfAttentionConv,
                         TransformerEncoderLayer)

EDGE_INDEX = torch.tensor([[1, 2, 0, 3, 4, 2, 3],
                           [0, 1, 1, 4, 3, 0, 2]])  # out of target order: the fast path sorts them
CHAINS, BATCH = chain([2, 4]), lengths_to_batch([2, 4])

LAYERS = {
    "gat": (lambda: GATConv(5, 3, heads=2), (EDGE_INDEX,)),
    "self-attention": (lambda: SelfAttentionConv(5, 1), (EDGE_INDEX,)),
    "metric": (lambda: MetricAttentionConv(5, 3, [4]).eval(), (EDGE_INDEX,)),
    "lstm": (lambda: ChainLSTM(5, 3), (CHAINS, BATCH)),
    "gru": (lambda: ChainGRU(5, 3, bidirectional=True), (CHAINS, BATCH)),
}


def output(layer, x, graph):
    out = layer(x, *graph)
    return out[0] if isinstance(out, tuple) else out


@pytest.fixture(params=list(LAYERS), ids=list(LAYERS))
def case(request):
    torch.manual_seed(0)
    make, graph = LAYERS[request.param]
    return make().double(), torch.randn(6, 5, dtype=torch.double), graph


def test_torch_func_grad_jacrev_and_vmap_agree_with_autograd(case):
    layer, x, graph = case
    params = {name: p.detach() for name, p in layer.named_parameters()}

    def loss(params, x):
        out = torch.func.functional_call(layer, params, (x, *graph))
        return (out[0] if isinstance(out, tuple) else out).pow(2).sum()

    grads = torch.func.grad(loss)(params, x)
    layer.zero_grad()
    output(layer, x, graph).pow(2).sum().backward()
    for name, p in layer.named_parameters():
        assert torch.allclose(grads[name], p.grad), name
    jacobian = torch.func.jacrev(lambda x: output(layer, x, graph))(x)
    expected = torch.autograd.functional.jacobian(lambda x: output(layer, x, graph), x)
    assert torch.allclose(jacobian, expected)
    batched = torch.func.vmap(lambda x: output(layer, x, graph))(torch.stack([x, 2 * x]))
    assert torch.allclose(batched[1], output(layer, 2 * x, graph))


def test_forward_mode_ad_gives_the_jacobian_vector_product(case):
    layer, x, graph = case
    tangent = torch.randn_like(x)
    with forward_ad.dual_level():
        jvp = forward_ad.unpack_dual(output(layer, forward_ad.make_dual(x, tangent), graph)).tangent
    _, expected = torch.autograd.functional.jvp(lambda x: output(layer, x, graph), x, tangent)
    assert torch.allclose(jvp, expected)


FULLY_CONNECTED = {
    "self-attention": (lambda: SelfAttentionConv(4, 2),
                       lambda: torch.nn.MultiheadAttention(4, 2, batch_first=True),
                       lambda mha, x, padding: mha(x, x, x, key_padding_mask=padding, need_weights=False)[0]),
    "transformer": (lambda: TransformerEncoderLayer(4, 2, 8, dropout=0.0),
                    lambda: torch.nn.TransformerEncoderLayer(4, 2, 8, dropout=0.0, batch_first=True),
                    lambda layer, x, padding: layer(x, src_key_padding_mask=padding)),
}


@pytest.fixture(params=list(FULLY_CONNECTED), ids=list(FULLY_CONNECTED))
def fully_connected(request):
    """A layer on its dense (fully connected) path and torch's layer with its weights."""
    torch.manual_seed(0)
    make, make_torch, run_torch = FULLY_CONNECTED[request.param]
    ours = make().double()
    theirs = make_torch().double()
    theirs.load_state_dict(ours.state_dict())
    return ours, theirs, run_torch


def test_forward_mode_ad_on_the_fully_connected_path(fully_connected):
    # Torch's fused CPU attention kernels have no forward-mode derivative.
    ours, theirs, run_torch = fully_connected
    x, batch = torch.randn(5, 4, dtype=torch.double), lengths_to_batch([3, 2])
    jacobian = torch.func.jacfwd(lambda x: ours(x, batch=batch))(x)
    expected = torch.autograd.functional.jacobian(lambda x: ours(x, batch=batch), x)
    assert torch.allclose(jacobian, expected)
    one_graph = torch.func.jacfwd(ours)(x)
    assert torch.allclose(one_graph, torch.func.jacrev(lambda x: run_torch(theirs, x[None], None)[0])(x))


def test_vmap_over_graphs_of_unequal_sizes_on_the_fully_connected_path(fully_connected):
    ours, theirs, run_torch = fully_connected
    xs, batch = torch.randn(3, 5, 4, dtype=torch.double), lengths_to_batch([3, 2])
    batched = torch.func.vmap(lambda x: ours(x, batch=batch))(xs)
    for x, out in zip(xs, batched):
        assert torch.allclose(out, ours(x, batch=batch))
        padded = torch.zeros(2, 3, 4, dtype=torch.double)
        padded[0], padded[1, :2] = x[:3], x[3:]
        padding = torch.tensor([[False, False, False], [False, False, True]])
        expected = run_torch(theirs, padded, padding)
        assert torch.allclose(out, torch.cat([expected[0], expected[1, :2]]))


def test_a_layer_pickles_after_a_forward_and_gives_the_same_outputs(case):
    layer, x, graph = case
    expected = output(layer, x, graph)  # keeps a graph for these edges
    buffer = io.BytesIO()
    torch.save(layer, buffer)
    buffer.seek(0)
    assert torch.allclose(output(torch.load(buffer, weights_only=False), x, graph), expected)


def test_a_call_under_a_transform_leaves_ordinary_calls_alone():
    conv, x = GATConv(5, 3), torch.randn(6, 5)
    torch.func.jacrev(lambda x: conv(x, EDGE_INDEX))(x)
    assert conv(x, EDGE_INDEX).shape == (6, 3)


def test_metric_attention_runs_under_cpu_autocast_as_the_message_path_does():
    torch.manual_seed(0)
    conv, x = MetricAttentionConv(5, 3, [4]).eval(), torch.randn(6, 5)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        fast = conv(x, EDGE_INDEX)
        conv.register_message_forward_hook(lambda *args: None)  # the message path
        assert torch.allclose(fast.float(), conv(x, EDGE_INDEX).float())


def test_metric_dropout_drops_the_same_pairs_on_both_paths():
    conv, x = MetricAttentionConv(5, 3, [4], dropout=0.5).train(), torch.randn(6, 5)
    torch.manual_seed(0)
    fast = conv(x, EDGE_INDEX)
    conv.register_message_forward_hook(lambda *args: None)
    torch.manual_seed(0)
    assert torch.allclose(fast, conv(x, EDGE_INDEX), atol=1e-6)


@pytest.mark.parametrize("ours,theirs,args", [
    (ChainGRU, torch.nn.GRU, (8, 5, 2, True, False, 0.5, True)),
    (ChainLSTM, torch.nn.LSTM, (8, 5, 2, True, False, 0.5, True, 3)),
    (ChainRNN, torch.nn.RNN, (8, 5, 2, "relu", True, False, 0.5, True)),
], ids=["gru", "lstm", "rnn"])
def test_positional_arguments_mean_what_they_mean_for_torch(ours, theirs, args):
    layer, peer = ours(*args), theirs(*args)
    assert (layer.num_layers, layer.dropout, layer.bidirectional) == (peer.num_layers, peer.dropout, peer.bidirectional)
    assert {name: p.shape for name, p in layer.named_parameters()} == \
        {name: p.shape for name, p in peer.named_parameters()}


# A graph of six nodes to trace or compile on, and one of seven (node 6 alone,
# reached by its self-loop only) that the trace or the compiled layer must follow.
SMALL = (torch.randn(6, 4, generator=torch.Generator().manual_seed(1)),
         torch.tensor([[0, 1, 2, 3, 3, 4, 0, 0], [1, 2, 3, 4, 4, 0, 0, 2]]),
         torch.randn(8, 2, generator=torch.Generator().manual_seed(2)))
OTHER = (torch.randn(7, 4, generator=torch.Generator().manual_seed(3)),
         torch.tensor([[0, 1, 2, 5, 5], [1, 2, 5, 4, 5]]),
         torch.randn(5, 2, generator=torch.Generator().manual_seed(4)))

TRACED = {
    "gat": (lambda: GATConv(4, 3, heads=2), 2),
    "gat-edge-features": (lambda: GATConv(4, 3, heads=2, edge_dim=2), 3),
    "self-attention": (lambda: SelfAttentionConv(4, 2), 2),
    "metric": (lambda: MetricAttentionConv(4, 3, [4]), 2),
}


@pytest.mark.parametrize("name", list(TRACED), ids=list(TRACED))
def test_jit_trace_follows_a_graph_of_another_size(name):
    """torch.jit.trace records the graph's preparation, self-loops made from
    the traced node count (not the example's six), and the message path;
    a graph kept from an ordinary call does not enter the trace."""
    torch.manual_seed(0)
    make, num_inputs = TRACED[name]
    layer = make().eval()
    layer(*SMALL[:num_inputs])  # keeps a graph for these edges
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        traced = torch.jit.trace(layer, SMALL[:num_inputs])
    for inputs in (SMALL[:num_inputs], OTHER[:num_inputs]):
        assert torch.allclose(traced(*inputs), layer(*inputs), atol=1e-6)


COMPILED = {
    "gat": (lambda: GATConv(4, 3, heads=2), 2),
    "gat-edge-features": (lambda: GATConv(4, 3, heads=2, edge_dim=2), 3),
    "self-attention": (lambda: SelfAttentionConv(4, 2), 2),
    "self-attention-dense": (lambda: SelfAttentionConv(4, 2), 1),
    "metric": (lambda: MetricAttentionConv(4, 3, [4]), 2),
    "transformer": (lambda: TransformerEncoderLayer(4, 2, 8, dropout=0.0), 2),
    "transformer-dense": (lambda: TransformerEncoderLayer(4, 2, 8, dropout=0.0), 1),
}


@pytest.mark.parametrize("dynamic", [True, False], ids=["dynamic", "static"])
@pytest.mark.parametrize("name", list(COMPILED), ids=list(COMPILED))
def test_compiles_in_one_graph_that_follows_the_graph_given(name, dynamic):
    """torch.compile(fullgraph=True) takes the graph's preparation (the
    self-loops, whose count depends on the data) into the compiled graph,
    so that outputs and input gradients equal eager ones on a graph of
    another size too. (aot_eager: the graph and its backward as inductor
    gets them, without a C++ compiler.)"""
    torch.manual_seed(0)
    make, num_inputs = COMPILED[name]
    layer = make().eval()
    torch._dynamo.reset()
    compiled = torch.compile(layer, dynamic=dynamic, fullgraph=True, backend="aot_eager")
    for x, *graph in (SMALL[:num_inputs], OTHER[:num_inputs]):
        results = []
        for run in (compiled, layer):
            inputs = x.clone().requires_grad_()
            out = run(inputs, *graph)
            out.sin().sum().backward()
            results.append((out, inputs.grad))
        (out, grad), (expected, expected_grad) = results
        assert torch.allclose(out, expected, atol=1e-5) and torch.allclose(grad, expected_grad, atol=1e-5)
