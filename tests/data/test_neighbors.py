"""Neighbour sampling through PyG's NeighborLoader, and layer-wise inference."""
import io
import sys

import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.utils import to_undirected

from conftest import Terminal
from graphseq.data.neighbors import layerwise_inference, make_sampler, neighbor_loader
from graphseq.errors import GraphseqError
from graphseq.models import GAT
from graphseq.models.inductive_gat import InductiveGAT


def random_graph(num_nodes=60, num_edges=300, features=5, seed=0):
    generator = torch.Generator().manual_seed(seed)
    edge_index = to_undirected(torch.randint(0, num_nodes, (2, num_edges), generator=generator))
    return Data(x=torch.randn(num_nodes, features, generator=generator), edge_index=edge_index,
                y=torch.randint(0, 3, (num_nodes,), generator=generator))


def test_sampled_edges_are_real_edges_into_the_seeds_with_the_fanout():
    data = random_graph()
    edges = set(map(tuple, data.edge_index.t().tolist()))
    in_degree = torch.bincount(data.edge_index[1], minlength=data.num_nodes)
    torch.manual_seed(0)
    for batch in neighbor_loader(data, [3, 2], input_nodes=torch.arange(20), batch_size=8):
        seeds = batch.n_id[:batch.batch_size]
        assert torch.equal(seeds, batch.input_id)  # Seeds come first, in order.
        assert torch.equal(batch.x, data.x[batch.n_id]) and torch.equal(batch.y, data.y[batch.n_id])
        global_edges = batch.n_id[batch.edge_index]
        assert all(tuple(e) in edges for e in global_edges.t().tolist())
        first_hop = batch.edge_index[:, :batch.num_sampled_edges[0]]
        sampled = torch.bincount(first_hop[1], minlength=batch.num_nodes)[:batch.batch_size]
        assert torch.equal(sampled, in_degree[seeds].clamp(max=3))
        # No node twice in one batch.
        assert batch.n_id.unique().numel() == batch.n_id.numel()


def test_all_neighbours_with_minus_one():
    data = random_graph()
    batch = next(iter(neighbor_loader(data, [-1], input_nodes=torch.tensor([4, 7]), batch_size=2)))
    into = data.edge_index[:, (data.edge_index[1] == 4) | (data.edge_index[1] == 7)]
    got = batch.n_id[batch.edge_index]
    assert sorted(map(tuple, got.t().tolist())) == sorted(map(tuple, into.t().tolist()))


def test_sampling_draws_every_neighbour_alike():
    # A star: node 0 hears from 1..10; sampling 2 of them many times draws each about equally.
    edge_index = torch.stack([torch.arange(1, 11), torch.zeros(10, dtype=torch.long)])
    sampler = make_sampler(Data(edge_index=edge_index, num_nodes=11), [2])
    torch.manual_seed(0)
    counts = torch.zeros(11)
    for _ in range(2000):
        out = sampler._sample(torch.tensor([0]))
        counts[out.node[1:]] += 1
    assert counts[0] == 0 and ((counts[1:] - 400).abs() < 80).all()


def test_layerwise_inference_equals_the_full_forward_pass():
    data = random_graph(num_nodes=80, features=6)
    torch.manual_seed(0)
    for model in (GAT(6, 3, hidden_channels=4, heads=2), InductiveGAT(6, 3, hidden_channels=4, heads=2)):
        model.eval()
        full = model(data.x, data.edge_index)
        layerwise = layerwise_inference(model.inference_layers(), data.x, data.edge_index, data.num_nodes,
                                        batch_size=16)
        assert torch.allclose(full, layerwise, atol=1e-5)


@pytest.mark.parametrize("terminal", [True, False])
def test_the_inference_bar_is_drawn_on_a_terminal_only(monkeypatch, terminal):
    # A stderr redirected to a file (`2> run.log`) would fill with the bar's \r redraws.
    stderr = Terminal() if terminal else io.StringIO()
    monkeypatch.setattr(sys, "stderr", stderr)
    data = random_graph(num_nodes=20, features=6)
    layerwise_inference(GAT(6, 3, hidden_channels=4, heads=2).eval().inference_layers(), data.x, data.edge_index,
                        data.num_nodes, batch_size=8, quiet=False)
    assert ("inference, layer 1/2" in stderr.getvalue()) == terminal


def test_a_fanout_of_no_hops_is_refused():
    data = random_graph()
    with pytest.raises(GraphseqError, match=r"neighbor_loader needs num_neighbors for at least one hop .*got none"):
        next(iter(neighbor_loader(data, [], batch_size=8)))
    with pytest.raises(GraphseqError, match=r"make_sampler needs num_neighbors for at least one hop"):
        make_sampler(data, ())
