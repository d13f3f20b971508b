"""The polarity task refuses sizes that leave no test set or no pool,
before any sentence is read, and marks the model's line as its guess (a
small fake corpus stands in for the data)."""
import pytest
import torch

from graphseq.active import tasks
from graphseq.errors import GraphseqError

WORDS = ["good film", "bad film", "good plot", "bad plot", "fine acting", "poor acting"]


@pytest.fixture
def corpus(monkeypatch):
    sentences = [f"{WORDS[i % 6]} {WORDS[(i + 1) % 6]}" for i in range(20)]
    monkeypatch.setattr(tasks, "load_polarity", lambda root, mirror: (sentences, [i % 2 for i in range(20)]))


def test_a_valid_split_keeps_a_test_set_and_a_pool(corpus):
    task, data = tasks.polarity_task(None, neighbours=2, limit=10)
    assert (data.num_nodes, int(data.test_mask.sum()), task.pool.numel()) == (10, 2, 8)


@pytest.mark.parametrize("kwargs,problem", [
    ({"limit": -5}, r"polarity_task: limit must be a whole number >= 0 \(0: all sentences\), got -5"),
    ({"limit": 2.5}, "polarity_task: limit must be a whole number >= 0"),
    ({"test_fraction": -0.2}, "polarity_task: test_fraction must be between 0 and 1, both excluded, got -0.2"),
    ({"test_fraction": 1.0}, "test_fraction must be between 0 and 1, both excluded, got 1.0"),
    ({"test_fraction": 1.5}, "test_fraction must be between 0 and 1, both excluded, got 1.5"),
    ({"limit": 1}, "test_fraction=0.2 of 1 sentences leaves no test sentence"),
    ({"limit": 4}, "test_fraction=0.2 of 4 sentences leaves no test sentence"),
])
def test_sizes_that_leave_no_test_set_or_no_pool_are_refused(corpus, kwargs, problem):
    with pytest.raises(GraphseqError, match=problem):
        tasks.polarity_task(None, neighbours=2, **kwargs)


def test_too_few_sentences_for_a_vocabulary_are_refused_in_one_line(monkeypatch):
    monkeypatch.setattr(tasks, "load_polarity", lambda root, mirror: (["a b", "c d", "e f", "g h", "i j"],
                                                                      [0, 1, 0, 1, 0]))
    with pytest.raises(GraphseqError, match="polarity_task: 5 sentences are too few for a vocabulary"):
        tasks.polarity_task(None, neighbours=2)


def test_a_sentence_is_one_line_that_the_prompt_wraps_to_the_terminal(monkeypatch):
    import io

    from graphseq.active.oracles import QUIT, Question
    from graphseq.active.prompt import HumanOracle

    long = " ".join(["a  film", *WORDS] * 8)  # 150 characters, a double space among them
    sentences = [f"{long} {WORDS[i % 6]}" for i in range(10)]
    monkeypatch.setattr(tasks, "load_polarity", lambda root, mirror: (sentences, [i % 2 for i in range(10)]))
    task, _ = tasks.polarity_task(None, neighbours=2)
    item = int(task.pool[0])
    details = task.describe(item, None, {})
    assert details[0] == '  "' + " ".join(sentences[item].split()) + '"'
    output = io.StringIO()
    assert HumanOracle(io.StringIO("q\n"), output, width=50).ask(Question(item, ["negative", "positive"],
                                                                         details)) is QUIT
    lines = output.getvalue().splitlines()
    shown = lines[lines.index(f"item {item}") + 1:]
    shown = shown[:next(k for k, line in enumerate(shown) if line.startswith("  degree"))]
    # Wrapped once, at 50 columns: every line but the last is full up to the next word.
    assert all(len(line) <= 50 and len(line) + 1 + len(after.split()[0]) > 50
               for line, after in zip(shown, shown[1:]))


def test_the_models_line_is_marked_as_its_guess(monkeypatch):
    from graphseq.active.oracles import Guess

    sentences = [f"a film {WORDS[i % 6]} and {WORDS[(i + 1) % 6]}" for i in range(10)]
    monkeypatch.setattr(tasks, "load_polarity", lambda root, mirror: (sentences, [i % 2 for i in range(10)]))
    task, _ = tasks.polarity_task(None, neighbours=2)
    item = int(task.pool[0])
    details = task.describe(item, torch.tensor([[0.3, 0.7]] * 10), {})
    assert [isinstance(line, Guess) for line in details] == [False, False, True]
    assert details[-1] == "  model: positive 0.70, negative 0.30"  # printed at the terminal as before
