import pytest
import torch
import torch_geometric.nn as pyg_nn
import torch_geometric.utils
from torch_geometric import EdgeIndex
from torch_geometric.utils import to_torch_coo_tensor, to_torch_csc_tensor, to_torch_csr_tensor

import graphseq.nn
from graphseq.nn import GATConv, SelfAttentionConv, TransformerEncoderLayer
from graphseq.nn.attention import AttentionConv

# A 6-node graph with a repeated edge (1 -> 0 twice), an existing self-loop
# (2 -> 2), edges out of target order and an isolated node (5).
EDGE_INDEX = torch.tensor([[1, 1, 2, 0, 3, 4, 2, 3],
                           [0, 0, 2, 1, 1, 3, 4, 2]])


def copied_pair(in_channels=5, out_channels=4, **kwargs):
    torch.manual_seed(0)
    ours = GATConv(in_channels, out_channels, **kwargs)
    theirs = pyg_nn.GATConv(in_channels, out_channels, **kwargs)
    theirs.load_state_dict(ours.state_dict())
    if ours.bias is not None:  # PyG starts its bias at zero; make it count.
        for module in (ours, theirs):
            torch.nn.init.constant_(module.bias, 0.1)
    return ours.eval(), theirs.eval()


def assert_same_gradients(ours, theirs, ours_inputs, theirs_inputs, atol=1e-5):
    for (name, p), q in zip(ours.named_parameters(), theirs.parameters()):
        assert torch.allclose(p.grad, q.grad, atol=atol), name
    for a, b in zip(ours_inputs, theirs_inputs):
        assert torch.allclose(a.grad, b.grad, atol=atol)


def leaf(t):
    return None if t is None else t.detach().clone().requires_grad_()


def run_both(ours, theirs, x, edge_index, edge_attr=None, **kwargs):
    """Outputs, attention weights and gradients (of the parameters, the
    features and the edge features) of both layers on the same inputs."""
    results = []
    for layer in (ours, theirs):
        x_in = tuple(leaf(t) for t in x) if isinstance(x, tuple) else leaf(x)
        attr_in = leaf(edge_attr)
        out, (edges, alpha) = layer(x_in, edge_index, attr_in, return_attention_weights=True, **kwargs)
        (out.square().sum() + alpha.square().sum()).backward()
        leaves = [t for t in (*(x_in if isinstance(x_in, tuple) else (x_in,)), attr_in) if t is not None]
        results.append((out, edges, alpha, leaves))
    (out, edges, alpha, leaves), (ref, ref_edges, ref_alpha, ref_leaves) = results
    assert torch.allclose(out, ref, atol=1e-5)
    assert torch.equal(edges, ref_edges)
    assert torch.allclose(alpha, ref_alpha, atol=1e-5)
    assert_same_gradients(ours, theirs, leaves, ref_leaves)


@pytest.mark.parametrize("heads,concat,add_self_loops,bias,residual", [
    (1, True, True, True, False),
    (3, True, True, True, True),
    (3, False, True, True, True),
    (2, True, False, False, False),
    (4, False, False, True, True),
])
def test_equals_pyg_gatconv_with_copied_weights(heads, concat, add_self_loops, bias, residual):
    ours, theirs = copied_pair(heads=heads, concat=concat, add_self_loops=add_self_loops,
                               bias=bias, residual=residual, negative_slope=0.1, dropout=0.5)
    run_both(ours, theirs, torch.randn(6, 5), EDGE_INDEX)


@pytest.mark.parametrize("edge_dim,fill_value", [(1, 0.5), (1, "mean"), (3, "add"), (3, "max"),
                                                 (3, torch.tensor([1.0, -1.0, 0.5]))])
def test_edge_features_enter_the_score_as_in_pyg(edge_dim, fill_value):
    ours, theirs = copied_pair(heads=2, edge_dim=edge_dim, fill_value=fill_value)
    edge_attr = torch.randn(EDGE_INDEX.size(1), edge_dim).squeeze(-1)
    run_both(ours, theirs, torch.randn(6, 5), EDGE_INDEX.flip(1), edge_attr)
    out = ours(torch.randn(6, 5), EDGE_INDEX, edge_attr)  # PyG's order: edge_attr third.
    assert out.shape == (6, 8)


def test_edge_features_change_the_output():
    ours, _ = copied_pair(heads=2, edge_dim=3)
    x, edge_attr = torch.randn(6, 5), torch.randn(EDGE_INDEX.size(1), 3)
    assert not torch.allclose(ours(x, EDGE_INDEX, edge_attr), ours(x, EDGE_INDEX, 2 * edge_attr))


@pytest.mark.parametrize("shared", [False, True])
def test_bipartite_inputs_equal_pyg(shared):
    in_channels = 5 if shared else (5, 3)
    ours, theirs = copied_pair(in_channels, 4, heads=2, residual=True)
    edge_index = torch.tensor([[0, 1, 2, 3, 4, 6, 6], [0, 0, 1, 1, 2, 3, 0]])  # 7 sources, 4 targets
    x_dst = torch.randn(4, 5 if shared else 3)
    run_both(ours, theirs, (torch.randn(7, 5), x_dst), edge_index)
    run_both(ours, theirs, (torch.randn(7, 5), x_dst), edge_index, size=(7, 4))
    # Without target features, the size says how many targets there are.
    x_src = torch.randn(7, 5)
    assert torch.allclose(ours((x_src, None), edge_index, size=(7, 4)),
                          theirs((x_src, None), edge_index, size=(7, 4)), atol=1e-5)


def test_bipartite_layer_on_one_node_set_equals_pyg():
    ours, theirs = copied_pair((5, 5), 4, heads=2)
    run_both(ours, theirs, torch.randn(6, 5), EDGE_INDEX)


@pytest.mark.parametrize("to_sparse", [to_torch_csr_tensor, to_torch_coo_tensor])
def test_sparse_adjacency_equals_pyg(to_sparse):
    ours, theirs = copied_pair(heads=2)
    x = torch.randn(6, 5)
    adj_t = to_sparse(EDGE_INDEX.flip(0), size=(6, 6))  # rows = targets
    out, (adj, alpha) = ours(x, adj_t, return_attention_weights=True)
    ref, (ref_adj, ref_alpha) = theirs(x, adj_t, return_attention_weights=True)
    assert torch.allclose(out, ref, atol=1e-5) and torch.allclose(alpha, ref_alpha, atol=1e-5)
    assert adj.layout == ref_adj.layout and torch.allclose(adj.to_dense(), ref_adj.to_dense(), atol=1e-5)
    # The same graph as an edge_index (a sparse matrix holds the repeated edge once).
    assert torch.allclose(out, ours(x, EDGE_INDEX.unique(dim=1)), atol=1e-5)


def test_csc_adjacency_equals_csr():
    # PyG's layer refuses a CSC adjacency when it adds self-loops; ours reads it as CSR.
    ours, _ = copied_pair(heads=2)
    x = torch.randn(6, 5)
    csr = ours(x, to_torch_csr_tensor(EDGE_INDEX.flip(0), size=(6, 6)))
    assert torch.allclose(ours(x, to_torch_csc_tensor(EDGE_INDEX.flip(0), size=(6, 6))), csr, atol=1e-6)


def test_edge_index_object_equals_a_plain_tensor():
    ours, _ = copied_pair(heads=2)
    x = torch.randn(6, 5)
    edge_index = EdgeIndex(EDGE_INDEX, sparse_size=(6, 6))
    assert torch.allclose(ours(x, edge_index), ours(x, EDGE_INDEX), atol=1e-6)


def force_message_path(monkeypatch):
    monkeypatch.setattr(AttentionConv, "use_fused_path", lambda self, value, graph: False)


@pytest.mark.parametrize("options", [dict(heads=3), dict(heads=2, edge_dim=2), dict(heads=2, concat=False)])
def test_fused_and_message_paths_give_the_same_numbers_in_the_users_order(options, monkeypatch):
    ours, _ = copied_pair(heads=options.pop("heads"), dropout=0.5, **options)
    ours.train()
    x = torch.randn(6, 5, requires_grad=True)
    edge_attr = torch.randn(EDGE_INDEX.size(1), 2)
    results = []
    for fused in (True, False):
        if not fused:
            force_message_path(monkeypatch)
        torch.manual_seed(3)  # Same seed: the same edges dropped on both paths.
        out, (edges, alpha) = ours(x, EDGE_INDEX, edge_attr, return_attention_weights=True)
        grads = torch.autograd.grad((out.square().sum() + alpha.square().sum()), [x, ours.att_src])
        results.append((out, edges, alpha, *grads))
    for a, b in zip(*results):
        assert torch.allclose(a, b, atol=1e-5)


class NoisyGAT(GATConv):
    """A subclass whose score draws random numbers per edge."""

    def edge_update(self, alpha_j, alpha_i, edge_attr, index, ptr, dim_size):
        return super().edge_update(alpha_j + torch.rand_like(alpha_j), alpha_i, edge_attr, index, ptr, dim_size)


def test_a_score_that_draws_random_numbers_gives_the_same_numbers_on_both_paths(monkeypatch):
    torch.manual_seed(0)
    conv, x = NoisyGAT(5, 4, heads=2), torch.randn(6, 5)
    results = []
    for fused in (True, False):
        if not fused:
            force_message_path(monkeypatch)
        torch.manual_seed(3)
        results.append(conv(x, EDGE_INDEX, return_attention_weights=True)[1][1])
    assert torch.allclose(*results, atol=1e-6)
    torch.manual_seed(4)
    assert not torch.allclose(results[0], conv(x, EDGE_INDEX, return_attention_weights=True)[1][1], atol=1e-3)


def test_training_with_dropout_equals_pyg_for_the_same_seed():
    ours, theirs = copied_pair(heads=3, dropout=0.5)
    ours.train(), theirs.train()
    x = torch.randn(6, 5)
    torch.manual_seed(7)
    out, (_, alpha) = ours(x, EDGE_INDEX, return_attention_weights=True)
    torch.manual_seed(7)
    ref, (_, ref_alpha) = theirs(x, EDGE_INDEX, return_attention_weights=True)
    assert torch.allclose(out, ref, atol=1e-5) and torch.allclose(alpha, ref_alpha, atol=1e-5)
    assert (alpha == 0).any()  # Dropout did act.


def test_fused_path_runs_when_nothing_needs_the_messages(monkeypatch):
    ours, _ = copied_pair(heads=2)
    calls = []
    monkeypatch.setattr(GATConv, "message", lambda self, *args, **kwargs: calls.append(1))
    ours(torch.randn(6, 5), EDGE_INDEX)
    assert calls == []


def test_message_hook_sees_the_messages_pyg_makes():
    ours, theirs = copied_pair(heads=2)
    x = torch.randn(6, 5)
    seen = {}
    for name, layer in (("ours", ours), ("theirs", theirs)):
        layer.register_message_forward_hook(lambda module, inputs, out, name=name: seen.setdefault(name, out))
        layer(x, EDGE_INDEX)
    assert seen["ours"].shape == (EDGE_INDEX.size(1) + 6 - 1, 2, 4)  # One self-loop was replaced.
    assert torch.allclose(seen["ours"], seen["theirs"], atol=1e-6)


def test_hooks_can_change_messages_and_alpha():
    ours, theirs = copied_pair(heads=2)
    x = torch.randn(6, 5)
    for layer in (ours, theirs):
        layer.register_message_forward_hook(lambda module, inputs, out: 2 * out)
        layer.register_edge_update_forward_hook(lambda module, inputs, alpha: alpha.flip(0))
    assert torch.allclose(ours(x, EDGE_INDEX), theirs(x, EDGE_INDEX), atol=1e-5)


def test_decomposed_layers_give_the_same_numbers():
    ours, _ = copied_pair(heads=2, out_channels=6)
    x = torch.randn(6, 5)
    expected = ours(x, EDGE_INDEX)
    ours.decomposed_layers = 3
    assert torch.allclose(ours(x, EDGE_INDEX), expected, atol=1e-6)


class TwoLayerGAT(torch.nn.Module):
    def __init__(self, conv):
        super().__init__()
        self.conv1 = conv(5, 4, heads=2)
        self.conv2 = conv(8, 3, heads=1)

    def forward(self, x, edge_index):
        return self.conv2(torch.relu(self.conv1(x, edge_index)), edge_index)


def explainer_pair():
    torch.manual_seed(0)
    ours, theirs = TwoLayerGAT(GATConv), TwoLayerGAT(pyg_nn.GATConv)
    theirs.load_state_dict(ours.state_dict())
    return ours.eval(), theirs.eval()


def explain(model, algorithm, x, edge_index, **config):
    from torch_geometric.explain import Explainer
    explainer = Explainer(model, algorithm, explanation_type="model",
                          model_config=dict(mode="multiclass_classification", task_level="node",
                                            return_type="raw"), **config)
    torch.manual_seed(0)
    return explainer(x, edge_index, index=2)


def test_gnn_explainer_gives_pyg_masks():
    from torch_geometric.explain import GNNExplainer
    ours, theirs = explainer_pair()
    x = torch.randn(6, 5)
    masks = [explain(model, GNNExplainer(epochs=30), x, EDGE_INDEX, edge_mask_type="object",
                     node_mask_type="attributes") for model in (ours, theirs)]
    assert torch.allclose(masks[0].edge_mask, masks[1].edge_mask, atol=1e-5)
    assert torch.allclose(masks[0].node_mask, masks[1].node_mask, atol=1e-5)
    # The gradient lands on edges that feed node 2 within two hops, and only there.
    assert (masks[0].edge_mask[EDGE_INDEX[1] == 5] == 0).all()


def test_attention_explainer_gives_pyg_attributions():
    from torch_geometric.explain import AttentionExplainer
    ours, theirs = explainer_pair()
    x = torch.randn(6, 5)
    masks = [explain(model, AttentionExplainer(), x, EDGE_INDEX, edge_mask_type="object")
             for model in (ours, theirs)]
    assert masks[0].edge_mask.abs().sum() > 0
    assert torch.allclose(masks[0].edge_mask, masks[1].edge_mask, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_on_cpu(dtype):
    ours, _ = copied_pair(heads=2, edge_dim=2)
    x, edge_attr = torch.randn(6, 5), torch.randn(EDGE_INDEX.size(1), 2)
    expected = ours(x, EDGE_INDEX, edge_attr)
    half = GATConv(5, 4, heads=2, edge_dim=2).to(dtype).eval()
    half.load_state_dict(ours.state_dict())
    x_half = x.to(dtype).requires_grad_()
    out = half(x_half, EDGE_INDEX, edge_attr.to(dtype))
    assert out.dtype == dtype and torch.allclose(out.float(), expected, atol=0.05)
    out.float().sum().backward()
    assert x_half.grad.dtype == dtype and x_half.grad.isfinite().all()


@pytest.mark.parametrize("fused", [True, False])
def test_second_derivatives_equal_pyg(fused, monkeypatch):
    if not fused:
        force_message_path(monkeypatch)
    ours, theirs = copied_pair(heads=2, edge_dim=2)
    ours.double(), theirs.double()
    x, edge_attr = torch.randn(6, 5, dtype=torch.double), torch.randn(EDGE_INDEX.size(1), 2, dtype=torch.double)
    penalties = []
    for layer in (ours, theirs):
        x_in = x.clone().requires_grad_()
        (grad,) = torch.autograd.grad(layer(x_in, EDGE_INDEX, edge_attr).square().sum(), x_in, create_graph=True)
        penalties.append(torch.autograd.grad(grad.square().sum(), [x_in, layer.att_src, layer.lin.weight]))
    for a, b in zip(*penalties):
        assert torch.allclose(a, b, atol=1e-8)
    assert torch.autograd.gradgradcheck(lambda x_in: ours(x_in, EDGE_INDEX, edge_attr),
                                        (x.clone().requires_grad_(),))


@pytest.mark.slow
def test_compiles_with_no_more_graph_breaks_than_pyg():
    torch.manual_seed(0)
    x, edge_index = torch.randn(30, 5), torch.randint(0, 30, (2, 120))
    edge_attr = torch.randn(120, 2)
    for options, inputs in ((dict(), (x, edge_index)), (dict(edge_dim=2), (x, edge_index, edge_attr))):
        counts = {}
        for name, conv in (("ours", GATConv), ("theirs", pyg_nn.GATConv)):
            torch._dynamo.reset()
            counts[name] = torch._dynamo.explain(conv(5, 4, heads=3, **options))(*inputs).graph_break_count
        # Where self-loops are removed (a size that depends on the data), as in PyG's; with edge features
        # one more, for their selection. fullgraph=True has none (tests/nn/test_torch_machinery.py).
        assert counts["ours"] <= counts["theirs"] + ("edge_dim" in options), (options, counts)
    torch._dynamo.reset()
    layer = GATConv(5, 4, heads=3)
    out = torch.compile(layer)(x, edge_index)
    assert torch.allclose(out, layer(x, edge_index), atol=1e-5)
    out.sum().backward()
    assert layer.att_src.grad is not None


def test_no_nodes_keep_the_graph_of_gradients():
    for bias in (True, False):
        conv = GATConv(8, 4, heads=2, bias=bias)
        out = conv(torch.randn(0, 8), torch.empty(2, 0, dtype=torch.long))
        assert out.shape == (0, 8) and out.grad_fn is not None
        out.sum().backward()
        assert conv.lin.weight.grad is not None


def test_isolated_node_without_self_loops_gets_only_bias():
    ours, _ = copied_pair(heads=2, add_self_loops=False)
    torch.nn.init.normal_(ours.bias)
    out = ours(torch.randn(6, 5), EDGE_INDEX)
    assert torch.allclose(out[5], ours.bias)


def test_sparse_features_give_the_dense_result_and_gradients():
    conv = GATConv(5, 4, heads=2, residual=True)
    x = torch.randn(6, 5) * (torch.rand(6, 5) < 0.4)
    out = conv(x, EDGE_INDEX)
    out.square().sum().backward()
    dense_grads = [p.grad.clone() for p in conv.parameters()]
    conv.zero_grad()
    for sparse_x in (x.to_sparse_csr(), x.to_sparse()):
        assert torch.allclose(conv(sparse_x, EDGE_INDEX), out, atol=1e-6)
    conv(x.to_sparse_csr(), EDGE_INDEX).square().sum().backward()
    for p, grad in zip(conv.parameters(), dense_grads):
        assert torch.allclose(p.grad, grad, atol=1e-5)


def test_attention_sums_to_one_per_node():
    conv = GATConv(5, 4, heads=3).eval()
    _, (edges, alpha) = conv(torch.randn(6, 5), EDGE_INDEX, return_attention_weights=True)
    totals = torch.zeros(6, 3).index_add_(0, edges[1], alpha)
    assert torch.allclose(totals, torch.ones(6, 3))


def test_graph_is_kept_while_the_same_edges_come_back():
    conv = GATConv(5, 4, heads=2).eval()
    x, edge_index = torch.randn(6, 5), EDGE_INDEX.clone()
    conv(x, edge_index)
    graph = conv._graph_cache[2]
    conv(x, edge_index)
    assert conv._graph_cache[2] is graph
    edge_index[0, 0] = 3  # Changed in place: made again.
    changed = conv(x, edge_index)
    assert conv._graph_cache[2] is not graph
    assert torch.allclose(changed, conv(x, edge_index.clone()), atol=1e-6)
    assert not torch.allclose(changed, conv(x, EDGE_INDEX), atol=1e-6)


@pytest.mark.parametrize("make", [
    lambda: GATConv(5, 4, heads=2),
    lambda: SelfAttentionConv(5, 1),
    lambda: TransformerEncoderLayer(5, 1, 8),
    lambda: graphseq.nn.MetricAttentionConv(5, 4, [6]),  # not this file's example below
], ids=["gat", "self-attention", "transformer", "metric"])
def test_runs_under_inference_mode_and_keeps_nothing_for_inference_tensors(make):
    """An inference tensor counts no in-place edits, so the graph made from it
    is not kept: an edit under inference mode is seen."""
    torch.manual_seed(0)
    conv, x = make().eval(), torch.randn(6, 5)
    with torch.no_grad():
        expected, other = conv(x, EDGE_INDEX), conv(x, EDGE_INDEX.flip(0))
    with torch.inference_mode():
        edge_index = EDGE_INDEX.clone()
        assert torch.allclose(conv(x, edge_index), expected, atol=1e-6)
        edge_index.copy_(EDGE_INDEX.flip(0))
        assert torch.allclose(conv(x, edge_index), other, atol=1e-6)


def test_the_same_edges_serve_inside_and_outside_inference_mode():
    """Validation under inference mode between training steps, on one graph."""
    conv, x = GATConv(5, 4, heads=2), torch.randn(6, 5)
    edge_index = EDGE_INDEX.clone()
    expected = conv(x, edge_index).detach()
    with torch.inference_mode():
        assert torch.allclose(conv(x, edge_index), expected)
    conv(x, edge_index).sum().backward()
    assert conv.att_src.grad is not None


def test_wrong_inputs_are_named():
    conv = GATConv(5, 4)
    with pytest.raises(ValueError, match=r"GATConv expects x of shape \[num_nodes, 5\], got \[6, 3\]"):
        conv(torch.randn(6, 3), EDGE_INDEX)
    with pytest.raises(ValueError, match=r"GATConv expects edge_index of shape \[2, num_edges\]"):
        conv(torch.randn(6, 5), EDGE_INDEX.t())
    with pytest.raises(ValueError, match="GATConv: edge_index refers to node 4, but there are only 4 nodes"):
        conv(torch.randn(4, 5), EDGE_INDEX)
    with pytest.raises(ValueError, match="GATConv: edge_index holds a negative node index"):
        conv(torch.randn(6, 5), torch.tensor([[0, -1], [1, 2]]))
    with pytest.raises(ValueError, match="GATConv: size gives 5 source nodes, but the features hold 6"):
        conv(torch.randn(6, 5), EDGE_INDEX, size=(5, 6))
    with pytest.raises(ValueError, match=r"GATConv expects edge_attr with 2 features per edge"):
        GATConv(5, 4, edge_dim=2)(torch.randn(6, 5), EDGE_INDEX, torch.randn(8, 3))
    with pytest.raises(ValueError, match=r"GATConv expects x_dst of shape \[num_nodes, 3\]"):
        GATConv((5, 3), 4)((torch.randn(6, 5), torch.randn(6, 5)), EDGE_INDEX)


def test_unknown_keyword_arguments_name_the_layer():
    with pytest.raises(TypeError, match="GATConv got unexpected keyword argument.*'hedas'"):
        GATConv(5, 4, hedas=2)
    with pytest.raises(ValueError, match="GATConv sums"):
        GATConv(5, 4, aggr="max")


def test_repr():
    assert repr(GATConv(16, 8, heads=4)) == "GATConv(16, 8, heads=4)"
    assert repr(GATConv((16, 4), 8)) == "GATConv((16, 4), 8, heads=1)"


def test_value_dropout_acts_only_in_training():
    torch.manual_seed(0)
    conv = GATConv(5, 4, heads=2, value_dropout=0.5)
    reference = GATConv(5, 4, heads=2)
    reference.load_state_dict(conv.state_dict())
    x = torch.randn(6, 5)
    assert torch.allclose(conv.eval()(x, EDGE_INDEX), reference.eval()(x, EDGE_INDEX))
    assert not torch.allclose(conv.train()(x, EDGE_INDEX), reference.train()(x, EDGE_INDEX))


class AbsDiffAttention(AttentionConv):
    """The example of AttentionConv's docstring: a third score."""

    def __init__(self, channels, heads=1):
        super().__init__(heads)
        self.metric = torch.nn.Linear(channels, heads)

    def forward(self, x, edge_index):
        graph = self.attention_graph(edge_index, (x.size(0), x.size(0)))
        value = x.unsqueeze(1).expand(-1, self.heads, -1)  # [num_nodes, heads, channels]
        out, _ = self.attend(graph, value, x=x)
        return out.mean(dim=1)

    def edge_update(self, x_i, x_j, index, ptr, dim_size):
        score = self.metric((x_i - x_j).abs())  # [num_edges, heads]
        return self.normalize(score, index, ptr, dim_size)


def test_a_third_score_is_one_edge_update(monkeypatch):
    torch.manual_seed(0)
    conv = AbsDiffAttention(5, heads=2)
    x = torch.randn(6, 5)
    # By hand: softmax over each target's incoming edges of the metric score, then the weighted sum.
    score = conv.metric((x[EDGE_INDEX[1]] - x[EDGE_INDEX[0]]).abs())
    expected = torch.zeros(6, 2, 5)
    for target in range(6):
        edges = (EDGE_INDEX[1] == target).nonzero().view(-1)
        if edges.numel():
            alpha = score[edges].softmax(dim=0)  # [edges, heads]
            expected[target] = (alpha.unsqueeze(-1) * x[EDGE_INDEX[0, edges]].unsqueeze(1)).sum(0)
    fused = conv(x, EDGE_INDEX)
    assert torch.allclose(fused, expected.mean(dim=1), atol=1e-6)
    messages = []
    conv.register_message_forward_hook(lambda module, inputs, out: messages.append(out))
    assert torch.allclose(conv(x, EDGE_INDEX), fused, atol=1e-6)
    assert messages[0].shape == (EDGE_INDEX.size(1), 2, 5)


class BiasedAttention(AttentionConv):
    """A score that reads a tensor of one value per edge (a learned bias per
    edge, as Graphormer's spatial bias), under a name of its own."""

    def __init__(self, channels):
        super().__init__(heads=1)
        self.query = torch.nn.Linear(channels, channels)

    def forward(self, x, edge_index, edge_bias, as_score_input=False):
        graph = self.attention_graph(edge_index, (x.size(0), x.size(0)))
        if as_score_input:  # The mistake the fused path refuses.
            out, _ = self.attend(graph, x.unsqueeze(1), q=self.query(x), k=x, edge_bias=edge_bias)
        else:
            out, _ = self.attend(graph, x.unsqueeze(1), q=self.query(x), k=x, edge_inputs={"edge_bias": edge_bias})
        return out[:, 0]

    def edge_update(self, q_i, k_j, edge_bias, index, ptr, dim_size):
        score = (q_i * k_j).sum(-1, keepdim=True) + edge_bias.view(-1, 1)  # [num_edges, 1]
        return self.normalize(score, index, ptr, dim_size)


def test_per_edge_inputs_follow_the_edges_on_both_paths(monkeypatch):
    torch.manual_seed(0)
    conv, x = BiasedAttention(5).double(), torch.randn(6, 5, dtype=torch.double)
    edge_bias = torch.randn(EDGE_INDEX.size(1), dtype=torch.double)  # EDGE_INDEX is out of target order.
    source, target = EDGE_INDEX
    score = (conv.query(x)[target] * x[source]).sum(-1) + edge_bias
    alpha = torch_geometric.utils.softmax(score, target, num_nodes=6)
    expected = torch.zeros(6, 5, dtype=torch.double).index_add_(0, target, alpha[:, None] * x[source])
    assert torch.allclose(conv(x, EDGE_INDEX, edge_bias), expected)
    force_message_path(monkeypatch)
    assert torch.allclose(conv(x, EDGE_INDEX, edge_bias), expected)


def test_a_per_edge_tensor_outside_edge_inputs_is_refused_on_the_fused_path():
    conv, x = BiasedAttention(5), torch.randn(6, 5)
    with pytest.raises(ValueError, match=r"BiasedAttention.attend got 'edge_bias' with one row per edge \(8\); "
                                         r"pass per-edge tensors in edge_inputs"):
        conv(x, EDGE_INDEX, torch.randn(8), as_score_input=True)
    with pytest.raises(ValueError, match=r"expects edge_inputs\['edge_bias'\] to be a tensor with one row per edge "
                                         r"\(num_edges=8"):
        conv(x, EDGE_INDEX, torch.randn(7))


def test_lazy_in_channels_with_sparse_features_equal_dense():
    torch.manual_seed(0)
    x = torch.randn(6, 5) * (torch.rand(6, 5) < 0.4)
    for sparse_x in (x.to_sparse_csr(), x.to_sparse()):
        conv = GATConv(-1, 4, heads=2, residual=True)
        out = conv(sparse_x, EDGE_INDEX)
        assert conv.lin.weight.shape == (8, 5) and conv.res.weight.shape == (8, 5)
        assert torch.allclose(out, conv(x, EDGE_INDEX), atol=1e-6)


def test_lazy_edge_dim_is_inferred_from_the_first_edge_features():
    torch.manual_seed(0)
    lazy = GATConv(5, 4, heads=2, edge_dim=-1)
    x, edge_attr = torch.randn(6, 5), torch.randn(EDGE_INDEX.size(1), 3)
    out = lazy(x, EDGE_INDEX, edge_attr)
    assert lazy.lin_edge.weight.shape == (8, 3)
    ours, theirs = copied_pair(heads=2, edge_dim=3)
    for layer in (ours, theirs):
        layer.load_state_dict(lazy.state_dict())
    assert torch.allclose(out, ours(x, EDGE_INDEX, edge_attr)) and torch.allclose(out, theirs(x, EDGE_INDEX, edge_attr))
    with pytest.raises(ValueError, match=r"GATConv needs edge_dim to be a whole number >= 1 \(or -1, inferred\), got 0"):
        GATConv(5, 4, edge_dim=0)


def test_sparse_features_that_require_grad_get_the_dense_gradient():
    torch.manual_seed(0)
    conv = GATConv(5, 4, heads=2, residual=True).double()
    x = torch.randn(6, 5, dtype=torch.double) * (torch.rand(6, 5) < 0.4)
    dense_x = x.clone().requires_grad_()
    (expected,) = torch.autograd.grad(conv(dense_x, EDGE_INDEX).square().sum(), dense_x)
    for sparse_x in (x.to_sparse_csr().requires_grad_(), x.to_sparse().requires_grad_()):
        (grad,) = torch.autograd.grad(conv(sparse_x, EDGE_INDEX).square().sum(), sparse_x)
        assert torch.allclose(grad.to_dense(), expected)


@pytest.mark.parametrize("fill_value", ["mean", "max"])
def test_bipartite_loop_features_reduce_over_every_target(fill_value):
    # 3 sources, 5 targets: edges into targets 3 and 4, which get no loop, are valid.
    torch.manual_seed(0)
    conv = GATConv((3, 4), 2, edge_dim=2, fill_value=fill_value).double()
    x_src, x_dst = torch.randn(3, 3, dtype=torch.double), torch.randn(5, 4, dtype=torch.double)
    edge_index = torch.tensor([[0, 1, 2, 2, 0], [4, 3, 0, 0, 1]])
    edge_attr = torch.randn(5, 2, dtype=torch.double)
    out, (edges, alpha) = conv((x_src, x_dst), edge_index, edge_attr, return_attention_weights=True)
    # By hand: a loop i -> i for i < 3, whose features reduce those of the edges into i.
    loop_attr = torch.stack([edge_attr[2:4].mean(0) if fill_value == "mean" else edge_attr[2:4].amax(0),
                             edge_attr[4], torch.zeros(2, dtype=torch.double)])
    edges_by_hand = torch.cat([edge_index, torch.arange(3).repeat(2, 1)], dim=1)
    attr_by_hand = torch.cat([edge_attr, loop_attr])
    assert torch.equal(edges, edges_by_hand)
    h_src, h_dst = conv.lin_src(x_src).view(-1, 1, 2), conv.lin_dst(x_dst).view(-1, 1, 2)
    h_edge = conv.lin_edge(attr_by_hand).view(-1, 1, 2)
    source, target = edges_by_hand
    score = torch.nn.functional.leaky_relu(
        (h_src[source] * conv.att_src).sum(-1) + (h_dst[target] * conv.att_dst).sum(-1)
        + (h_edge * conv.att_edge).sum(-1), 0.2)
    expected_alpha = torch_geometric.utils.softmax(score, target, num_nodes=5)
    expected = torch.zeros(5, 1, 2, dtype=torch.double).index_add_(
        0, target, expected_alpha.unsqueeze(-1) * h_src[source]).view(5, 2) + conv.bias
    assert torch.allclose(alpha, expected_alpha) and torch.allclose(out, expected)


@pytest.mark.parametrize("build,error,match", [
    (lambda: GATConv((3, 3, 3), 2), ValueError, r"GATConv needs in_channels as one size or a pair"),
    (lambda: GATConv(3, 2, node_dim=1), TypeError, "GATConv got unexpected keyword argument.*'node_dim'"),
    (lambda: GATConv(3, 2, heads=2.0), ValueError, "GATConv needs heads to be a whole number >= 1, got 2.0"),
    (lambda: SelfAttentionConv(4, 0), ValueError, "SelfAttentionConv needs num_heads to be a whole number >= 1"),
])
def test_constructor_arguments_are_checked_by_name(build, error, match):
    with pytest.raises(error, match=match):
        build()


def test_inputs_of_another_dtype_or_type_are_named():
    x = torch.randn(6, 5)
    with pytest.raises(ValueError, match="GATConv expects x of dtype torch.float32, like its weights, got torch.float64"):
        GATConv(5, 4)(x.double(), EDGE_INDEX)
    with pytest.raises(ValueError, match="GATConv expects edge_attr of dtype torch.float32, like its weights"):
        GATConv(5, 4, edge_dim=2)(x, EDGE_INDEX, torch.randn(8, 2, dtype=torch.double))
    with pytest.raises(ValueError, match="GATConv expects x_dst of dtype torch.float32"):
        GATConv((5, 3), 4)((x, torch.randn(6, 3, dtype=torch.double)), EDGE_INDEX)
    with pytest.raises(TypeError, match=r"GATConv expects x to be a tensor or a pair \(x_src, x_dst\) of tensors"):
        GATConv(5, 4)(x.tolist(), EDGE_INDEX)
    with pytest.raises(TypeError, match="GATConv expects edge_attr to be a tensor, got list"):
        GATConv(5, 4, edge_dim=1)(x, EDGE_INDEX, [1.0] * 8)
    with pytest.raises(ValueError, match="GATConv expects size as a pair"):
        GATConv(5, 4)(x, EDGE_INDEX, size=6)
    # Integer edge features are promoted, as in PyG.
    assert GATConv(5, 4, edge_dim=1)(x, EDGE_INDEX, torch.arange(8)).shape == (6, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # Autocast mixes dtypes itself.
        GATConv(5, 4)(x.bfloat16(), EDGE_INDEX)
