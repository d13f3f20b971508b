"""Times charlm-lstm's training step against the same model written in plain
torch, side by side in one process, and prints the ratio.

The step is the pipeline's (``tbptt``): ``batch`` streams read ``window``
characters at a time, the state carried from window to window and cut from
the gradient, cross-entropy, backward, the gradient norm clipped, an Adam
step. graphseq's side is :class:`graphseq.models.CharLM` (a ChainLSTM
stepped along one chain per stream) as the pipeline builds it; the peer is
``nn.Embedding``, ``nn.LSTM(batch_first=True)`` and ``nn.Linear`` with the
same weights, fed the same windows, on its fastest path (oneDNN's fused LSTM
or ATen's own loop, whichever is faster here). Both sides' losses and
gradients are checked equal before anything is timed.

    python benchmarks/bench_charlm.py [--batch 32] [--window 64] [--hidden 256]
        [--embedding 64] [--vocab 65] [--repeats 20] [--threads 1] [--clock wall]
"""
from __future__ import annotations

import argparse
from typing import Callable, Dict, List, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from graphseq.devices import resolve_device
from graphseq.models.charlm import CharLM, detach_state
from timing import CLOCKS, at_least, check_agreement, median_times, run_script

CLIP = 5.0


class PlainCharLM(nn.Module):
    """The char-rnn model as a user of torch writes it."""

    def __init__(self, vocab: int, embedding: int, hidden: int):
        super().__init__()
        self.embedding = nn.Embedding(vocab, embedding)
        self.lstm = nn.LSTM(embedding, hidden, batch_first=True)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, tokens, state=None):
        hidden, state = self.lstm(self.embedding(tokens), state)  # [batch, window, hidden]
        return self.head(hidden), state


def copy_weights(ours: CharLM, theirs: PlainCharLM) -> None:
    """The peer gets our weights, name for name (ChainLSTM keeps nn.LSTM's names)."""
    theirs.embedding.load_state_dict(ours.embedding.state_dict())
    theirs.lstm.load_state_dict(ours.rnn.state_dict())
    theirs.head.load_state_dict(ours.head.state_dict())


def trainer(model: nn.Module, forward: Callable, windows: List[Tuple[torch.Tensor, torch.Tensor]],
            mkldnn: bool = True) -> Callable[[], torch.Tensor]:
    """One training step per call, on the next window, carrying the state: the tbptt stage's step."""
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    carried = {"state": None, "k": 0}

    def step() -> torch.Tensor:
        inputs, targets = windows[carried["k"] % len(windows)]
        carried["k"] += 1
        optimizer.zero_grad(set_to_none=True)
        with torch.backends.mkldnn.flags(enabled=mkldnn):
            logits, state = forward(inputs, carried["state"])
            loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
            loss.backward()
        carried["state"] = detach_state(state)
        nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        optimizer.step()
        return loss.detach()

    return step


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=at_least(1), default=32, help="streams (the pipeline's batch_size)")
    parser.add_argument("--window", type=at_least(1), default=64, help="characters per step")
    parser.add_argument("--vocab", type=at_least(2), default=65, help="characters (tiny-shakespeare has 65)")
    parser.add_argument("--embedding", type=at_least(1), default=64)
    parser.add_argument("--hidden", type=at_least(1), default=256)
    parser.add_argument("--windows", type=at_least(1), default=8, help="distinct windows the steps cycle through")
    parser.add_argument("--repeats", type=at_least(1), default=20)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--threads", type=at_least(0), default=1, help="torch threads (0: leave as is)")
    parser.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                        help="wall time, or this process's CPU time, all threads' (steadier on a busy machine)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)

    generator = torch.Generator().manual_seed(0)
    text = torch.randint(0, args.vocab, (args.batch, args.windows * args.window + 1), generator=generator)
    windows = [(text[:, k * args.window:(k + 1) * args.window].to(device),
                text[:, k * args.window + 1:(k + 1) * args.window + 1].to(device)) for k in range(args.windows)]

    def models() -> Tuple[CharLM, PlainCharLM]:
        torch.manual_seed(0)
        ours = CharLM(args.vocab, "lstm", args.embedding, args.hidden).to(device)
        theirs = PlainCharLM(args.vocab, args.embedding, args.hidden).to(device)
        copy_weights(ours, theirs)
        return ours, theirs

    # Equal before timing: two steps' losses, and the weights after them.
    ours, theirs = models()
    check = [trainer(ours, ours.forward_windows, windows), trainer(theirs, theirs, windows)]
    losses = [[step() for step in check] for _ in range(2)]
    check_agreement("the losses of two steps", [ours for ours, _ in losses], [theirs for _, theirs in losses])
    check_agreement("the weights after two steps", [p for p in ours.parameters()],
                    [theirs.embedding.weight, *theirs.lstm.parameters(), *theirs.head.parameters()])

    ours, theirs = models()
    steps: Dict[str, Callable[[], object]] = {
        "ours": trainer(ours, ours.forward_windows, windows),
        "plain torch": trainer(theirs, theirs, windows),
    }
    if device.type == "cpu":  # oneDNN's fused LSTM, or ATen's own loop, whichever is faster
        plain = models()[1]
        steps["plain torch, no oneDNN"] = trainer(plain, plain, windows, mkldnn=False)
    medians = median_times(steps, args.repeats, device, CLOCKS[args.clock], warmup=3)

    print(f"charlm-lstm training step: {args.batch} streams x {args.window} characters, vocabulary "
          f"{args.vocab}, {args.embedding} -> LSTM {args.hidden}, Adam, clip {CLIP}, on {device} "
          f"({torch.get_num_threads()} threads), median {args.clock} time of {args.repeats} steps")
    for name, seconds in medians.items():
        print(f"  {name:<26} {seconds * 1e3:9.2f} ms")
    peer = min(seconds for name, seconds in medians.items() if name != "ours")
    print(f"  ratio ours / plain torch (its fastest): {medians['ours'] / peer:.2f}")


if __name__ == "__main__":
    run_script(main)
