"""Times ChainLSTM and ChainGRU against torch.nn.LSTM and torch.nn.GRU on the
same variable-length batch (forward and backward), side by side in one
process, and prints the ratios.

torch's layers get the batch in both forms a user picks from, built once
outside the timed loop the way a data loader hands them over:

- padded ``[max_length, batch, features]``: the fastest path on a CPU (oneDNN's
  fused LSTM, or ATen's own loop when that is faster; the faster of the two,
  and of ``batch_first`` or not, counts), though it computes every padding
  position too;
- packed (a :class:`~torch.nn.utils.rnn.PackedSequence` of sequences sorted
  by length, so no reordering is timed).

graphseq gets the chains (``edge_index``, ``batch``) and their step order
(:func:`graphseq.nn.chain_schedule`), the counterpart of a PackedSequence's
``batch_sizes``, also made once; the time with the schedule found inside the
call is printed too. Every step of ours passes its messages through PyG's
``propagate``.

    python benchmarks/bench_recurrent.py [--batch 64] [--max-length 100]
        [--min-length 1] [--input 64] [--hidden 256] [--repeats 30] [--threads 1] [--clock wall]
"""
from __future__ import annotations

import argparse
from typing import Callable, Dict

import torch
from torch.nn.utils.rnn import pack_sequence, pad_packed_sequence, pad_sequence

from graphseq.graphs import chain, lengths_to_batch
from graphseq.nn import ChainGRU, ChainLSTM, chain_schedule
from graphseq.devices import resolve_device
from timing import CLOCKS, at_least, check_agreement, median_times, run_script


CELLS = ("lstm", "gru")


def loss_of(out, state) -> torch.Tensor:
    """What every contender's backward starts from: all outputs and the final state."""
    h_n = state[0] if isinstance(state, tuple) else state
    out = out.data if hasattr(out, "batch_sizes") else out
    return out.square().mean() + h_n.square().mean()


def contenders(args, device) -> Dict[str, Dict[str, Callable[[], None]]]:
    """Per cell, named closures that each run one forward and backward pass."""
    generator = torch.Generator().manual_seed(0)
    lengths = torch.randint(args.min_length, args.max_length + 1, (args.batch,), generator=generator).tolist()
    sequences = [torch.randn(n, args.input, generator=generator).to(device) for n in lengths]
    order = sorted(range(args.batch), key=lengths.__getitem__, reverse=True)
    packed = pack_sequence([sequences[i] for i in order])
    padded = pad_sequence(sequences)  # [max(lengths), batch, input]
    padded_batch_first = padded.transpose(0, 1).contiguous()
    x = torch.cat(sequences)
    edge_index, batch = chain(lengths).to(device), lengths_to_batch(lengths).to(device)
    schedule = chain_schedule(edge_index, x.size(0), batch)
    args.nodes, args.padded = x.size(0), padded.size(0) * padded.size(1)

    def check(cell, ours, theirs):
        """Ours against torch's on packed input (the same computation: outputs
        and final states) and, one direction only, on padded input (outputs
        at the real positions), before any timing."""
        with torch.no_grad():
            out, state = ours(x, edge_index, batch, schedule=schedule)
            packed_out, packed_state = theirs(packed)
            padded_out, _ = theirs(padded)
        unpacked = pad_packed_sequence(packed_out)[0]  # [max(lengths), batch, out], longest first
        place = {i: k for k, i in enumerate(order)}
        state, packed_state = (state, packed_state) if isinstance(state, tuple) else ((state,), (packed_state,))
        check_agreement(f"{cell} vs torch.nn.{cell[5:]}, packed",
                        [out, *(s[:, order] for s in state)],
                        [torch.cat([unpacked[:n, place[i]] for i, n in enumerate(lengths)]), *packed_state])
        if not args.bidirectional:  # backwards, torch's padded run starts in the padding
            check_agreement(f"{cell} vs torch.nn.{cell[5:]}, padded", out,
                            torch.cat([padded_out[:n, i] for i, n in enumerate(lengths)]))

    def step(model, *inputs, mkldnn=True, **kwargs):
        def run():
            model.zero_grad(set_to_none=True)
            with torch.backends.mkldnn.flags(enabled=mkldnn):
                loss_of(*model(*inputs, **kwargs)).backward()
        return run

    options = dict(num_layers=args.layers, bidirectional=args.bidirectional)
    cells = {}
    for ours_class, theirs_class in ((ChainLSTM, torch.nn.LSTM), (ChainGRU, torch.nn.GRU)):
        if ours_class.__name__[5:].lower() not in args.cells:
            continue
        torch.manual_seed(0)
        ours = ours_class(args.input, args.hidden, **options).to(device)
        theirs = theirs_class(args.input, args.hidden, **options).to(device)
        theirs_batch_first = theirs_class(args.input, args.hidden, batch_first=True, **options).to(device)
        theirs.load_state_dict(ours.state_dict())
        theirs_batch_first.load_state_dict(ours.state_dict())
        check(ours_class.__name__, ours, theirs)
        runs = {
            "ours": step(ours, x, edge_index, batch, schedule=schedule),
            "ours (schedule in the call)": step(ours, x, edge_index, batch),
            "padded": step(theirs, padded),
            "padded, batch_first": step(theirs_batch_first, padded_batch_first),
            "packed": step(theirs, packed),
        }
        if device.type == "cpu":  # oneDNN or ATen's loop, whichever is faster
            runs["padded, no oneDNN"] = step(theirs, padded, mkldnn=False)
            runs["padded, batch_first, no oneDNN"] = step(theirs_batch_first, padded_batch_first, mkldnn=False)
            runs["packed, no oneDNN"] = step(theirs, packed, mkldnn=False)
        cells[ours_class.__name__] = runs
    return cells


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=at_least(1), default=64)
    parser.add_argument("--min-length", type=at_least(1), default=1)
    parser.add_argument("--max-length", type=at_least(1), default=100)
    parser.add_argument("--input", type=at_least(1), default=64)
    parser.add_argument("--hidden", type=at_least(1), default=256)
    parser.add_argument("--layers", type=at_least(1), default=1)
    parser.add_argument("--bidirectional", action="store_true")
    parser.add_argument("--cells", default="lstm,gru", help=f"comma-separated: {', '.join(CELLS)}")
    parser.add_argument("--repeats", type=at_least(1), default=30)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--threads", type=at_least(0), default=1, help="torch threads (0: leave as is)")
    parser.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                        help="wall time, or this process's CPU time, all threads' (steadier on a busy machine)")
    args = parser.parse_args()
    args.cells = [cell for cell in args.cells.split(",") if cell]
    unknown = [cell for cell in args.cells if cell not in CELLS]
    if unknown:
        parser.error(f"--cells: unknown cell(s) {', '.join(unknown)}; choose from {', '.join(CELLS)}")
    if not args.cells:
        parser.error(f"--cells: name at least one of {', '.join(CELLS)}")
    if args.min_length > args.max_length:
        parser.error(f"--min-length {args.min_length} is above --max-length {args.max_length}")

    if args.threads:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    clock = CLOCKS[args.clock]
    cells = contenders(args, device)

    steps = {(cell, name): run for cell, runs in cells.items() for name, run in runs.items()}
    medians = median_times(steps, args.repeats, device, clock, warmup=3)

    print(f"batch {args.batch}, lengths {args.min_length}..{args.max_length} ({args.nodes} nodes, padded "
          f"{args.padded}), {args.input} -> {args.hidden}, layers {args.layers}, "
          f"bidirectional {args.bidirectional}, on {device} ({torch.get_num_threads()} threads), "
          f"median {args.clock} time of {args.repeats} forward+backward passes")
    for cell, runs in cells.items():
        median = {name: medians[cell, name] for name in runs}
        peer = "torch.nn." + cell[5:]
        for name, seconds in median.items():
            label = cell if name.startswith("ours") else peer
            print(f"  {label + ' ' + name:<44} {seconds * 1e3:9.2f} ms")
        padded = min(seconds for name, seconds in median.items() if name.startswith("padded"))
        packed = min(seconds for name, seconds in median.items() if name.startswith("packed"))
        print(f"  ratio {cell} / {peer} padded (its fastest): {median['ours'] / padded:.2f}"
              f"   / packed: {median['ours'] / packed:.2f}"
              f"   (schedule in the call: {median['ours (schedule in the call)'] / padded:.2f}"
              f" and {median['ours (schedule in the call)'] / packed:.2f})")


if __name__ == "__main__":
    run_script(main)
