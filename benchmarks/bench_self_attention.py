"""SelfAttentionConv against its peers, in one process, interleaved.

Dense path: fully connected graphs (``SelfAttentionConv(x, batch=batch)``)
against ``torch.nn.MultiheadAttention(batch_first=True)`` with the same
weights and ``need_weights=False`` (its fastest setting), forward under
``no_grad`` (ours in eval mode; MultiheadAttention the faster of its native
fast path, in eval mode, and its plain one, which on a CPU is sometimes
faster) and forward+backward (training mode), for several sizes; the two outputs are
checked to agree before they are timed.

Sparse path: a random graph of 200k (or --edges) edges through the edge-wise
softmax against PyG's ``TransformerConv`` (same heads and channels, its
default root weight playing the part of our output projection), time and
peak memory of forward+backward. Checked first on the same inputs: ours
with TransformerConv's query, key and value weights, its output projection
applied to the output of a TransformerConv without a root weight, must give
ours. Ours keeps the graph it prepared for as
long as the same ``edge_index`` tensor comes back, TransformerConv prepares
it at every call; so ours is measured twice: given the same ``edge_index``
at every step (``kept``: its graph made in the warm-up, outside the time and
the memory measured) and a new one (``edge_index.clone()``) at every step, as
each sampled mini-batch is (``new``: the layer's own figures, preparing the
graph inside both).

Peak memory on CPU is measured in a fresh subprocess per layer: glibc is told
to serve every block above 64 KiB with mmap (``MALLOC_MMAP_THRESHOLD_``), so
a freed tensor leaves the resident set at once; the kernel's resident
high-water mark is reset (``/proc/self/clear_refs``) after the inputs and one
warm-up step exist, and the peak is the high-water mark after one
forward+backward minus the resident size before it. On CUDA it is
``torch.cuda.max_memory_allocated`` over the same step. The bytes autograd
saves for the backward pass (deduplicated by storage) are printed too: they
are exact and noise-free.

    python benchmarks/bench_self_attention.py [--repeats 20] [--device cpu] [--threads N]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import torch
from torch_geometric.nn import TransformerConv

from graphseq import graphs
from graphseq.nn import SelfAttentionConv
from graphseq.devices import resolve_device
from timing import at_least, check_agreement, median_times, run_script

# (graphs, nodes per graph, channels, heads); a list of sizes is a batch of unequal graphs.
DENSE_SIZES = [
    (8, 256, 256, 8),
    (32, 64, 128, 4),
    (4, 512, 256, 8),
    (1, 2048, 64, 8),
    ([96, 160, 256, 200, 256, 64, 128, 240], None, 256, 8),
]


def bench_dense(repeats: int, device: torch.device) -> None:
    print("Dense path (fully connected graphs) vs torch.nn.MultiheadAttention, median ms")
    print(f"{'graphs x nodes, channels, heads':<40} {'pass':<9} {'ours':>9} {'MHA':>9} {'ours/MHA':>9}")
    for count, nodes, channels, heads in DENSE_SIZES:
        torch.manual_seed(0)
        sizes = count if isinstance(count, list) else [nodes] * count
        conv = SelfAttentionConv(channels, heads).to(device)
        mha = torch.nn.MultiheadAttention(channels, heads, batch_first=True).to(device)
        mha.load_state_dict(conv.state_dict())
        x = torch.randn(sum(sizes), channels, device=device, requires_grad=True)
        batch = graphs.lengths_to_batch(sizes).to(device)
        # The reference sees the same graphs as a padded batch with a key padding mask.
        longest = max(sizes)
        dense = torch.zeros(len(sizes), longest, channels, device=device)
        padding = torch.ones(len(sizes), longest, dtype=torch.bool, device=device)
        for i, part in enumerate(x.detach().split(sizes)):
            dense[i, :len(part)] = part
            padding[i, :len(part)] = False
        dense.requires_grad_()
        mask = padding if len(set(sizes)) > 1 else None
        label = (f"{len(sizes)} x {nodes}" if nodes else f"{len(sizes)} x {min(sizes)}..{longest}") \
            + f", {channels}, {heads}"
        conv.eval(), mha.eval()
        with torch.no_grad():
            check_agreement(f"dense {label}", conv(x, batch=batch),
                            mha(dense, dense, dense, key_padding_mask=mask, need_weights=False)[0][~padding])

        def ours_forward():
            with torch.no_grad():
                conv(x, batch=batch)

        def mha_forward(fast: bool):
            def forward():
                mha.train(not fast)  # eval: torch's native fast path; training mode: the plain one
                with torch.no_grad():
                    mha(dense, dense, dense, key_padding_mask=mask, need_weights=False)
            return forward

        def ours_backward():
            conv(x, batch=batch).sum().backward()

        def mha_backward():
            mha(dense, dense, dense, key_padding_mask=mask, need_weights=False)[0].sum().backward()

        # Forward alone, MHA's faster of its two paths (the fast one is not always faster on a CPU).
        for kind, fns in [("fwd", {"ours": ours_forward, "mha": mha_forward(True), "plain": mha_forward(False)}),
                          ("fwd+bwd", {"ours": ours_backward, "mha": mha_backward})]:
            conv.train(kind != "fwd"), mha.train(kind != "fwd")
            t = median_times(fns, repeats, device, warmup=2)
            peer = min(t[name] for name in fns if name != "ours")
            print(f"{label:<40} {kind:<9} {t['ours'] * 1e3:9.2f} {peer * 1e3:9.2f} {t['ours'] / peer:9.2f}")


def sparse_inputs(nodes: int, edges: int, channels: int, device: torch.device):
    """The seeded features and random graph that every sparse contender reads."""
    torch.manual_seed(0)
    x = torch.randn(nodes, channels, device=device, requires_grad=True)
    edge_index = torch.randint(0, nodes, (2, edges), device=device)
    return x, edge_index


def check_sparse(nodes: int, edges: int, channels: int, heads: int, device: torch.device) -> float:
    """Stops the script unless ours computes what TransformerConv does on the
    timed inputs. TransformerConv's root weight has no counterpart in ours
    and our output projection none in it, so the peer here has no root
    weight and ours has the peer's query, key and value weights (and random
    biases, so that they count too); our output projection then applied to
    the peer's output must give ours."""
    x, edge_index = sparse_inputs(nodes, edges, channels, device)
    conv = SelfAttentionConv(channels, heads).to(device)
    peer = TransformerConv(channels, channels // heads, heads=heads, root_weight=False).to(device)
    with torch.no_grad():
        torch.nn.init.normal_(conv.in_proj_bias)
        for linear, weight, bias in zip((peer.lin_query, peer.lin_key, peer.lin_value),
                                        conv.in_proj_weight.chunk(3), conv.in_proj_bias.chunk(3)):
            linear.weight.copy_(weight)
            linear.bias.copy_(bias)
        conv.eval(), peer.eval()
        return check_agreement(f"sparse {nodes}, {edges}, {channels}, {heads}", conv(x, edge_index),
                               conv.out_proj(peer(x, edge_index)))


def sparse_setup(layer: str, nodes: int, edges: int, channels: int, heads: int, device: torch.device):
    x, edge_index = sparse_inputs(nodes, edges, channels, device)
    if layer == "pyg":
        module = TransformerConv(channels, channels // heads, heads=heads).to(device)
        return lambda: module(x, edge_index).sum().backward()
    module = SelfAttentionConv(channels, heads).to(device)
    if layer == "ours-new":
        return lambda: module(x, edge_index.clone()).sum().backward()
    return lambda: module(x, edge_index).sum().backward()


def saved_bytes(step) -> int:
    """Bytes of the distinct storages autograd keeps for the backward pass."""
    storages = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        step()
    return sum(storages.values())


def resident_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def measure_memory(layer: str, nodes: int, edges: int, channels: int, heads: int, device: torch.device) -> dict:
    """Run in a subprocess: the peak memory of one forward+backward."""
    torch.set_num_threads(1)
    step = sparse_setup(layer, nodes, edges, channels, heads, device)
    step()
    saved = saved_bytes(step)
    if device.type == "cuda":
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        step()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - before
    else:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # Resets the resident high-water mark to the current size.
        before = resident_kib("VmRSS")
        step()
        peak = (resident_kib("VmHWM") - before) * 1024
    return {"peak": peak, "saved": saved}


def memory_in_subprocess(layer: str, nodes: int, edges: int, channels: int, heads: int,
                         device: torch.device) -> dict:
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
    args = [sys.executable, __file__, "--memory-of", layer, str(nodes), str(edges), str(channels),
            str(heads), "--device", str(device)]
    result = subprocess.run(args, env=env, capture_output=True, text=True, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def bench_sparse(repeats: int, device: torch.device, edges: int) -> None:
    print("\nSparse path (edge-wise softmax) vs PyG TransformerConv, forward+backward; ours given the same "
          "edge_index each step (kept: graph prepared once) or a new one (new: prepared each step)")
    print(f"{'nodes, edges, channels, heads':<30} {'graph':<5} {'ours ms':>9} {'PyG ms':>9} {'time':>6} "
          f"{'ours MiB':>9} {'PyG MiB':>9} {'peak':>6} {'saved ours/PyG MiB':>19}")
    layers = ("ours", "ours-new", "pyg")
    for nodes, channels, heads in [(10_000, 64, 4), (20_000, 128, 8)]:
        check_sparse(nodes, edges, channels, heads, device)
        t = median_times({layer: sparse_setup(layer, nodes, edges, channels, heads, device) for layer in layers},
                         repeats, device, warmup=2)
        memory = {layer: memory_in_subprocess(layer, nodes, edges, channels, heads, device) for layer in layers}
        mib = {layer: memory[layer]["peak"] / 2**20 for layer in memory}
        saved = {layer: memory[layer]["saved"] / 2**20 for layer in memory}
        label = f"{nodes}, {edges}, {channels}, {heads}"
        for ours, graph in (("ours", "kept"), ("ours-new", "new")):
            print(f"{label:<30} {graph:<5} {t[ours] * 1e3:9.1f} {t['pyg'] * 1e3:9.1f} {t[ours] / t['pyg']:6.2f} "
                  f"{mib[ours]:9.1f} {mib['pyg']:9.1f} {mib[ours] / mib['pyg']:6.2f} "
                  f"{saved[ours]:9.1f}/{saved['pyg']:.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=at_least(1), default=20)
    parser.add_argument("--edges", type=at_least(1), default=200_000)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=at_least(1), default=None, help="torch threads (default: torch's)")
    parser.add_argument("--only", choices=["dense", "sparse"], default=None)
    parser.add_argument("--memory-of", nargs=5, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    device = resolve_device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.memory_of:
        layer, *numbers = args.memory_of
        print(json.dumps(measure_memory(layer, *map(int, numbers), device=device)))
        return
    print(f"torch {torch.__version__}, {device}, {torch.get_num_threads()} threads")
    if args.only != "sparse":
        bench_dense(args.repeats, device)
    if args.only != "dense":
        bench_sparse(args.repeats, device, args.edges)


if __name__ == "__main__":
    run_script(main)
