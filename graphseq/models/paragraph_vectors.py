r"""Supervised paragraph vectors (Park, Cho and Kang, IEEE Access 2019,
https://doi.org/10.1109/ACCESS.2019.2901933): Le and Mikolov's paragraph
vectors (Doc2Vec) with a vector for each class label beside the vectors of
words and documents, trained with word2vec's negative sampling.

Each occurrence ``t`` of a word is a target node of a bipartite graph. Its
context words ``w_{t+j}`` (``0 < |j| <= window``), its document ``d`` and,
in training, its document's class ``c`` are source nodes with an edge to it:

- **SPV-DM** (distributed memory) aggregates the messages of all its sources
  by their mean, the CBOW average, and predicts the word from it:
  :math:`\log \sigma(\mathbf{u}_{w_t}^\top \mathbf{h}_t) +
  \sum_{n} \log \sigma(-\mathbf{u}_{n}^\top \mathbf{h}_t)`,
  :math:`\mathbf{h}_t = \mathrm{mean}(\{\mathbf{v}_{w_{t+j}}\} \cup
  \{\mathbf{d}, \mathbf{c}\})`.
- **SPV-DBOW** (distributed bag of words) lets each source predict the word
  on its own (no aggregation): the document and the class vectors predict
  every word of the document, :math:`\log p(w_t \mid \mathbf{d}) + \log
  p(w_t \mid \mathbf{c})`; with ``train_words`` the context words predict it
  too (skip-gram, gensim's ``dbow_words``), which is the objective
  :math:`\sum_t \sum_j [\log p(w_t \mid w_{t+j}) + \log p(w_t \mid d) +
  \log p(w_t \mid c)]`.

:math:`\mathbf{u}` are the output vectors of negative sampling, and the
``negative`` noise words :math:`n` are drawn from the unigram distribution
raised to 3/4, as word2vec does. A new document gets its vector by
inference: the same training, with every vector but the new documents'
frozen and without a class node (its class is what we want to know).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import SimpleConv

from ..errors import GraphseqError

MODES = ("dm", "dbow")


@dataclass
class FlatCorpus:
    """Documents as one stream of word ids with the document of each word."""

    words: Tensor  # [num_tokens]
    document: Tensor  # [num_tokens]
    num_documents: int

    @classmethod
    def of(cls, documents: Sequence[Sequence[int]]) -> "FlatCorpus":
        lengths = torch.tensor([len(d) for d in documents], dtype=torch.long)
        words = torch.tensor([w for d in documents for w in d], dtype=torch.long)
        document = torch.repeat_interleave(torch.arange(len(documents)), lengths)
        return cls(words, document, len(documents))


def context_edges(corpus: FlatCorpus, targets: Tensor, window: int,
                  generator: Optional[torch.Generator] = None) -> tuple[Tensor, Tensor]:
    """The edges from context words to the target positions ``targets``: the
    words at most ``window`` positions away in the same document. With a
    generator each target's window is shrunk to a random size in ``1 ..
    window``, as word2vec does, which weights near words more. Returns the
    context word ids and the index (into ``targets``) of each edge's target."""
    offsets = torch.cat([torch.arange(-window, 0), torch.arange(1, window + 1)])  # [2 * window]
    positions = targets.unsqueeze(1) + offsets  # [num_targets, 2 * window]
    valid = (positions >= 0) & (positions < corpus.words.numel())
    positions = positions.clamp(0, corpus.words.numel() - 1)
    valid &= corpus.document[positions] == corpus.document[targets].unsqueeze(1)
    if generator is not None and window > 0:
        reach = torch.randint(1, window + 1, (targets.numel(), 1), generator=generator)
        valid &= offsets.abs().unsqueeze(0) <= reach
    target_index = torch.arange(targets.numel()).unsqueeze(1).expand_as(positions)[valid]
    return corpus.words[positions[valid]], target_index


def keep_probability(counts: Tensor, sample: float) -> Tensor:
    """word2vec's down-sampling of frequent words: a word making up a
    fraction ``f`` of the corpus is kept with probability
    ``(sqrt(f / sample) + 1) * sample / f`` (at most 1); 0 keeps every word."""
    if sample <= 0:
        return torch.ones_like(counts, dtype=torch.float)
    frequency = counts.float() / counts.sum()
    ratio = sample / frequency.clamp_min(1e-12)
    return ((1.0 / ratio).sqrt() + 1.0).mul(ratio).clamp(max=1.0)


class SupervisedParagraphVectors(nn.Module):
    """Word, document and class vectors trained to predict words.

    Args:
        num_words (int): vocabulary size.
        num_documents (int): number of training documents.
        num_classes (int): number of class labels (0 gives plain paragraph vectors).
        dim (int): size of every vector. (default: :obj:`100`)
        mode (str): ``"dm"`` or ``"dbow"``. (default: :obj:`"dm"`)
        train_words (bool): in DBOW, also train word vectors by skip-gram
            (DM always trains them). (default: :obj:`False`)
        sparse (bool): sparse gradients for the embedding tables (the optimizer then
            touches only the rows a batch used). (default: :obj:`True`)
    """

    def __init__(self, num_words: int, num_documents: int, num_classes: int, dim: int = 100,
                 mode: str = "dm", train_words: bool = False, sparse: bool = True):
        super().__init__()
        if mode not in MODES:
            raise GraphseqError(f"unknown paragraph-vector mode {mode!r}; use one of {', '.join(MODES)}")
        if dim < 1:
            raise GraphseqError(f"SupervisedParagraphVectors needs dim >= 1, got {dim}")
        if num_classes < 0:
            raise GraphseqError(f"SupervisedParagraphVectors needs num_classes >= 0, got {num_classes}")
        self.num_words, self.num_classes, self.dim = num_words, num_classes, dim
        self.mode, self.train_words, self.sparse = mode, train_words, sparse
        self.word = nn.Embedding(num_words, dim, sparse=sparse)  # input vectors of context words
        self.document = nn.Embedding(num_documents, dim, sparse=sparse)
        self.label = nn.Embedding(max(num_classes, 1), dim, sparse=sparse)
        self.output = nn.Embedding(num_words, dim, sparse=sparse)  # the words being predicted
        self.mean = SimpleConv(aggr="mean")
        self.reset_parameters()

    def reset_parameters(self):
        # word2vec's initialisation: small uniform inputs, zero outputs.
        for table in (self.word, self.document, self.label):
            nn.init.uniform_(table.weight, -0.5 / self.dim, 0.5 / self.dim)
        nn.init.zeros_(self.output.weight)

    def for_new_documents(self, num_documents: int,
                          generator: Optional[torch.Generator] = None) -> "SupervisedParagraphVectors":
        """A model sharing this one's word, class and output vectors, with
        fresh vectors for ``num_documents`` new documents (for inference),
        drawn from ``generator`` (the global RNG without one), on this model's
        device and in its dtype."""
        new = SupervisedParagraphVectors(self.num_words, num_documents, self.num_classes, self.dim,
                                         self.mode, self.train_words, self.sparse)
        new.word, new.label, new.output = self.word, self.label, self.output
        weight = self.output.weight
        vectors = (torch.rand(num_documents, self.dim, generator=generator, dtype=weight.dtype) - 0.5) / self.dim
        new.document = nn.Embedding(num_documents, self.dim, sparse=self.sparse, _weight=vectors.to(weight.device))
        return new

    def loss(self, target_words: Tensor, documents: Tensor, classes: Optional[Tensor],
             context_words: Tensor, context_target: Tensor, noise: Tensor) -> Tensor:
        """The negative-sampling loss summed over the targets (word2vec's
        objective, whose rate is per prediction).

        Args:
            target_words: the word at each target node ``[T]``.
            documents: the document of each target ``[T]``.
            classes: the class of each target's document ``[T]``, or
                :obj:`None` to leave the class nodes out.
            context_words, context_target: the context edges, as
                :func:`context_edges` gives them.
            noise: noise words ``[T, negative]``.
        """
        num_targets = target_words.numel()
        every = torch.arange(num_targets, device=target_words.device)
        sources = [self.document(documents)]
        targets = [every]
        if classes is not None:
            sources.append(self.label(classes))
            targets.append(every)
        if self.mode == "dm" or self.train_words:
            sources.append(self.word(context_words))
            targets.append(context_target)
        x = torch.cat(sources)  # [num_edges, dim]: one source node per edge
        target = torch.cat(targets)  # [num_edges]
        candidates = self.output(torch.cat([target_words.unsqueeze(1), noise], 1))  # [T, 1 + negative, dim]
        if self.mode == "dm":
            edge_index = torch.stack([torch.arange(x.size(0), device=x.device), target])
            h = self.mean((x, None), edge_index, size=(x.size(0), num_targets))  # [T, dim]
            scores = (candidates * h.unsqueeze(1)).sum(-1)  # [T, 1 + negative]
        else:
            scores = (candidates[target] * x.unsqueeze(1)).sum(-1)  # [num_edges, 1 + negative]
        nll = -(F.logsigmoid(scores[:, 0]) + F.logsigmoid(-scores[:, 1:]).sum(-1))
        return nll.sum()

    def class_similarity(self, vectors: Tensor) -> Tensor:
        """Cosine similarity of each row of ``vectors`` to each class vector ``[N, classes]``."""
        return F.normalize(vectors, dim=-1) @ F.normalize(self.label.weight[:self.num_classes], dim=-1).t()

    def nearest_words(self, class_index: int, k: int = 10, allowed: Optional[Tensor] = None) -> List[int]:
        """The ``k`` words whose vectors lie nearest (cosine) to a class
        vector: the input word vectors where they are trained (DM, or DBOW
        with ``train_words``), else the output vectors the class predicts.
        ``allowed`` (a boolean mask over words) restricts the candidates;
        fewer than ``k`` come back where fewer words are candidates."""
        if k < 0:
            raise GraphseqError(f"nearest_words needs k >= 0, got {k}")
        if not self.num_classes:
            raise GraphseqError("nearest_words needs a class vector, but the model has none (num_classes=0)")
        if not -self.num_classes <= class_index < self.num_classes:
            raise GraphseqError(f"nearest_words got class_index {class_index}, but the model has {self.num_classes} "
                                f"classes")
        table = self.word.weight if (self.mode == "dm" or self.train_words) else self.output.weight
        similarity = F.normalize(table, dim=-1) @ F.normalize(self.label.weight[class_index], dim=0)
        candidates = torch.arange(self.num_words, device=similarity.device)
        if allowed is not None:
            if allowed.dtype != torch.bool or allowed.shape != (self.num_words,):
                raise GraphseqError(f"nearest_words needs allowed as a boolean mask over the {self.num_words} "
                                    f"words, got {allowed.dtype} of shape {tuple(allowed.shape)}")
            candidates = candidates[allowed.to(similarity.device)]
        top = similarity[candidates].topk(min(k, candidates.numel())).indices
        return candidates[top].tolist()


def _check_ids(name: str, what: str, ids: Tensor, bound: int, why: str = ""):
    if ids.numel():
        low, high = int(ids.min()), int(ids.max())
        if low < 0 or high >= bound:
            raise GraphseqError(f"{name} needs {what} ids in 0 .. {bound - 1}{why}, got {low if low < 0 else high}")


def _check_words(name: str, model: SupervisedParagraphVectors, corpus: FlatCorpus):
    _check_ids(name, "word", corpus.words, model.num_words, " (the model's vocabulary)")


def fit(model: SupervisedParagraphVectors, corpus: FlatCorpus, classes: Optional[Tensor],
        parameters, *, epochs: int, lr: float, window: int, negative: int, batch_size: int,
        noise_distribution: Tensor, keep: Tensor, generator: torch.Generator,
        progress=None) -> List[float]:
    """Trains ``parameters`` of ``model`` for ``epochs`` passes over
    ``corpus`` by Adagrad on sparse gradients (only the rows a batch used
    change), the rate ``lr`` decaying linearly to nearly zero as in
    word2vec. Adagrad rather than word2vec's plain SGD because a batch sums
    hundreds of predictions: a class vector takes part in half of them, and
    a plain step of that sum diverges, while Adagrad scales each row's step
    by its own gradient history. Each pass keeps each word with its
    probability in ``keep`` (down-sampling), shuffles the kept positions and
    reads them ``batch_size`` targets at a time. ``classes`` holds the class
    of each document (``None``: no class nodes). ``window`` may be 0 in DBOW
    without ``train_words``, which reads no context words. Returns the mean
    loss of each pass."""
    reads_context = model.mode == "dm" or model.train_words
    least = 1 if reads_context else 0
    if window < least:
        why = f" ({'DM' if model.mode == 'dm' else 'DBOW with train_words'} reads context words)" if least else ""
        raise GraphseqError(f"fit needs window >= {least}{why}, got {window}")
    if batch_size < 1:
        raise GraphseqError(f"fit needs batch_size >= 1, got {batch_size}")
    if negative < 1:
        raise GraphseqError(f"fit needs negative >= 1 noise words per target (negative sampling), got {negative}")
    _check_words("fit", model, corpus)
    if classes is not None:
        if classes.dim() != 1 or classes.numel() < corpus.num_documents:
            raise GraphseqError(f"fit needs classes as one class id per document ({corpus.num_documents}), "
                                f"got shape {tuple(classes.shape)}")
        if not model.num_classes:
            raise GraphseqError("fit got classes, but the model has no class vectors (num_classes=0); pass None")
        _check_ids("fit", "class", classes, model.num_classes)
    device = model.output.weight.device
    optimizer = torch.optim.Adagrad(list(parameters), lr=lr)
    losses: List[float] = []
    total_steps = max(1, epochs * math.ceil(corpus.words.numel() / batch_size))
    step = 0
    for _ in range(epochs):
        kept = torch.rand(corpus.words.numel(), generator=generator) < keep[corpus.words]
        # Down-sampled words leave the text, so the windows reach past them.
        stream = FlatCorpus(corpus.words[kept], corpus.document[kept], corpus.num_documents)
        order = torch.randperm(stream.words.numel(), generator=generator)
        running, count = 0.0, 0
        for start in range(0, order.numel(), batch_size):
            targets = order[start:start + batch_size]
            context_words, context_target = context_edges(stream, targets, window, generator)
            noise = torch.multinomial(noise_distribution, targets.numel() * negative, replacement=True,
                                      generator=generator).view(-1, negative)
            documents = stream.document[targets]
            loss = model.loss(stream.words[targets].to(device), documents.to(device),
                              None if classes is None else classes[documents].to(device),
                              context_words.to(device), context_target.to(device), noise.to(device))
            for group in optimizer.param_groups:
                group["lr"] = lr * max(1.0 - step / total_steps, 1e-4)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            # Adagrad builds sparse updates from coalesced gradients: nothing to check.
            with torch.sparse.check_sparse_tensor_invariants(enable=False):
                optimizer.step()
            step += 1
            running, count = running + float(loss.detach()), count + targets.numel()
        losses.append(running / max(count, 1))
        if progress is not None:
            progress(losses[-1])
    return losses


def infer(model: SupervisedParagraphVectors, corpus: FlatCorpus, *, epochs: int, lr: float,
          window: int, negative: int, batch_size: int, noise_distribution: Tensor, keep: Tensor,
          generator: torch.Generator) -> Tensor:
    """Vectors for the documents of ``corpus`` with every trained vector
    frozen and no class node: Doc2Vec's ``infer_vector``, for all the
    documents at once (they do not interact). The new vectors start from
    ``generator``, and inference, an optimisation, runs with gradients on
    even under :func:`torch.no_grad` or :func:`torch.inference_mode`.
    Returns ``[num_documents, dim]`` without gradient history."""
    _check_words("infer", model, corpus)
    with torch.inference_mode(False), torch.enable_grad():
        new = model.for_new_documents(corpus.num_documents, generator)
        frozen = [p for name, p in new.named_parameters() if not name.startswith("document.")]
        flags = [p.requires_grad for p in frozen]
        for p in frozen:
            p.requires_grad_(False)
        try:
            fit(new, corpus, None, new.document.parameters(), epochs=epochs, lr=lr, window=window,
                negative=negative, batch_size=batch_size, noise_distribution=noise_distribution,
                keep=keep, generator=generator)
        finally:
            for p, flag in zip(frozen, flags):
                p.requires_grad_(flag)
        return new.document.weight.detach().clone()


def noise_distribution(counts: Tensor, power: float = 0.75) -> Tensor:
    """word2vec's noise distribution: unigram counts raised to ``power``."""
    weights = counts.float().pow(power)
    return weights / weights.sum()



@torch.no_grad()
def class_log_likelihood(model: SupervisedParagraphVectors, corpus: FlatCorpus, vectors: Tensor,
                         window: int, batch_size: int = 4096) -> Tensor:
    r"""How well each class vector predicts each document's words:
    :math:`\sum_t \log \sigma(\mathbf{u}_{w_t}^\top \mathbf{h}_t^{c})`, where
    :math:`\mathbf{h}_t^{c}` is the class vector itself in DBOW (the other
    sources' predictions do not depend on the class) and the mean of the
    context words, the document's inferred vector ``vectors[d]`` and the
    class vector in DM. Every word and its whole window are read (no
    down-sampling, no shrinking). Returns ``[num_documents, num_classes]``;
    the predicted class is the row's largest."""
    _check_words("class_log_likelihood", model, corpus)
    device = model.output.weight.device
    scores = torch.zeros(corpus.num_documents, model.num_classes, device=device, dtype=model.output.weight.dtype)
    classes = model.label.weight[:model.num_classes]  # [classes, dim]
    for start in range(0, corpus.words.numel(), batch_size):
        targets = torch.arange(start, min(start + batch_size, corpus.words.numel()))
        u = model.output(corpus.words[targets].to(device))  # [T, dim]
        documents = corpus.document[targets].to(device)
        if model.mode == "dbow":
            logits = u @ classes.t()  # [T, classes]
        else:
            context_words, context_target = context_edges(corpus, targets, window)
            context_sum = torch.zeros_like(u).index_add_(0, context_target.to(device),
                                                         model.word(context_words.to(device)))
            count = torch.bincount(context_target, minlength=targets.numel()).to(device) + 2.0
            h = (context_sum + vectors[documents]).unsqueeze(1) + classes.unsqueeze(0)  # [T, classes, dim]
            logits = (h * u.unsqueeze(1)).sum(-1) / count.unsqueeze(1)
        scores.index_add_(0, documents, F.logsigmoid(logits).to(scores.dtype))
    return scores
