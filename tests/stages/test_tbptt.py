"""The charlm training stage's evaluation (streams read with the state
carried across windows score the same as each stream read whole) and its
learning-rate schedule."""
import math

import pytest
import torch
import torch.nn.functional as F

from graphseq.models.charlm import CharLM
from graphseq.stages.charlm import cosine_rate, evaluate


def test_evaluation_carries_the_state_across_windows():
    torch.manual_seed(0)
    model = CharLM(7, embedding_dim=4, hidden_size=8).eval()
    ids = torch.randint(0, 7, (41,))
    # Two streams of 20 characters, read 6 at a time (the last window is 2 long).
    windowed = evaluate(model, ids, batch_size=2, window=6, device=torch.device("cpu"))
    streams, targets = ids[:40].view(2, 20), ids[1:41].view(2, 20)
    with torch.no_grad():
        logits, _ = model.forward_windows(streams)
    whole = F.cross_entropy(logits.flatten(0, 1), targets.flatten()).item()
    assert abs(windowed - whole) < 1e-5


def test_quick_evaluation_reads_the_first_windows_of_every_stream():
    torch.manual_seed(0)
    model = CharLM(7, embedding_dim=4, hidden_size=8).eval()
    ids = torch.randint(0, 7, (41,))
    quick = evaluate(model, ids, batch_size=2, window=6, device=torch.device("cpu"), max_chars=12)
    streams, targets = ids[:40].view(2, 20), ids[1:41].view(2, 20)
    with torch.no_grad():
        logits, _ = model.forward_windows(streams[:, :6])
    first = F.cross_entropy(logits.flatten(0, 1), targets[:, :6].flatten()).item()
    assert abs(quick - first) < 1e-5


def test_the_rate_falls_along_a_half_cosine_to_its_end_at_the_budget():
    assert cosine_rate(0, 1000, 0.1) == 1.0
    assert cosine_rate(500, 1000, 0.1) == pytest.approx(0.55)
    assert cosine_rate(250, 1000, 0.1) == pytest.approx(0.1 + 0.9 * (1 + math.cos(math.pi / 4)) / 2)
    assert cosine_rate(1000, 1000, 0.1) == pytest.approx(0.1)
    assert cosine_rate(1500, 1000, 0.1) == pytest.approx(0.1)  # Past the budget it stays at the end.
    rates = [cosine_rate(s, 1000, 0.0) for s in range(1001)]
    assert all(a > b for a, b in zip(rates, rates[1:]))


def test_without_a_step_budget_the_rate_stays():
    assert cosine_rate(12345, 0, 0.1) == 1.0
