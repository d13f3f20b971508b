"""A smoke run of polarity-bilstm on the real sentence-polarity data, and the
classifier's pooling."""
import re

import pytest
import torch

from graphseq import run
from graphseq.graphs import chain, lengths_to_batch
from graphseq.models.sentence import SentenceClassifier


def test_polarity_bilstm_runs_a_few_batches(tmp_path, data_root, mirror):
    summary = run("polarity-bilstm", overrides={"model.embedding_dim": 16, "model.hidden_size": 8,
                                                "train.epochs": 1, "train.max_batches": 3},
                  out=tmp_path, data_root=data_root, data_mirror=mirror, quiet=True)
    figures = summary["runs"][0]
    # The seeded split keeps a tenth of the sentences for the test.
    log = (tmp_path / "log.txt").read_text()
    train, test = map(int, re.search(r"(\d+) training and (\d+) test sentences", log).groups())
    assert test == round(0.1 * (train + test)) and train + test > 10_000
    # The accuracy counts those sentences: a fraction of them.
    assert figures["test_accuracy"] * test == pytest.approx(round(figures["test_accuracy"] * test), abs=1e-3)


def test_max_pool_reads_each_sentence_alone():
    torch.manual_seed(0)
    model = SentenceClassifier(10, embedding_dim=4, hidden_size=3, dropout=0.0).eval()
    first, second = torch.tensor([1, 2, 3]), torch.tensor([4, 5])
    both = model(torch.cat([first, second]), chain([3, 2]), lengths_to_batch([3, 2]))
    alone = model(second, chain([2]), lengths_to_batch([2]))
    assert both.shape == (2, 2)
    assert torch.allclose(both[1], alone[0], atol=1e-6)


def test_final_states_pool_gives_one_row_per_sentence():
    model = SentenceClassifier(10, embedding_dim=4, hidden_size=3, pool="final").eval()
    logits = model(torch.tensor([1, 2, 3, 4]), chain([1, 3]), lengths_to_batch([1, 3]))
    assert logits.shape == (2, 2)
