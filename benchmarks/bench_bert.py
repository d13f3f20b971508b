"""The BERT encoder of bert-pretrain / bert-polarity (Transformer encoder
layers on fully connected token graphs) against ``torch.nn.TransformerEncoder``
with the same weights on the same sequences, padded, in one process,
interleaved.

The sequences are real: the sentence-polarity snippets cut into WordPiece
pieces by a tokenizer trained on them (the pipelines' 8,000 pieces), as
fine-tuning reads them (``[CLS] sentence [SEP]``) and as pretraining reads
them (``[CLS] A [SEP] B [SEP]``, two snippets, cut at ``max_len``), a seeded
batch of each; and, for the layers' own ratio, a batch of ``max_len`` pieces
each, where padding costs torch nothing. Only the encoder layers are timed: the embeddings and heads
are the same code for both. Ours reads the nodes of the batch (no padding);
torch reads a padded ``[batch, longest, hidden]`` tensor with
``src_key_padding_mask`` (its input as a user holds it; the padding is not
timed). Training: forward and backward in training mode (dropout on).
Inference: forward under ``no_grad`` in eval mode, against torch's plain
path and its nested-tensor fast path (``enable_nested_tensor=True``, which
skips the padding), whichever is faster counted as the peer. Ours and both
of torch's paths are checked to give the same outputs in eval mode before
they are timed; the script stops if they do not.

    python benchmarks/bench_bert.py [--batch 64] [--repeats 20] [--threads 1] [--clock cpu]
"""
from __future__ import annotations

import argparse
import warnings
from pathlib import Path

import torch

from graphseq.data.polarity import load_polarity
from graphseq.data.pretraining import collate
from graphseq.data.wordpiece import WordPieceTokenizer
from graphseq.errors import GraphseqError
from graphseq.models.bert import BertConfig, BertEncoder
from graphseq.data.places import default_data_mirror, default_data_root
from graphseq.devices import resolve_device
from timing import CLOCKS, at_least, check_agreement, median_times, run_script


def workloads(sentences, tokenizer: WordPieceTokenizer, batch: int, max_len: int):
    """Seeded batches of piece ids and segments: single sentences, sentence
    pairs and sequences of ``max_len`` pieces, ``batch`` of each. A batch
    larger than the sentences make is refused: the pairs (two sentences
    each) or the full-length sequences (cut from all the pieces) would run
    out, and the workloads would be printed as what they are not."""
    generator = torch.Generator().manual_seed(0)
    cls, sep = tokenizer.cls_id, tokenizer.sep_id
    order = torch.randperm(len(sentences), generator=generator).tolist()
    stream = [piece for p in tokenizer.encode_batch([sentences[i] for i in order]) for piece in p]
    limit = min(len(sentences) // 2, len(stream) // (max_len - 2))
    if batch > limit:
        raise GraphseqError(f"--batch {batch} is more than the data make; use at most {limit}: "
                            f"{len(sentences) // 2} sentence pairs from {len(sentences)} sentences, "
                            f"{len(stream) // (max_len - 2)} sequences of {max_len} pieces from their "
                            f"{len(stream)} pieces")
    pieces = tokenizer.encode_batch([sentences[i] for i in order[:2 * batch]])
    singles = [[cls] + p[:max_len - 2] + [sep] for p in pieces[:batch]]
    pairs, segments = [], []
    for a, b in zip(pieces[:batch], pieces[batch:]):
        a, b = a[:max_len // 2 - 2], b[:max_len - 3 - min(len(a), max_len // 2 - 2)]
        pairs.append([cls] + a + [sep] + b + [sep])
        segments.append([0] * (len(a) + 2) + [1] * (len(b) + 1))
    full = [[cls] + stream[i * (max_len - 2):(i + 1) * (max_len - 2)] + [sep] for i in range(batch)]
    return {"fine-tuning (sentences)": collate(singles), "pretraining (sentence pairs)": collate(pairs, segments),
            f"no padding (every sequence {max_len} pieces: the layers alone)": collate(full)}


def padded(x: torch.Tensor, sizes: list[int]):
    out = x.new_zeros(len(sizes), max(sizes), x.size(1))
    padding = torch.ones(len(sizes), max(sizes), dtype=torch.bool, device=x.device)
    for i, part in enumerate(x.split(sizes)):
        out[i, :len(part)], padding[i, :len(part)] = part, False
    return out, padding


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=at_least(1), default=64, help="sequences a batch (the pipelines: 64 and 32)")
    parser.add_argument("--repeats", type=at_least(1), default=20)
    parser.add_argument("--threads", type=at_least(1), default=1)
    parser.add_argument("--clock", choices=("wall", "cpu"), default="cpu",
                        help="time wall-clock or this process's CPU seconds (less disturbed by other jobs)")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--data-root", default=default_data_root())
    parser.add_argument("--data-mirror", default=default_data_mirror())
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", message="The PyTorch API of nested tensors")  # torch's fast path says it
    device = resolve_device(args.device)
    clock = CLOCKS[args.clock]
    sentences, _ = load_polarity(Path(args.data_root), Path(args.data_mirror) if args.data_mirror else None)
    tokenizer = WordPieceTokenizer.train(sentences, vocab_size=8000, min_frequency=2)
    # bert-pretrain's model: hidden 128, 2 post-norm layers of 4 heads, feed-forward 512, GELU.
    config = BertConfig(tokenizer.vocab_size, hidden_size=128, num_layers=2, num_heads=4, feedforward_size=512,
                        max_len=64, dropout=0.1, activation="gelu")
    torch.manual_seed(0)
    ours = BertEncoder(config).to(device)
    layer = torch.nn.TransformerEncoderLayer(config.hidden_size, config.num_heads, config.feedforward_size,
                                             config.dropout, activation="gelu", batch_first=True)
    theirs = {nested: torch.nn.TransformerEncoder(layer, config.num_layers, enable_nested_tensor=nested).to(device)
              for nested in (False, True)}
    for peer in theirs.values():
        peer.load_state_dict({k: v for k, v in ours.state_dict().items() if k.startswith("layers.")})

    batches = workloads(sentences, tokenizer, args.batch, config.max_len)  # Refuses a --batch too large first.
    print(f"BERT encoder layers (hidden {config.hidden_size}, {config.num_layers} layers, {config.num_heads} heads, "
          f"feed-forward {config.feedforward_size}) vs torch.nn.TransformerEncoder, same weights, {args.batch} "
          f"sequences, on {device} ({torch.get_num_threads()} threads), median {args.clock} time of "
          f"{args.repeats} interleaved passes")
    for name, graphs in batches.items():
        graphs = graphs.to(device)
        sizes = torch.bincount(graphs.batch).tolist()
        with torch.no_grad():
            x = ours.embed(graphs.tokens, graphs.segments, graphs.positions)
        x_padded, padding = padded(x, sizes)

        def encode(x):
            for layer in ours.layers:
                x = layer(x, batch=graphs.batch)
            return x

        ours.eval(), [peer.eval() for peer in theirs.values()]
        with torch.no_grad():
            difference = max(check_agreement(f"{name}, torch{' nested' if nested else ''}", encode(x),
                                             peer(x_padded, src_key_padding_mask=padding)[~padding])
                             for nested, peer in theirs.items())
        x.requires_grad_(True)
        x_padded.requires_grad_(True)

        def train(forward):
            def step():
                forward().pow(2).mean().backward()
            return step

        ours.train(), theirs[False].train()
        training = median_times({
            "ours": train(lambda: encode(x)),
            "torch": train(lambda: theirs[False](x_padded, src_key_padding_mask=padding)),
        }, args.repeats, device, clock)
        ours.eval(), [peer.eval() for peer in theirs.values()]

        def infer(forward):
            def step():
                with torch.no_grad():
                    forward()
            return step

        inference = median_times({
            "ours": infer(lambda: encode(x)),
            "torch": infer(lambda: theirs[False](x_padded, src_key_padding_mask=padding)),
            "torch nested": infer(lambda: theirs[True](x_padded, src_key_padding_mask=padding)),
        }, args.repeats, device, clock)
        peer = min(inference["torch"], inference["torch nested"])
        print(f"\n{name}: {len(sizes)} sequences of {min(sizes)}-{max(sizes)} pieces ({sum(sizes)} nodes, "
              f"{len(sizes) * max(sizes)} padded), largest output difference {difference:.1e}")
        print(f"  training  (forward+backward)  ours {training['ours'] * 1e3:8.2f} ms   torch "
              f"{training['torch'] * 1e3:8.2f} ms   ours/torch {training['ours'] / training['torch']:.2f}")
        print(f"  inference (no_grad, eval)     ours {inference['ours'] * 1e3:8.2f} ms   torch "
              f"{inference['torch'] * 1e3:8.2f} ms   nested {inference['torch nested'] * 1e3:8.2f} ms   "
              f"ours/fastest {inference['ours'] / peer:.2f}")


if __name__ == "__main__":
    run_script(main)
