"""Times ChainLSTM and ChainGRU against torch.nn.LSTM and torch.nn.GRU on
the same variable-length batch (forward and backward), side by side in one
process, and prints the ratios. torch gets the batch as a PackedSequence,
graphseq as chain graphs with a ``batch`` vector; both are built once
outside the timed loop, the way a data loader would hand them over.

    python benchmarks/bench_recurrent.py [--batch 64] [--max-length 100]
        [--input 64] [--hidden 256] [--repeats 30] [--device auto] [--threads 0]
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch.nn.utils.rnn import pack_sequence

from graphseq.graphs import chain, lengths_to_batch
from graphseq.nn import ChainGRU, ChainLSTM
from graphseq.pipeline import resolve_device


def step(model, inputs):
    """One forward and backward pass; the loss touches every output and the final state."""
    out, state = model(*inputs)
    h_n = state[0] if isinstance(state, tuple) else state
    out = out.data if hasattr(out, "batch_sizes") else out
    (out.square().mean() + h_n.square().mean()).backward()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--max-length", type=int, default=100)
    parser.add_argument("--input", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=1)
    parser.add_argument("--bidirectional", action="store_true")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: leave as is)")
    args = parser.parse_args()

    if args.threads:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    generator = torch.Generator().manual_seed(0)
    lengths = torch.randint(1, args.max_length + 1, (args.batch,), generator=generator).tolist()
    sequences = [torch.randn(n, args.input, generator=generator).to(device) for n in lengths]
    packed = pack_sequence(sequences, enforce_sorted=False)
    x = torch.cat(sequences)
    edge_index, batch = chain(lengths).to(device), lengths_to_batch(lengths).to(device)

    options = dict(num_layers=args.layers, bidirectional=args.bidirectional)
    contenders = {}
    for ours_class, theirs_class in ((ChainLSTM, torch.nn.LSTM), (ChainGRU, torch.nn.GRU)):
        torch.manual_seed(0)
        ours = ours_class(args.input, args.hidden, **options).to(device)
        theirs = theirs_class(args.input, args.hidden, **options).to(device)
        theirs.load_state_dict(ours.state_dict())
        contenders[ours_class.__name__] = (ours, (x, edge_index, batch))
        contenders[f"torch.nn.{theirs_class.__name__}"] = (theirs, (packed,))

    times = {name: [] for name in contenders}
    warm_up = 3
    for repeat in range(args.repeats + warm_up):
        for name, (model, inputs) in contenders.items():  # Interleaved, so load hits all.
            model.zero_grad(set_to_none=True)
            if device.type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            step(model, inputs)
            if device.type == "cuda":
                torch.cuda.synchronize()
            if repeat >= warm_up:
                times[name].append(time.perf_counter() - start)

    median = {name: statistics.median(t) for name, t in times.items()}
    print(f"batch {args.batch}, lengths 1..{args.max_length} ({sum(lengths)} nodes), "
          f"{args.input} -> {args.hidden}, layers {args.layers}, "
          f"bidirectional {args.bidirectional}, on {device} ({torch.get_num_threads()} threads), "
          f"median of {args.repeats} forward+backward passes")
    for name, seconds in median.items():
        print(f"  {name:<16} {seconds * 1e3:9.2f} ms")
    for ours, theirs in (("ChainLSTM", "torch.nn.LSTM"), ("ChainGRU", "torch.nn.GRU")):
        print(f"  ratio {ours} / {theirs}: {median[ours] / median[theirs]:.2f}")


if __name__ == "__main__":
    main()
