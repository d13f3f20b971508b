"""Times one epoch of gat-cora (a training step and a validation pass)
against the same model built from ``torch_geometric.nn.GATConv`` the way
PyG's example does it (dense features, dense dropout), side by side in one
process, and prints the ratio.

    python benchmarks/bench_gat.py [--dataset Cora] [--repeats 200] [--device auto]
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F
import torch_geometric.nn as pyg_nn

from graphseq.data.planetoid import load_planetoid
from graphseq.models import GAT
from graphseq.pipeline import default_data_mirror, default_data_root, resolve_device


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


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", default="Cora")
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--data-root", default=None)
    parser.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                        help="wall time, or this process's CPU time (steadier on a busy machine)")
    args = parser.parse_args()

    device = resolve_device(args.device)
    root = Path(args.data_root) if args.data_root else default_data_root()
    data = load_planetoid(args.dataset, root, default_data_mirror()).to(device)
    classes = int(data.y.max()) + 1
    sparse_x = data.x.to_sparse_csr()
    torch.manual_seed(0)
    ours = GAT(data.num_features, classes).to(device)
    theirs = PyGExampleGAT(data.num_features, 8, classes, 8).to(device)
    contenders = {
        "graphseq": (ours, torch.optim.Adam(ours.parameters(), lr=0.005, weight_decay=5e-4), sparse_x),
        "pyg-example": (theirs, torch.optim.Adam(theirs.parameters(), lr=0.005, weight_decay=5e-4), data.x),
    }
    clock = time.perf_counter if args.clock == "wall" else time.process_time
    times = {name: [] for name in contenders}
    for step in range(args.repeats + 10):
        for name, (model, optimizer, x) in contenders.items():  # Interleaved, so load hits both.
            if device.type == "cuda":
                torch.cuda.synchronize()
            start = clock()
            epoch(model, optimizer, x, data)
            if device.type == "cuda":
                torch.cuda.synchronize()
            if step >= 10:  # Warm-up.
                times[name].append(clock() - start)

    median = {name: statistics.median(t) for name, t in times.items()}
    print(f"{args.dataset} on {device} ({torch.get_num_threads()} threads, {args.clock} clock), "
          f"median of {args.repeats} epochs (train step + validation pass)")
    for name, seconds in median.items():
        print(f"  {name:<12} {seconds * 1e3:8.2f} ms")
    print(f"  ratio graphseq / pyg-example: {median['graphseq'] / median['pyg-example']:.3f}")


if __name__ == "__main__":
    main()
