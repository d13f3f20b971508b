"""The tasks the active-learning pipelines label, each a
:class:`~graphseq.active.loop.Task` (classes, pool, graph, and what a person
reads about an item) with its data: Cora's citation graph (nodes are papers;
a person sees a paper's neighbourhood and the model's guess) and the
sentence-polarity snippets joined into a k-nearest-neighbour graph over
TF-IDF (nodes are sentences a person can read and judge).
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import List, Mapping, Optional, Tuple

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data

from ..checks import is_integer
from ..data.planetoid import load_planetoid
from ..data.polarity import CLASS_NAMES as POLARITY_CLASSES
from ..data.polarity import load_polarity
from ..data.text import tfidf
from ..errors import GraphseqError
from ..graphs import knn
from .loop import Task
from .oracles import Guess

# Cora's classes in Planetoid's label order. Planetoid ships indices only;
# the names follow from the class sizes, which are all different (351 Theory,
# 217 Reinforcement_Learning, 418 Genetic_Algorithms, 818 Neural_Networks,
# 426 Probabilistic_Methods, 298 Case_Based, 180 Rule_Learning).
CORA_CLASSES = ["Theory", "Reinforcement_Learning", "Genetic_Algorithms", "Neural_Networks",
                "Probabilistic_Methods", "Case_Based", "Rule_Learning"]
# What a person reading about a paper should know: Planetoid's copies of Cora,
# CiteSeer and PubMed keep word indices, not the words, so the neighbourhood decides.
NO_WORDS = "(Planetoid keeps no title or words of a paper: judge it by its neighbours)"


def top_predictions(probabilities: Tensor, class_names, top: int = 3) -> str:
    values, indices = probabilities.topk(min(top, probabilities.numel()))
    return ", ".join(f"{class_names[i]} {v:.2f}" for v, i in zip(values.tolist(), indices.tolist()))


def neighbour_summary(item: int, neighbours: List[List[int]], labelled: Mapping[int, int],
                      class_names, what: str) -> List[str]:
    known = Counter(class_names[labelled[j]] for j in neighbours[item] if j in labelled)
    unknown = len(neighbours[item]) - sum(known.values())
    labels = ", ".join(f"{name} x{count}" for name, count in known.most_common()) or "none yet"
    return [f"  degree {len(neighbours[item])} ({what}); neighbours' known labels: {labels}; {unknown} unlabelled"]


def adjacency_lists(edge_index: Tensor, num_nodes: int) -> List[List[int]]:
    neighbours: List[List[int]] = [[] for _ in range(num_nodes)]
    for source, target in edge_index.t().tolist():
        if source != target:
            neighbours[target].append(source)
    return neighbours


def cora_task(root: Path, mirror: Optional[Path] = None, name: str = "cora") -> Tuple[Task, Data]:
    """Cora with its standard test nodes held out; the pool is every node
    outside the standard validation and test sets."""
    data = load_planetoid(name, root, mirror)
    if name.lower() != "cora":
        class_names = [f"class_{i}" for i in range(int(data.y.max()) + 1)]
    else:
        class_names = CORA_CLASSES
    pool = (~(data.val_mask | data.test_mask)).nonzero().view(-1)
    neighbours = adjacency_lists(data.edge_index, data.num_nodes)

    def describe(item: int, probabilities: Tensor, labelled: Mapping[int, int]) -> List[str]:
        return ([f"  {NO_WORDS}"]
                + neighbour_summary(item, neighbours, labelled, class_names, "papers it cites or that cite it")
                + ([Guess(f"  model: {top_predictions(probabilities[item].cpu(), class_names)}")]
                   if probabilities is not None else []))

    return Task(class_names, pool, data.edge_index, describe), data


def polarity_task(root: Path, mirror: Optional[Path] = None, neighbours: int = 10,
                  test_fraction: float = 0.2, limit: int = 0) -> Tuple[Task, Data]:
    """The polarity sentences as nodes of a k-nearest-neighbour graph over
    TF-IDF, with their TF-IDF vectors (sparse) as features. Items are
    numbered as :func:`~graphseq.data.polarity.load_polarity` returns them:
    the negative sentences first. A fixed fifth of the sentences (the same
    for every seed) is held out for testing; the rest is the pool. ``limit``
    keeps that many sentences, drawn at random (0: all), for quick runs;
    the test set must keep at least one sentence."""
    if not is_integer(limit) or limit < 0:
        raise GraphseqError(f"polarity_task: limit must be a whole number >= 0 (0: all sentences), got {limit!r}")
    if not 0 < test_fraction < 1:
        raise GraphseqError(f"polarity_task: test_fraction must be between 0 and 1, both excluded, "
                            f"got {test_fraction}")
    sentences, labels = load_polarity(root, mirror)
    if limit:
        order = np.sort(np.random.default_rng(0).permutation(len(sentences))[:limit])
        sentences, labels = [sentences[i] for i in order], [labels[i] for i in order]
    num_items = len(sentences)
    num_test = int(test_fraction * num_items)
    if num_test < 1:  # test_fraction < 1 always leaves a pool
        raise GraphseqError(f"polarity_task: test_fraction={test_fraction} of {num_items} sentences leaves "
                            f"no test sentence; keep more sentences (limit) or raise test_fraction")
    try:
        x = tfidf(sentences)  # [num_sentences, vocabulary], sparse
    except ValueError as error:  # scikit-learn: no word is in two sentences
        raise GraphseqError(f"polarity_task: {num_items} sentences are too few for a vocabulary "
                            f"({error}); raise limit") from None
    edge_index = knn(x, neighbours)
    test = torch.zeros(num_items, dtype=torch.bool)
    test[torch.as_tensor(np.random.default_rng(1).permutation(num_items)[:num_test])] = True
    data = Data(x=x, edge_index=edge_index, y=torch.tensor(labels), test_mask=test, num_nodes=num_items)
    graph_neighbours = adjacency_lists(edge_index, num_items)

    def describe(item: int, probabilities: Tensor, labelled: Mapping[int, int]) -> List[str]:
        # One line: the oracle wraps it to the terminal (a line wrapped here too comes out ragged).
        return ([f'  "{" ".join(sentences[item].split())}"']
                + neighbour_summary(item, graph_neighbours, labelled, POLARITY_CLASSES, "similar sentences")
                + ([Guess(f"  model: {top_predictions(probabilities[item].cpu(), POLARITY_CLASSES)}")]
                   if probabilities is not None else []))

    return Task(list(POLARITY_CLASSES), (~test).nonzero().view(-1), edge_index, describe), data
