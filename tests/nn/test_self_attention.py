import pytest
import torch

from graphseq import graphs
from graphseq.nn import SelfAttentionConv

CHANNELS, HEADS = 8, 2


def copied_pair(bias=True):
    torch.manual_seed(0)
    ours = SelfAttentionConv(CHANNELS, HEADS, bias=bias)
    if bias:  # MultiheadAttention starts its biases at zero; make them count.
        torch.nn.init.normal_(ours.in_proj_bias)
        torch.nn.init.normal_(ours.out_proj.bias)
    theirs = torch.nn.MultiheadAttention(CHANNELS, HEADS, bias=bias, batch_first=True)
    theirs.load_state_dict(ours.state_dict())
    return ours.eval(), theirs.eval()


def reference(mha, x, mask=None, padding=None):
    return mha(x, x, x, attn_mask=mask, key_padding_mask=padding, need_weights=False)[0]


def graph_of_mask(mask: torch.Tensor, num_graphs: int) -> torch.Tensor:
    """The edges ``j -> i`` that a boolean attention mask (True = blocked) allows, per graph."""
    target, source = (~mask).nonzero().t()
    n = mask.size(0)
    return torch.cat([torch.stack([source + g * n, target + g * n]) for g in range(num_graphs)], dim=1)


def test_state_dict_matches_multihead_attention():
    for bias in (True, False):
        ours = SelfAttentionConv(CHANNELS, HEADS, bias=bias)
        theirs = torch.nn.MultiheadAttention(CHANNELS, HEADS, bias=bias, batch_first=True)
        assert {k: v.shape for k, v in ours.state_dict().items()} == \
            {k: v.shape for k, v in theirs.state_dict().items()}


def test_loads_multihead_attention_weights():
    theirs = torch.nn.MultiheadAttention(CHANNELS, HEADS, batch_first=True).eval()
    ours = SelfAttentionConv(CHANNELS, HEADS).eval()
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(1, 5, CHANNELS)
    assert torch.allclose(ours(x[0]), reference(theirs, x)[0], atol=1e-5)


@pytest.mark.parametrize("bias", [True, False])
def test_fully_connected_equals_multihead_attention(bias):
    ours, theirs = copied_pair(bias)
    x = torch.randn(3, 5, CHANNELS)
    out = ours(x.reshape(15, CHANNELS), batch=graphs.lengths_to_batch([5, 5, 5]))
    assert torch.allclose(out, reference(theirs, x).reshape(15, CHANNELS), atol=1e-5)


def test_graphs_of_unequal_sizes_equal_key_padding_mask():
    ours, theirs = copied_pair()
    sizes = [2, 6, 1, 4]
    x = torch.randn(sum(sizes), CHANNELS)
    padded = torch.zeros(len(sizes), max(sizes), CHANNELS)
    padding = torch.ones(len(sizes), max(sizes), dtype=torch.bool)
    for i, part in enumerate(x.split(sizes)):
        padded[i, :len(part)], padding[i, :len(part)] = part, False
    out = ours(x, batch=graphs.lengths_to_batch(sizes))
    assert torch.allclose(out, reference(theirs, padded, padding=padding)[~padding], atol=1e-5)
    per_graph = torch.cat([reference(theirs, part[None])[0] for part in x.split(sizes)])
    assert torch.allclose(out, per_graph, atol=1e-5)


def test_causal_graph_equals_causal_mask():
    ours, theirs = copied_pair()
    x = torch.randn(2, 6, CHANNELS)
    mask = torch.ones(6, 6, dtype=torch.bool).triu(1)
    out = ours(x.reshape(12, CHANNELS), graphs.causal([6, 6]))
    assert torch.allclose(out, reference(theirs, x, mask).reshape(12, CHANNELS), atol=1e-5)


def test_any_graph_equals_its_boolean_mask():
    ours, theirs = copied_pair()
    torch.manual_seed(1)
    mask = torch.rand(6, 6) < 0.6
    mask[torch.arange(6), torch.randint(0, 6, (6,))] = False  # Every node receives something.
    edge_index = graph_of_mask(mask, 2)
    edge_index = edge_index[:, torch.randperm(edge_index.size(1))]  # Order does not matter.
    x = torch.randn(2, 6, CHANNELS)
    out = ours(x.reshape(12, CHANNELS), edge_index)
    assert torch.allclose(out, reference(theirs, x, mask).reshape(12, CHANNELS), atol=1e-5)


def test_gradients_match_multihead_attention_on_a_masked_graph():
    ours, theirs = copied_pair()
    mask = torch.ones(5, 5, dtype=torch.bool).triu(1)
    mask[4, 0] = True
    x = torch.randn(1, 5, CHANNELS, requires_grad=True)
    x_ours = x.detach()[0].clone().requires_grad_()
    ours(x_ours, graph_of_mask(mask, 1)).square().sum().backward()
    reference(theirs, x, mask).square().sum().backward()
    assert torch.allclose(x_ours.grad, x.grad[0], atol=1e-5)
    for (name, p), q in zip(ours.named_parameters(), theirs.parameters()):
        assert torch.allclose(p.grad, q.grad, atol=1e-5), name


def test_dense_and_edge_wise_paths_give_the_same_numbers():
    torch.manual_seed(0)
    conv = SelfAttentionConv(CHANNELS, HEADS)
    sizes = [3, 7, 1, 5]
    x = torch.randn(sum(sizes), CHANNELS, requires_grad=True)
    dense = conv(x, batch=graphs.lengths_to_batch(sizes))
    (grad_dense,) = torch.autograd.grad(dense.square().sum(), x)
    sparse = conv(x, graphs.fully_connected(sizes))
    (grad_sparse,) = torch.autograd.grad(sparse.square().sum(), x)
    assert torch.allclose(dense, sparse, atol=1e-5)
    assert torch.allclose(grad_dense, grad_sparse, atol=1e-5)


def test_fused_and_message_paths_give_the_same_numbers(monkeypatch):
    from graphseq.nn.attention import AttentionConv
    ours, _ = copied_pair()
    ours.dropout = 0.5
    ours.train()
    torch.manual_seed(1)
    edge_index = graph_of_mask(torch.rand(6, 6) < 0.5, 2)
    edge_index = edge_index[:, torch.randperm(edge_index.size(1))]
    x = torch.randn(12, CHANNELS, requires_grad=True)
    results = []
    for fused in (True, False):
        if not fused:
            monkeypatch.setattr(AttentionConv, "use_fused_path", lambda self, value, graph: False)
        torch.manual_seed(2)
        out, (_, alpha) = ours(x, edge_index, return_attention_weights=True)
        results.append((out, alpha, *torch.autograd.grad(out.square().sum(), [x, ours.in_proj_weight])))
    for a, b in zip(*results):
        assert torch.allclose(a, b, atol=1e-5)


def test_node_without_incoming_edges_gets_zero_attention_output():
    ours, _ = copied_pair()
    edge_index = torch.tensor([[0, 1, 2], [1, 2, 1]])  # Nodes 0 and 3 receive nothing.
    x = torch.randn(4, CHANNELS, requires_grad=True)
    out = ours(x, edge_index)
    assert not out.isnan().any()
    # Zero attention output, so the layer's output is out_proj applied to zero: its bias.
    assert torch.allclose(out[0], ours.out_proj.bias) and torch.allclose(out[3], ours.out_proj.bias)
    assert not torch.allclose(out[1], ours.out_proj.bias)
    out.sum().backward()
    assert not x.grad.isnan().any()


def test_empty_graph_in_batch_gives_no_nan():
    torch.manual_seed(0)
    conv = SelfAttentionConv(CHANNELS, HEADS)
    batch = torch.tensor([0, 0, 2, 2, 2])  # Graph 1 has no nodes.
    x = torch.randn(5, CHANNELS, requires_grad=True)
    out = conv(x, batch=batch)
    out.square().sum().backward()
    assert not out.isnan().any() and not x.grad.isnan().any()
    assert torch.allclose(out, conv(x, graphs.fully_connected([2, 0, 3])), atol=1e-5)


def test_attention_weights_follow_the_given_edges():
    ours, theirs = copied_pair()
    x = torch.randn(1, 4, CHANNELS)
    edge_index = graphs.fully_connected([4])
    shuffled = edge_index[:, torch.randperm(edge_index.size(1))]
    _, (edges, alpha) = ours(x[0], shuffled, return_attention_weights=True)
    assert torch.equal(edges, shuffled)
    _, weights = theirs(x, x, x, average_attn_weights=False)  # [1, heads, target, source]
    expected = weights[0][:, shuffled[1], shuffled[0]].t()
    assert torch.allclose(alpha, expected, atol=1e-5)


def test_attention_weights_without_edges_are_over_the_fully_connected_graph():
    conv = SelfAttentionConv(CHANNELS, HEADS).eval()
    x = torch.randn(5, CHANNELS)
    batch = graphs.lengths_to_batch([2, 3])
    out, (edges, alpha) = conv(x, batch=batch, return_attention_weights=True)
    assert torch.equal(edges, graphs.fully_connected([2, 3]))
    assert torch.allclose(torch.zeros(5, HEADS).index_add_(0, edges[1], alpha), torch.ones(5, HEADS))
    assert torch.allclose(out, conv(x, batch=batch), atol=1e-5)


def test_dropout_acts_only_in_training():
    torch.manual_seed(0)
    conv = SelfAttentionConv(CHANNELS, HEADS, dropout=0.5)
    x = torch.randn(6, CHANNELS)
    for edge_index in (None, graphs.fully_connected([6])):
        conv.eval()
        assert torch.allclose(conv(x, edge_index), conv(x, edge_index))
        conv.train()
        assert not torch.allclose(conv(x, edge_index), conv(x, edge_index))


def test_wrong_inputs_are_named():
    conv = SelfAttentionConv(CHANNELS, HEADS)
    with pytest.raises(ValueError, match="divisible"):
        SelfAttentionConv(7, 2)
    with pytest.raises(ValueError, match=rf"SelfAttentionConv expects x of shape \[num_nodes, {CHANNELS}\]"):
        conv(torch.randn(4, 3))
    with pytest.raises(ValueError, match="edge_index of shape"):
        conv(torch.randn(4, CHANNELS), torch.zeros(3, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="batch of shape"):
        conv(torch.randn(4, CHANNELS), batch=torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match="sorted batch"):
        conv(torch.randn(4, CHANNELS), batch=torch.tensor([0, 1, 0, 1]))
    with pytest.raises(TypeError, match="SelfAttentionConv expects batch to be a tensor, got list"):
        conv(torch.randn(4, CHANNELS), batch=[0, 0, 1, 1])
    with pytest.raises(ValueError, match="SelfAttentionConv expects x of dtype torch.float32, like its weights, "
                                         "got torch.float64"):
        conv(torch.randn(4, CHANNELS, dtype=torch.double))
    with pytest.raises(ValueError, match="SelfAttentionConv expects x_src of dtype torch.float32"):
        conv((torch.randn(3, CHANNELS, dtype=torch.double), torch.randn(4, CHANNELS)))


def test_repr():
    assert repr(SelfAttentionConv(16, 4)) == "SelfAttentionConv(16, num_heads=4)"


def cross_pair(kdim=3, vdim=5, bias=True):
    torch.manual_seed(0)
    ours = SelfAttentionConv(CHANNELS, HEADS, kdim=kdim, vdim=vdim, bias=bias)
    if bias:
        torch.nn.init.normal_(ours.in_proj_bias)
        torch.nn.init.normal_(ours.out_proj.bias)
    theirs = torch.nn.MultiheadAttention(CHANNELS, HEADS, kdim=kdim, vdim=vdim, bias=bias, batch_first=True)
    theirs.load_state_dict(ours.state_dict())
    return ours.eval(), theirs.eval()


def test_cross_attention_state_dict_matches_multihead_attention():
    for kdim, vdim in ((3, 5), (CHANNELS, CHANNELS), (4, 4)):
        ours = SelfAttentionConv(CHANNELS, HEADS, kdim=kdim, vdim=vdim)
        theirs = torch.nn.MultiheadAttention(CHANNELS, HEADS, kdim=kdim, vdim=vdim, batch_first=True)
        assert {k: v.shape for k, v in ours.state_dict().items()} == \
            {k: v.shape for k, v in theirs.state_dict().items()}


@pytest.mark.parametrize("kdim,vdim", [(3, 5), (CHANNELS, CHANNELS)])
def test_cross_attention_equals_multihead_attention(kdim, vdim):
    ours, theirs = cross_pair(kdim, vdim)
    query, key, value = torch.randn(3, 4, CHANNELS), torch.randn(3, 6, kdim), torch.randn(3, 6, vdim)
    sources = (key.reshape(18, kdim), value.reshape(18, vdim)) if kdim != vdim else key.reshape(18, kdim)
    if kdim == vdim:
        value = key
    batch = (graphs.lengths_to_batch([6, 6, 6]), graphs.lengths_to_batch([4, 4, 4]))
    out = ours((sources, query.reshape(12, CHANNELS)), batch=batch)
    expected = theirs(query, key, value, need_weights=False)[0]
    assert torch.allclose(out, expected.reshape(12, CHANNELS), atol=1e-5)


def test_cross_attention_between_graphs_of_unequal_sizes_equals_key_padding_mask():
    ours, theirs = cross_pair()
    sources, targets = [2, 5, 1], [3, 1, 4]
    key, value = torch.randn(sum(sources), 3), torch.randn(sum(sources), 5)
    query = torch.randn(sum(targets), CHANNELS)
    pad = lambda x, sizes: torch.nn.utils.rnn.pad_sequence(x.split(sizes), batch_first=True)
    padding = pad(torch.zeros(sum(sources), dtype=torch.bool), sources)
    padding = ~pad(torch.ones(sum(sources), dtype=torch.bool), sources)
    expected = theirs(pad(query, targets), pad(key, sources), pad(value, sources),
                      key_padding_mask=padding, need_weights=False)[0]
    real = pad(torch.ones(sum(targets), dtype=torch.bool), targets)
    batch = (graphs.lengths_to_batch(sources), graphs.lengths_to_batch(targets))
    out = ours(((key, value), query), batch=batch)
    assert torch.allclose(out, expected[real], atol=1e-5)
    # Along the bipartite fully connected edges: the same numbers and MHA's weights.
    edges = graphs.fully_connected_bipartite(sources, targets)
    out_edges, (returned, alpha) = ours(((key, value), query), edges, return_attention_weights=True)
    assert torch.allclose(out_edges, out, atol=1e-5) and torch.equal(returned, edges)
    _, (returned, alpha_dense) = ours(((key, value), query), batch=batch, return_attention_weights=True)
    assert torch.equal(returned, edges) and torch.allclose(alpha_dense, alpha, atol=1e-6)


def test_cross_attention_along_a_mask_with_gradients():
    ours, theirs = cross_pair()
    torch.manual_seed(1)
    mask = torch.rand(4, 6) < 0.5
    mask[:, 0] = False  # Every target sees something.
    target, source = (~mask).nonzero().t()
    query = torch.randn(1, 4, CHANNELS, requires_grad=True)
    key, value = torch.randn(1, 6, 3, requires_grad=True), torch.randn(1, 6, 5, requires_grad=True)
    theirs(query, key, value, attn_mask=mask, need_weights=False)[0].square().sum().backward()
    ours_inputs = [t.detach()[0].clone().requires_grad_() for t in (query, key, value)]
    q, k, v = ours_inputs
    ours(((k, v), q), torch.stack([source, target])).square().sum().backward()
    for a, b in zip(ours_inputs, (query, key, value)):
        assert torch.allclose(a.grad, b.grad[0], atol=1e-5)
    for (name, p), r in zip(ours.named_parameters(), theirs.parameters()):
        assert torch.allclose(p.grad, r.grad, atol=1e-5), name


def test_multihead_attentions_arguments_mean_the_same_positional_ones_too():
    """(embed_dim, num_heads, dropout, bias, add_bias_kv, add_zero_attn, kdim,
    vdim, batch_first, device, dtype)."""
    args = (CHANNELS, HEADS, 0.0, False, False, False, None, None, True, "cpu", torch.float64)
    ours, theirs = SelfAttentionConv(*args).eval(), torch.nn.MultiheadAttention(*args).eval()
    theirs.load_state_dict(ours.state_dict())
    x = torch.randn(1, 5, CHANNELS, dtype=torch.float64)
    assert ours.in_proj_weight.dtype == torch.float64 and ours.in_proj_bias is None
    assert torch.allclose(ours(x[0]), reference(theirs, x)[0])


def test_unimplemented_multihead_attention_options_are_refused_by_name():
    with pytest.raises(ValueError, match="SelfAttentionConv does not implement add_zero_attn=True"):
        SelfAttentionConv(CHANNELS, HEADS, add_zero_attn=True)
    with pytest.raises(ValueError, match="SelfAttentionConv does not implement add_bias_kv=True"):
        SelfAttentionConv(CHANNELS, HEADS, add_bias_kv=True)
    with pytest.raises(TypeError, match="SelfAttentionConv got unexpected keyword argument.*'batch_frist'"):
        SelfAttentionConv(CHANNELS, HEADS, batch_frist=True)
    with pytest.raises(ValueError, match=r"pass x=\(x_src, x_dst\)"):
        SelfAttentionConv(CHANNELS, HEADS, kdim=3)(torch.randn(4, CHANNELS))
    with pytest.raises(ValueError, match=r"x_src \(keys\) of shape \[num_nodes, 3\]"):
        SelfAttentionConv(CHANNELS, HEADS, kdim=3, vdim=5)(((torch.randn(4, 4), torch.randn(4, 5)),
                                                            torch.randn(2, CHANNELS)))


def test_message_hooks_switch_fully_connected_graphs_to_the_edges():
    conv = SelfAttentionConv(CHANNELS, HEADS).eval()
    x, batch = torch.randn(5, CHANNELS), graphs.lengths_to_batch([2, 3])
    dense = conv(x, batch=batch)
    messages = []
    conv.register_message_forward_hook(lambda module, inputs, out: messages.append(out))
    assert torch.allclose(conv(x, batch=batch), dense, atol=1e-5)
    assert messages[0].shape == (2 * 2 + 3 * 3, HEADS, CHANNELS // HEADS)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_on_cpu(dtype):
    ours, _ = copied_pair()
    x = torch.randn(6, CHANNELS)
    edge_index = graphs.causal([6])
    half = SelfAttentionConv(CHANNELS, HEADS).to(dtype).eval()
    half.load_state_dict(ours.state_dict())
    for edges in (edge_index, None):
        x_half = x.to(dtype).requires_grad_()
        out = half(x_half, edges)
        assert out.dtype == dtype and torch.allclose(out.float(), ours(x, edges), atol=0.05)
        out.float().sum().backward()
        assert x_half.grad.isfinite().all()


@pytest.mark.slow
def test_second_derivatives_on_the_edges():
    torch.manual_seed(0)
    conv = SelfAttentionConv(4, 2).double()
    edge_index = graphs.causal([3, 2])
    x = torch.randn(5, 4, dtype=torch.double, requires_grad=True)
    assert torch.autograd.gradgradcheck(lambda x: conv(x, edge_index), (x,))
    assert torch.autograd.gradgradcheck(lambda x: conv(x, batch=graphs.lengths_to_batch([3, 2])), (x,))


def test_compiles_on_both_paths():
    torch.manual_seed(0)
    conv = SelfAttentionConv(CHANNELS, HEADS)
    x, edge_index = torch.randn(6, CHANNELS), graphs.causal([6])
    torch._dynamo.reset()
    compiled = torch.compile(conv, backend="aot_eager")
    for edges in (edge_index, None):
        out = compiled(x, edges)
        assert torch.allclose(out, conv(x, edges), atol=1e-5)
        out.sum().backward()


def test_no_nodes_keep_the_graph_of_gradients():
    conv = SelfAttentionConv(CHANNELS, HEADS)
    for edges in (torch.empty(2, 0, dtype=torch.long), None):
        out = conv(torch.randn(0, CHANNELS), edges)
        assert out.shape == (0, CHANNELS) and out.grad_fn is not None
