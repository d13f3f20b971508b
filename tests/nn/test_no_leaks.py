"""Training keeps no autograd graph alive: after backward and with the
outputs dropped, none of the layers' own autograd functions survives a
garbage collection. (An earlier version of the layers kept every step's
graph: a 3,000-step captioning run grew to 16.7 GB and was killed.)"""
import gc

import pytest
import torch

from graphseq import graphs
from graphseq.nn import ChainGRU, ChainLSTM, GATConv, SelfAttentionConv


def our_backward_nodes():
    names = {f"{name}Backward" for name in OURS}
    return [type(o).__name__ for o in gc.get_objects() if type(o).__name__ in names]


OURS = ("_LSTMStep", "_GRUStep", "_DeferredRecurrentGrad", "SparseAggregate", "SampledDot", "SegmentSum",
        "SegmentSoftmax", "_SparseDenseMM", "TwiceDifferentiableSDPA")


def chain_step(layer_type):
    layer = layer_type(8, 16, num_layers=2, bidirectional=True)
    lengths = [5, 3, 7]
    x = torch.randn(sum(lengths), 8)

    def step():
        out, _ = layer(x, graphs.chain(lengths), graphs.lengths_to_batch(lengths))
        out.sum().backward()
    return step


def attention_step(kind):
    if kind == "gat":
        layer, x, edges = GATConv(8, 4, heads=2), torch.randn(20, 8), torch.randint(0, 20, (2, 60))
        return lambda: layer(x, edges).sum().backward()
    layer = SelfAttentionConv(16, 4, kdim=8, vdim=8)
    regions, words = torch.randn(2 * 9, 8), torch.randn(2 * 6, 16, requires_grad=True)
    edges = graphs.fully_connected_bipartite([9, 9], [6, 6])
    return lambda: layer((regions, words), edges).sum().backward()


@pytest.mark.parametrize("make", [lambda: chain_step(ChainLSTM), lambda: chain_step(ChainGRU),
                                  lambda: attention_step("gat"), lambda: attention_step("cross")],
                         ids=["lstm", "gru", "gat", "cross-attention"])
def test_no_autograd_graph_outlives_backward(make):
    step = make()
    gc.collect()
    before = our_backward_nodes()  # what other tests may have left
    for _ in range(3):
        step()
    gc.collect()
    assert our_backward_nodes() == before
