import pytest
import torch

from graphseq.nn import ChainGRU, GATConv, MetricAttentionConv, SelfAttentionConv, TransformerEncoderLayer, checks


def test_features_of_the_wrong_shape_name_the_layer_and_argument():
    with pytest.raises(ValueError, match=r"GATConv expects x of shape \[num_nodes, 5\], got \[6, 3\]"):
        checks.check_features("GATConv", torch.randn(6, 3), 5)
    with pytest.raises(ValueError, match=r"Layer expects x_src of shape \[num_nodes, 5\], got \[6\]"):
        checks.check_features("Layer", torch.randn(6), 5, name="x_src")
    with pytest.raises(ValueError, match="floating-point"):
        checks.check_features("Layer", torch.ones(6, 5, dtype=torch.long), 5)
    checks.check_features("Layer", torch.randn(6, 7), None)  # Any width.


def test_edge_index_shape_dtype_and_range():
    x_nodes = 4
    with pytest.raises(ValueError, match=r"GATConv expects edge_index of shape \[2, num_edges\], got \[3, 2\]"):
        checks.check_edge_index("GATConv", torch.zeros(3, 2, dtype=torch.long), x_nodes)
    with pytest.raises(ValueError, match="dtype torch.long"):
        checks.check_edge_index("GATConv", torch.zeros(2, 2), x_nodes)
    with pytest.raises(ValueError, match="GATConv: edge_index refers to node 4, but there are only 4 nodes"):
        checks.check_edge_index("GATConv", torch.tensor([[0, 4], [1, 2]]), x_nodes)
    with pytest.raises(ValueError, match=r"GATConv: edge_index holds a negative node index \(-1\)"):
        checks.check_edge_index("GATConv", torch.tensor([[0, -1], [1, 2]]), x_nodes)
    checks.check_edge_index("GATConv", torch.tensor([[0, 3], [1, 2]]), x_nodes)
    checks.check_edge_index("GATConv", torch.empty(2, 0, dtype=torch.long), 0)


def test_bipartite_edge_index_checks_sources_and_targets_apart():
    edge_index = torch.tensor([[0, 3], [1, 0]])
    checks.check_edge_index("GATConv", edge_index, (4, 2))
    with pytest.raises(ValueError, match=r"edge_index\[1\] refers to target node 1, but there are only 1 target"):
        checks.check_edge_index("GATConv", edge_index, (4, 1))
    with pytest.raises(ValueError, match=r"edge_index\[0\] refers to source node 3"):
        checks.check_edge_index("GATConv", edge_index, (3, 2))


def test_unknown_keyword_arguments_name_the_layer():
    class Layer(torch.nn.Module):
        pass

    with pytest.raises(TypeError, match="Layer got unexpected keyword argument.*'hedas'"):
        checks.check_kwargs(Layer(), {"hedas": 2, "aggr": "add"})
    checks.check_kwargs(Layer(), {"aggr": "add", "decomposed_layers": 2})


def test_unimplemented_option_is_refused_by_name():
    checks.check_option("SelfAttentionConv", "add_zero_attn", False, False)
    with pytest.raises(ValueError, match="SelfAttentionConv does not implement add_zero_attn=True"):
        checks.check_option("SelfAttentionConv", "add_zero_attn", True, False)


def test_size_is_checked_against_the_features():
    assert checks.check_size("GATConv", None, (4, 2)) == (4, 2)
    assert checks.check_size("GATConv", (4, 2), (4, None)) == (4, 2)
    with pytest.raises(ValueError, match="size gives 3 source nodes, but the features hold 4"):
        checks.check_size("GATConv", (3, 2), (4, 2))
    with pytest.raises(ValueError, match="needs size"):
        checks.check_size("GATConv", None, (4, None))


def test_batch_and_edge_features():
    with pytest.raises(ValueError, match=r"batch of shape \[5\]"):
        checks.check_batch("Layer", torch.zeros(4, dtype=torch.long), 5)
    with pytest.raises(ValueError, match="negative graph id"):
        checks.check_batch("Layer", torch.tensor([0, -1]), 2)
    checks.check_edge_features("GATConv", torch.randn(3), 3, 1)
    with pytest.raises(ValueError, match="3 features per edge"):
        checks.check_edge_features("GATConv", torch.randn(3, 2), 3, 3)
    with pytest.raises(ValueError, match=r"edge_attr of shape \[num_edges=3"):
        checks.check_edge_features("GATConv", torch.randn(2, 3), 3, 3)


def test_value_checks_do_not_break_a_compiled_graph():
    def f(x, edge_index):
        checks.check_edge_index("Layer", edge_index, x.size(0))
        return x[edge_index[0]].sum()

    torch._dynamo.reset()
    explanation = torch._dynamo.explain(f)(torch.randn(4, 2), torch.tensor([[0, 3], [1, 2]]))
    assert explanation.graph_break_count == 0


@pytest.mark.parametrize("build,match", [
    (lambda: GATConv(4, 2, value_dropout=1.5), r"GATConv needs value_dropout to be a number in \[0, 1\], got 1.5"),
    (lambda: GATConv(-2, 2), r"GATConv needs in_channels to be a whole number >= 1 \(or -1, inferred\), got -2"),
    (lambda: GATConv((4, 0), 2), r"needs each of in_channels to be a whole number >= 1 .*got \(4, 0\)"),
    (lambda: GATConv(4, 0), "GATConv needs out_channels to be a whole number >= 1, got 0"),
    (lambda: GATConv(4, 2, edge_dim=3, fill_value="bogus"),
     r"GATConv needs fill_value to be a number, a tensor or one of 'add', 'sum', 'mean', .*got 'bogus'"),
    (lambda: SelfAttentionConv(0, 1), "SelfAttentionConv needs embed_dim to be a whole number >= 1, got 0"),
    (lambda: MetricAttentionConv(4, 2, [3], dropout=-1.0), r"MetricAttentionConv needs dropout to be a number in \[0, 1\]"),
    (lambda: MetricAttentionConv(4, 2, [0]), r"each of hidden_channels to be a whole number >= 1, got \[0\]"),
    (lambda: MetricAttentionConv(4, 2, 3), r"MetricAttentionConv needs hidden_channels as a list of widths.*got 3"),
    (lambda: MetricAttentionConv(0, 2, [3]), "in_channels to be a whole number >= 1, got 0"),
    # In torch.nn.TransformerEncoderLayer's names, not its SelfAttentionConv's.
    (lambda: TransformerEncoderLayer(8, 3),
     r"TransformerEncoderLayer needs d_model \(8\) to be divisible by nhead \(3\)"),
    (lambda: TransformerEncoderLayer(0, 1), "TransformerEncoderLayer needs d_model to be a whole number >= 1, got 0"),
    (lambda: TransformerEncoderLayer(8, 2, -1), "needs dim_feedforward to be a whole number >= 1, got -1"),
    (lambda: TransformerEncoderLayer(8, 2, dropout=1.5), r"TransformerEncoderLayer needs dropout to be a number in \[0, 1\], got 1.5"),
    (lambda: ChainGRU(3, 4, num_layers=2, dropout="0.1"), r"ChainGRU needs dropout to be a number in \[0, 1\], got '0.1'"),
    (lambda: ChainGRU(3, 4, num_layers=2, dropout=True), r"ChainGRU needs dropout to be a number in \[0, 1\], got True"),
])
def test_layer_sizes_and_dropouts_are_checked_when_the_layer_is_built(build, match):
    with pytest.raises(ValueError, match=match):
        build()


@pytest.mark.parametrize("layer", [lambda: GATConv(3, 2), lambda: SelfAttentionConv(3, 1)])
def test_a_list_for_edge_index_is_named(layer):
    with pytest.raises(TypeError, match="expects edge_index to be a tensor, got list"):
        layer()(torch.randn(3, 3), [[0, 1], [1, 2]])


def test_inputs_of_another_dtype_than_the_weights_are_named():
    checks.check_dtype("Layer", torch.randn(3, 2), torch.float32)
    checks.check_dtype("Layer", torch.randn(3, 2, dtype=torch.double).to_sparse(), torch.float32)  # Converted.
    with pytest.raises(ValueError, match=r"Layer expects edge_attr of dtype torch.float32, like its weights, got "
                                         r"torch.float64; convert the input \(.to\(torch.float32\)\) or the layer"):
        checks.check_dtype("Layer", torch.randn(3, 2, dtype=torch.double), torch.float32, name="edge_attr")
    with torch.autocast("cpu", dtype=torch.bfloat16):  # Autocast mixes dtypes itself.
        checks.check_dtype("Layer", torch.randn(3, 2, dtype=torch.bfloat16), torch.float32)
