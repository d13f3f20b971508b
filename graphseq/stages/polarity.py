"""Stages of the sentence-classification pipeline (``polarity-bilstm``): the
sentence-polarity snippets as word chains with a fixed, seeded train/test
split, a bidirectional chain-LSTM classifier, and its training and test.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor
from tqdm import tqdm

from ..checks import at_least, between, fraction, non_negative, one_of, positive, probability
from ..data.polarity import load_polarity, split_indices
from ..data.text import Vocabulary, tokenize
from ..errors import GraphseqError
from ..graphs import chain, lengths_to_batch
from ..models.sentence import POOLS, SentenceClassifier
from ..seeding import MAX_SEED
from .registry import stage


@dataclass
class Sentences:
    vocab: Vocabulary
    train: List[Tensor]  # word ids of each sentence
    train_labels: Tensor
    test: List[Tensor]
    test_labels: Tensor


@stage("sentence_polarity", checks={"test_fraction": fraction, "split_seed": between(0, MAX_SEED),
                                    "min_freq": at_least(1)})
def sentence_polarity(ctx, *, test_fraction: float = 0.1, split_seed: int = 0, min_freq: int = 1) -> None:
    """The 10,662 snippets, lower-cased and split into words, with a random
    split fixed by ``split_seed`` (not the run's seed, so every run is tested
    on the same sentences). The vocabulary holds the training words seen at
    least ``min_freq`` times; other words become ``<unk>``."""
    sentences, labels = load_polarity(ctx.data_root, ctx.data_mirror)
    labels = torch.as_tensor(labels, dtype=torch.long)
    words = [tokenize(s) for s in sentences]
    train, test = split_indices(len(words), test_fraction, split_seed)
    vocab = Vocabulary.of_words((words[i] for i in train.tolist()), min_freq=min_freq)
    # A sentence without words still needs a node: it reads as one unknown word.
    encoded = [vocab.encode(w or [vocab.unknown]) for w in words]
    ctx.data = Sentences(vocab, [encoded[i] for i in train.tolist()], labels[train],
                         [encoded[i] for i in test.tolist()], labels[test])
    ctx.log.info(f"sentence polarity: {len(train)} training and {len(test)} test sentences "
                 f"(split seed {split_seed}), {len(vocab)} words in the vocabulary")


@stage("bilstm_classifier", checks={"embedding_dim": at_least(1), "hidden_size": at_least(1),
                                    "num_layers": at_least(1), "dropout": probability, "pool": one_of(*POOLS)})
def bilstm_classifier(ctx, *, embedding_dim: int = 300, hidden_size: int = 150, num_layers: int = 1,
                      dropout: float = 0.5, pool: str = "max") -> None:
    """A bidirectional chain-LSTM sentence classifier."""
    data = ctx.require("data", "bilstm_classifier")
    num_classes = int(data.train_labels.max()) + 1
    ctx.model = SentenceClassifier(len(data.vocab), num_classes, embedding_dim, hidden_size,
                                   num_layers, dropout, pool).to(ctx.device)


def sentence_batch(sentences: List[Tensor], device: torch.device) -> Tuple[Tensor, Tensor, Tensor]:
    """Word ids, chain edges and the sentence of each word, for a list of sentences."""
    lengths = [s.numel() for s in sentences]
    return (torch.cat(sentences).to(device), chain(lengths).to(device),
            lengths_to_batch(lengths).to(device))


def length_buckets(lengths: Tensor, batch_size: int, generator: torch.Generator,
                   pool: int = 20) -> List[Tensor]:
    """Shuffled batches of similar-length sentences: a chain layer takes as
    many steps as its longest chain, so mixing lengths wastes steps. The
    shuffled ids are sorted by length within pools of ``pool`` batches."""
    order = torch.randperm(lengths.numel(), generator=generator)
    batches = []
    for start in range(0, order.numel(), batch_size * pool):
        chunk = order[start:start + batch_size * pool]
        chunk = chunk[lengths[chunk].argsort(stable=True)]
        batches += list(chunk.split(batch_size))
    return [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]


@torch.no_grad()
def accuracy(model: SentenceClassifier, sentences: List[Tensor], labels: Tensor,
             device: torch.device, batch_size: int = 500) -> float:
    model.eval()
    correct = 0
    for start in range(0, len(sentences), batch_size):
        part = sentences[start:start + batch_size]
        tokens, edge_index, batch = sentence_batch(part, device)
        predicted = model(tokens, edge_index, batch, len(part)).argmax(dim=1).cpu()
        correct += int((predicted == labels[start:start + batch_size]).sum())
    return correct / max(len(sentences), 1)


@stage("train_sentences", checks={"epochs": at_least(1), "batch_size": at_least(1), "lr": positive,
                                  "weight_decay": non_negative, "clip": positive, "max_batches": non_negative})
def train_sentences(ctx, *, epochs: int = 6, batch_size: int = 50, lr: float = 2e-3,
                    weight_decay: float = 0.0, clip: float = 5.0, max_batches: int = 0) -> None:
    """Adam on the training sentences for ``epochs`` epochs, gradients
    clipped to norm ``clip``; reports the accuracy on the test sentences
    after the last epoch (``max_batches`` > 0 stops each epoch early, for
    smoke tests)."""
    model, data = ctx.require("model", "train_sentences"), ctx.require("data", "train_sentences")
    if epochs < 1:
        raise GraphseqError(f"epochs must be at least 1, got {epochs}")
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    generator = torch.Generator().manual_seed(ctx.seed)
    lengths = torch.tensor([s.numel() for s in data.train])
    for epoch in range(1, epochs + 1):
        model.train()
        batches = length_buckets(lengths, batch_size, generator)
        if max_batches > 0:
            batches = batches[:max_batches]
        total, seen = 0.0, 0
        bar = tqdm(batches, desc=f"epoch {epoch}/{epochs}", disable=ctx.quiet, dynamic_ncols=True)
        for ids in bar:
            ids = ids.tolist()
            tokens, edge_index, batch = sentence_batch([data.train[i] for i in ids], ctx.device)
            logits = model(tokens, edge_index, batch, len(ids))
            loss = F.cross_entropy(logits, data.train_labels[ids].to(ctx.device))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            optimizer.step()
            loss = float(loss.detach())
            total, seen = total + loss * len(ids), seen + len(ids)
            bar.set_postfix(loss=f"{loss:.3f}")
        ctx.log.info(f"epoch {epoch}: training loss {total / max(seen, 1):.4f}")
    test = accuracy(model, data.test, data.test_labels, ctx.device)
    ctx.metrics.update(test_accuracy=test, train_loss=total / max(seen, 1), epochs=epochs)
    ctx.log.info(f"test accuracy {test:.4f} on {len(data.test)} sentences")
