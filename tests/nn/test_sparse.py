import subprocess
import sys
import warnings

import pytest
import torch
from torch_geometric.index import index2ptr

from graphseq.models.gat import GAT
from graphseq.models.gcn import GCN
from graphseq.models.node_transformer import NodeTransformer

from graphseq.nn.sparse import EdgePattern, SampledDot, SparseAggregate, csr_tensor, sparse_dense_mm

# Edges grouped by target: 1, 2 -> 0; 0, 3 -> 1; 0 -> 2; 2, 3 -> 3; node 4
# receives nothing and sends nothing; 2 -> 0 is repeated.
SOURCE = torch.tensor([1, 2, 2, 0, 3, 0, 2, 3])
TARGET = torch.tensor([0, 0, 0, 1, 1, 2, 3, 3])


def pattern():
    return EdgePattern(index2ptr(TARGET, 5), SOURCE, 5)


def inputs(*shapes):
    torch.manual_seed(0)
    return [torch.randn(*shape, dtype=torch.double, requires_grad=True) for shape in shapes]


def test_aggregate_is_the_sum_of_weighted_source_values():
    alpha, value = inputs((8, 2), (5, 2, 3))
    expected = torch.zeros(5, 2, 3, dtype=torch.double).index_add(0, TARGET, value[SOURCE] * alpha.unsqueeze(-1))
    assert torch.allclose(SparseAggregate.apply(pattern(), alpha, value), expected)


def test_sampled_dot_is_the_dot_product_of_both_ends():
    query, key = inputs((5, 2, 3), (5, 2, 3))
    expected = (query[TARGET] * key[SOURCE]).sum(-1)
    assert torch.allclose(SampledDot.apply(pattern(), query, key), expected)


@pytest.mark.parametrize("heads", [1, 3])
def test_interleaved_pattern_holds_each_targets_edges_once_per_head(heads):
    crow, col, order, place = pattern().interleaved(heads)
    rows, cols, orders = [], [], []
    for i in range(5):
        edges = (TARGET == i).nonzero().view(-1).tolist()
        for h in range(heads):
            rows.append(len(edges))
            cols += [int(SOURCE[e]) * heads + h for e in edges]
            orders += [e * heads + h for e in edges]
    assert crow.tolist() == [0] + torch.tensor(rows).cumsum(0).tolist()
    assert col.tolist() == cols and order.tolist() == orders
    assert torch.equal(order[place], torch.arange(8 * heads))
    empty = EdgePattern(torch.zeros(3, dtype=torch.long), torch.zeros(0, dtype=torch.long), 2).interleaved(heads)
    assert [t.tolist() for t in empty] == [[0] * (2 * heads + 1), [], [], []]


def test_first_and_second_gradients_of_both_kernels():
    p = pattern()
    alpha, value, query = inputs((8, 2), (5, 2, 3), (5, 2, 3))
    assert torch.autograd.gradcheck(lambda a, v: SparseAggregate.apply(p, a, v), (alpha, value))
    assert torch.autograd.gradgradcheck(lambda a, v: SparseAggregate.apply(p, a, v), (alpha, value))
    assert torch.autograd.gradcheck(lambda q, k: SampledDot.apply(p, q, k), (query, value))
    assert torch.autograd.gradgradcheck(lambda q, k: SampledDot.apply(p, q, k), (query, value))


def test_bipartite_pattern_and_its_transpose():
    # Three sources, two targets: 0, 2 -> 0 and 1, 2 -> 1.
    p = EdgePattern(torch.tensor([0, 2, 4]), torch.tensor([0, 2, 1, 2]), 3)
    t = p.transposed()
    assert t.ptr.tolist() == [0, 1, 2, 4] and t.index.tolist() == [0, 1, 0, 1]
    values = torch.tensor([10, 11, 12, 13])
    assert values[t.perm].tolist() == [10, 12, 11, 13]
    assert torch.equal(values[t.perm][p.perm], values) and t.transposed() is p
    alpha, value = inputs((4, 1), (3, 1, 2))
    assert SparseAggregate.apply(p, alpha, value).shape == (2, 1, 2)
    assert torch.autograd.gradgradcheck(lambda a, v: SparseAggregate.apply(p, a, v), (alpha, value))


def test_sparse_features_times_dense_weight():
    x = torch.randn(6, 5) * (torch.rand(6, 5) < 0.4)
    weight = torch.randn(5, 3, requires_grad=True)
    out = sparse_dense_mm(x.to_sparse(), weight)
    (grad,) = torch.autograd.grad(out.square().sum(), weight)
    dense_weight = weight.detach().clone().requires_grad_()
    (x @ dense_weight).square().sum().backward()
    assert torch.allclose(out, x @ weight, atol=1e-6) and torch.allclose(grad, dense_weight.grad, atol=1e-5)


@pytest.mark.parametrize("layout", ["csr", "coo"])
def test_sparse_features_that_require_grad_get_the_dense_gradient(layout):
    # As PyG's layers give it (torch's own product): the gradient of the
    # dense matrix, zeros included, not a silently missing one.
    x = torch.randn(6, 5, dtype=torch.double) * (torch.rand(6, 5) < 0.4)
    (weight,) = inputs((5, 3))
    sparse_x = (x.to_sparse_csr() if layout == "csr" else x.to_sparse()).requires_grad_()
    grad_x, grad_weight = torch.autograd.grad(sparse_dense_mm(sparse_x, weight).square().sum(), [sparse_x, weight])
    dense_x = x.clone().requires_grad_()
    expected = torch.autograd.grad((dense_x @ weight).square().sum(), [dense_x, weight])
    assert torch.allclose(grad_x.to_dense(), expected[0]) and torch.allclose(grad_weight, expected[1])


def test_csr_tensor_leaves_the_users_warning_filters_alone():
    before = list(warnings.filters)
    csr_tensor(torch.tensor([0, 1]), torch.tensor([0]), torch.ones(1), (1, 1))
    assert warnings.filters == before


@pytest.mark.slow
def test_importing_graphseq_nn_adds_no_warning_filter():
    code = ("import warnings, torch, torch_geometric; before = list(warnings.filters); import graphseq.nn; "
            "assert warnings.filters == before, [f for f in warnings.filters if f not in before]; "
            "import graphseq.models; assert not any('CSR' in str(f[1]) for f in warnings.filters)")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_segment_softmax_equals_pyg_with_two_derivatives():
    from torch_geometric.utils import softmax
    from graphseq.nn.sparse import segment_softmax
    index = torch.tensor([0, 0, 0, 1, 1, 3, 3, 3, 3])  # Targets 2 and 4 receive nothing.
    ptr = index2ptr(index, 5)
    (score,) = inputs((9, 2))
    assert torch.allclose(segment_softmax(score, ptr, index), softmax(score, index, num_nodes=5))
    assert torch.autograd.gradcheck(lambda s: segment_softmax(s, ptr, index), (score,))
    assert torch.autograd.gradgradcheck(lambda s: segment_softmax(s, ptr, index), (score,))


@pytest.mark.parametrize("make", [lambda: GAT(30, 3, dropout=0.0, attention_dropout=0.0, value_dropout=0.0),
                                  lambda: GCN(30, 8, 3, dropout=0.0),
                                  lambda: NodeTransformer(30, 3, dropout=0.0, layer_dropout=0.0,
                                                          attention_dropout=0.0)],
                         ids=["GAT", "GCN", "NodeTransformer"])
@pytest.mark.parametrize("layout", ["csr", "coo"])
def test_sparse_features_under_cpu_bfloat16_autocast(make, layout):
    # torch's CPU sparse kernel has no bfloat16: the product with the
    # sparse features runs in float32, the rest as autocast chooses.
    torch.manual_seed(0)
    model = make().eval()
    x = (torch.rand(20, 30) < 0.1).float()
    edge_index = torch.randint(0, 20, (2, 60))
    sparse = x.to_sparse_csr() if layout == "csr" else x.to_sparse()
    first = lambda out: out[0] if isinstance(out, tuple) else out  # noqa: E731 (GCN returns its hidden layer too)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        dense_out = first(model(x, edge_index))
        sparse_out = first(model(sparse, edge_index))
    assert sparse_out.dtype == dense_out.dtype
    exact = first(model(x, edge_index))
    torch.testing.assert_close(sparse_out.float(), exact, atol=0.05, rtol=0.05)
    sparse_out.float().sum().backward()
    assert all(p.grad is None or p.grad.dtype == torch.float32 for p in model.parameters())
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())
