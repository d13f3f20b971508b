"""Times graphseq's GATConv against torch_geometric.nn.GATConv, side by side
in one process (interleaved, so load hits both alike), and prints ratios
(graphseq / PyG; below 1 is faster).

Layer level, the same inputs for both, forward and backward of one
``GATConv(in, 8, heads=8)`` in training mode with PyG's defaults:

- ``cora-dense``: Cora's 2,708 x 1,433 features as a dense tensor.
- ``cora-csr``: the same features as a sparse CSR tensor, for both layers.
- ``random``: a random graph of 20,000 nodes and 200,000 edges (seed 0), 128
  dense features per node.

Our layer keeps the graph it prepared (self-loops, the order by target) for
as long as the same ``edge_index`` tensor comes back; PyG's prepares it at
every call. So each layer case times ours twice: given the same
``edge_index`` at every step (``kept graph``: full-batch training), and given
a new one (``edge_index.clone()``) at every step, as each sampled mini-batch
is (``new graph``: the layer's own ratio). PyG gets the same tensor each step;
the clone costs under 1% of a step.

Model level (``epoch``): one epoch of gat-cora (a training step and a
validation pass of graphseq's GAT model on sparse features) against the same
model built from PyG's GATConv as PyG's example builds it (dense features,
dense dropout). Here the win comes mostly from the recipe (sparse features,
the graph prepared once), not from the layer; the layer's own figures are
the ones above. Both models start from the same weights.

Before a case is timed, the two sides' outputs are checked to agree in eval
mode. Each case is the median of ``--repeats`` steps, ``random`` (the larger
graph) of a tenth of them, at least 5; the count is printed
per case.

    python benchmarks/bench_gat.py [--cases cora-dense cora-csr random epoch] [--repeats 100]
                                   [--threads 1] [--device auto] [--clock cpu]
                                   [--data-root DIR] [--data-mirror DIR]
"""
from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
import torch_geometric.nn as pyg_nn

from graphseq.data.planetoid import load_planetoid
from graphseq.models import GAT
from graphseq.nn import GATConv
from graphseq.data.places import data_places
from graphseq.devices import resolve_device
from timing import CLOCKS, at_least, check_agreement, median_times, run_script

CASES = ("cora-dense", "cora-csr", "random", "epoch")


class PyGExampleGAT(torch.nn.Module):
    """PyG's examples/gat.py model."""

    def __init__(self, in_channels, hidden_channels, out_channels, heads):
        super().__init__()
        self.conv1 = pyg_nn.GATConv(in_channels, hidden_channels, heads, dropout=0.6)
        self.conv2 = pyg_nn.GATConv(hidden_channels * heads, out_channels, heads=1,
                                    concat=False, dropout=0.6)

    def forward(self, x, edge_index):
        x = F.dropout(x, p=0.6, training=self.training)
        x = F.elu(self.conv1(x, edge_index))
        x = F.dropout(x, p=0.6, training=self.training)
        return self.conv2(x, edge_index)


def epoch(model, optimizer, x, data):
    model.train()
    optimizer.zero_grad()
    out = model(x, data.edge_index)
    F.cross_entropy(out[data.train_mask], data.y[data.train_mask]).backward()
    optimizer.step()
    model.eval()
    with torch.no_grad():
        model(x, data.edge_index)[data.val_mask].argmax(-1)


def layer_step(layer, x, edge_index):
    layer.zero_grad(set_to_none=True)
    layer(x, edge_index).square().sum().backward()


def layer_copies(in_channels, device):
    """Ours, ours again (each keeps a graph of its own) and PyG's, all with the same weights."""
    torch.manual_seed(0)
    ours = GATConv(in_channels, 8, heads=8).to(device)
    again = GATConv(in_channels, 8, heads=8).to(device)
    theirs = pyg_nn.GATConv(in_channels, 8, heads=8).to(device)
    again.load_state_dict(ours.state_dict())
    theirs.load_state_dict(ours.state_dict())
    return ours, again, theirs


def agree(case, ours, theirs, ours_x, theirs_x, edge_index):
    """Stops the script unless both give the same output in eval mode (no dropout)."""
    ours.eval(), theirs.eval()
    with torch.no_grad():
        check_agreement(case, ours(ours_x, edge_index), theirs(theirs_x, edge_index))
    ours.train(), theirs.train()


def repeats_of(case, repeats):
    """Steps timed in ``case``: ``random``, the larger graph, gets a tenth, at least 5."""
    return max(repeats // 10, 5) if case == "random" else repeats


def contenders(case, data, device):
    """``{name: step function}`` for one case; both get the same inputs."""
    if case in ("cora-dense", "cora-csr", "random"):
        if case == "random":
            generator = torch.Generator().manual_seed(0)
            edge_index = torch.randint(0, 20_000, (2, 200_000), generator=generator).to(device)
            x = torch.randn(20_000, 128, generator=generator).to(device)
        else:
            x, edge_index = (data.x if case == "cora-dense" else data.x.to_sparse_csr()), data.edge_index
        ours, again, theirs = layer_copies(x.size(1), device)
        agree(case, ours, theirs, x, x, edge_index)
        return {"graphseq": lambda: layer_step(ours, x, edge_index),
                "graphseq, new graph": lambda: layer_step(again, x, edge_index.clone()),
                "pyg": lambda: layer_step(theirs, x, edge_index)}
    classes = int(data.y.max()) + 1
    torch.manual_seed(0)
    ours = GAT(data.num_features, classes).to(device)
    theirs = PyGExampleGAT(data.num_features, 8, classes, 8).to(device)
    theirs.load_state_dict(ours.state_dict())
    ours_optimizer = torch.optim.Adam(ours.parameters(), lr=0.005, weight_decay=5e-4)
    theirs_optimizer = torch.optim.Adam(theirs.parameters(), lr=0.005, weight_decay=5e-4)
    sparse_x = data.x.to_sparse_csr()
    agree(case, ours, theirs, sparse_x, data.x, data.edge_index)
    return {"graphseq": lambda: epoch(ours, ours_optimizer, sparse_x, data),
            "pyg-example": lambda: epoch(theirs, theirs_optimizer, data.x, data)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES))
    parser.add_argument("--repeats", type=at_least(1), default=100,
                        help="steps timed per case; random gets a tenth of them, at least 5")
    parser.add_argument("--threads", type=at_least(1), default=1)
    parser.add_argument("--device", default="auto")
    # The data options of `graphseq run`, so that an offline machine points
    # the script at the same read-only mirror (Cora's raw files) as its runs.
    parser.add_argument("--data-root", default=None,
                        help="where Cora is, or is downloaded to (default $GRAPHSEQ_DATA or ./datasets)")
    parser.add_argument("--data-mirror", default=None,
                        help="read-only folder of raw dataset files consulted before any download "
                             "(default $GRAPHSEQ_MIRROR)")
    parser.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                        help="wall time, or this process's CPU time (steadier on a busy machine)")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    root, mirror = data_places(args.data_root, args.data_mirror)
    data = load_planetoid("Cora", root, mirror).to(device)
    clock = CLOCKS[args.clock]
    print(f"GATConv on {device}, {torch.get_num_threads()} thread(s), {args.clock} clock, "
          f"median of interleaved steps (their count per case)")
    for case in args.cases:
        steps = contenders(case, data, device)
        repeats = repeats_of(case, args.repeats)
        median = median_times(steps, repeats, device, clock, warmup=5)
        (ours, ours_time), *_, (peer, peer_time) = median.items()
        line = (f"  {case:<11} {repeats:>4} steps   {ours} {ours_time * 1e3:8.2f} ms   "
                f"{peer} {peer_time * 1e3:8.2f} ms   ")
        if "graphseq, new graph" in median:
            new_time = median["graphseq, new graph"]
            line += (f"ratio {ours_time / peer_time:.3f} (kept graph)   graphseq, new graph {new_time * 1e3:8.2f} ms"
                     f"   ratio {new_time / peer_time:.3f} (new edge_index each step)")
        else:
            line += f"ratio {ours_time / peer_time:.3f}"
        print(line)


if __name__ == "__main__":
    run_script(main)
