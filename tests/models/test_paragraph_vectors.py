"""Supervised paragraph vectors: the context graph, the negative-sampling
loss against a hand computation and finite differences, inference that
leaves every trained vector alone, and classes told apart on a toy corpus."""
import pytest
import torch
import torch.nn.functional as F

from graphseq.errors import GraphseqError
from graphseq.models.paragraph_vectors import (FlatCorpus, SupervisedParagraphVectors, class_log_likelihood,
                                               context_edges, fit, infer, keep_probability,
                                               noise_distribution)


def test_context_edges_stay_inside_the_window_and_the_document():
    corpus = FlatCorpus.of([[10, 11, 12, 13], [20, 21]])
    words, target = context_edges(corpus, torch.tensor([1, 4]), window=2)
    edges = sorted(zip(target.tolist(), words.tolist()))
    assert edges == [(0, 10), (0, 12), (0, 13), (1, 21)]


def test_shrunk_windows_never_reach_further_than_the_window():
    corpus = FlatCorpus.of([list(range(100))])
    targets = torch.arange(10, 90)
    words, target = context_edges(corpus, targets, window=3, generator=torch.Generator().manual_seed(0))
    distance = (words - targets[target]).abs()
    assert int(distance.min()) == 1 and int(distance.max()) == 3
    assert words.numel() < 6 * targets.numel()  # some windows were shrunk


def test_frequent_words_are_down_sampled_as_word2vec_does():
    counts = torch.tensor([100_000, 10, 1])  # only the first is more frequent than 1e-3
    keep = keep_probability(counts, sample=1e-3)
    f = 100_000 / 100_011
    assert float(keep[0]) == pytest.approx(((f / 1e-3) ** 0.5 + 1) * 1e-3 / f)
    assert keep[1:].tolist() == [1.0, 1.0]
    assert keep_probability(counts, 0).tolist() == [1.0, 1.0, 1.0]


def toy_model(mode, train_words=False):
    torch.manual_seed(0)
    model = SupervisedParagraphVectors(6, 3, 2, dim=4, mode=mode, train_words=train_words, sparse=False).double()
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.7)
    return model


BATCH = dict(target_words=torch.tensor([0, 3]), documents=torch.tensor([2, 0]), classes=torch.tensor([1, 0]),
             context_words=torch.tensor([1, 2, 4]), context_target=torch.tensor([0, 0, 1]),
             noise=torch.tensor([[5, 1], [2, 2]]))


def test_dm_loss_is_the_mean_of_context_document_and_class_predicting_the_word():
    model = toy_model("dm")
    v, d, c, u = model.word.weight, model.document.weight, model.label.weight, model.output.weight
    h0 = (v[1] + v[2] + d[2] + c[1]) / 4
    h1 = (v[4] + d[0] + c[0]) / 3
    expected = -(F.logsigmoid(u[0] @ h0) + F.logsigmoid(-u[5] @ h0) + F.logsigmoid(-u[1] @ h0)
                 + F.logsigmoid(u[3] @ h1) + 2 * F.logsigmoid(-u[2] @ h1))
    assert torch.allclose(model.loss(**BATCH), expected)


def test_dbow_loss_lets_document_and_class_each_predict_the_word():
    model = toy_model("dbow")
    d, c, u = model.document.weight, model.label.weight, model.output.weight

    def nll(x, word, noise):
        return -(F.logsigmoid(u[word] @ x) + sum(F.logsigmoid(-u[n] @ x) for n in noise))

    expected = nll(d[2], 0, [5, 1]) + nll(c[1], 0, [5, 1]) + nll(d[0], 3, [2, 2]) + nll(c[0], 3, [2, 2])
    assert torch.allclose(model.loss(**BATCH), expected)
    # Without the class nodes (inference) only the documents predict.
    without = nll(d[2], 0, [5, 1]) + nll(d[0], 3, [2, 2])
    assert torch.allclose(model.loss(**{**BATCH, "classes": None}), without)


class LossOf(torch.nn.Module):
    """The model's loss on BATCH as a forward pass, for torch.func.functional_call."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self):
        return self.model.loss(**BATCH)


@pytest.mark.parametrize("mode,train_words", [("dm", False), ("dbow", False), ("dbow", True)])
def test_gradient_matches_finite_differences(mode, train_words):
    wrapper = LossOf(toy_model(mode, train_words))
    names = ["model.word.weight", "model.document.weight", "model.label.weight", "model.output.weight"]
    tables = tuple(wrapper.state_dict()[n].clone().requires_grad_() for n in names)

    def loss(*weights):
        return torch.func.functional_call(wrapper, dict(zip(names, weights)), ())

    assert torch.autograd.gradcheck(loss, tables)


def toy_corpus():
    # Class 0 talks of words 0-2, class 1 of words 3-5; word 6 is everywhere.
    generator = torch.Generator().manual_seed(0)
    documents, classes = [], []
    for i in range(60):
        c = i % 2
        documents.append((torch.randint(0, 3, (8,), generator=generator) + 3 * c).tolist() + [6, 6])
        classes.append(c)
    return documents, torch.tensor(classes)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["dm", "dbow"])
def test_inference_freezes_the_model_and_the_classes_come_apart(mode):
    documents, classes = toy_corpus()
    counts = torch.bincount(torch.tensor([w for d in documents for w in d]), minlength=7)
    settings = dict(window=2, negative=3, batch_size=64, noise_distribution=noise_distribution(counts),
                    keep=keep_probability(counts, 0), generator=torch.Generator().manual_seed(1))
    torch.manual_seed(0)
    model = SupervisedParagraphVectors(7, 40, 2, dim=8, mode=mode)
    losses = fit(model, FlatCorpus.of(documents[:40]), classes[:40], model.parameters(), epochs=15, lr=0.1,
                 **settings)
    assert losses[-1] < losses[0]
    before = {k: v.clone() for k, v in model.state_dict().items()}
    corpus = FlatCorpus.of(documents[40:])
    vectors = infer(model, corpus, epochs=15, lr=0.1, **settings)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert vectors.shape == (20, 8)
    predicted = class_log_likelihood(model, corpus, vectors, window=2).argmax(1)
    assert torch.equal(predicted, classes[40:])
    assert set(model.nearest_words(0, k=3)) == {0, 1, 2} and set(model.nearest_words(1, k=3)) == {3, 4, 5}


def test_nearest_words_returns_only_allowed_words_even_when_fewer_than_k():
    model = toy_model("dm")
    allowed = torch.tensor([True, False, False, False, True, False])
    assert model.nearest_words(0, k=2, allowed=torch.tensor([True] + [False] * 5)) == [0]
    assert set(model.nearest_words(1, k=5, allowed=allowed)) == {0, 4}
    assert model.nearest_words(0, k=3, allowed=torch.zeros(6, dtype=torch.bool)) == []
    assert sorted(model.nearest_words(0, k=10)) == list(range(6))
    with pytest.raises(GraphseqError, match="boolean mask over the 6 words, got torch.bool of shape \\(5,\\)"):
        model.nearest_words(0, k=2, allowed=torch.ones(5, dtype=torch.bool))


def toy_settings(documents, **changes):
    """fit/infer's settings for ``documents`` (word counts from them), with ``changes``."""
    counts = torch.bincount(torch.tensor([w for d in documents for w in d]), minlength=7)
    return {**dict(epochs=1, lr=0.1, window=2, negative=3, batch_size=64,
                   noise_distribution=noise_distribution(counts), keep=keep_probability(counts, 0),
                   generator=torch.Generator().manual_seed(1)), **changes}


def fit_toy(model, **changes):
    documents, classes = toy_corpus()
    return fit(model, FlatCorpus.of(documents), classes, model.parameters(), **toy_settings(documents, **changes))


def test_dbow_without_word_training_fits_with_a_window_of_zero():
    torch.manual_seed(0)
    losses = fit_toy(SupervisedParagraphVectors(7, 60, 2, dim=8, mode="dbow"), window=0)
    assert len(losses) == 1 and losses[0] > 0


@pytest.mark.parametrize("mode,train_words,changes,match", [
    ("dm", False, dict(window=0), r"window >= 1 \(DM reads context words\), got 0"),
    ("dbow", True, dict(window=0), r"window >= 1 \(DBOW with train_words reads context words\), got 0"),
    ("dbow", False, dict(window=-1), "window >= 0, got -1"),
    ("dm", False, dict(batch_size=0), "batch_size >= 1, got 0"),
    ("dbow", False, dict(negative=0), "negative >= 1 noise words per target .*got 0"),
])
def test_fit_refuses_bad_settings(mode, train_words, changes, match):
    model = SupervisedParagraphVectors(7, 60, 2, dim=8, mode=mode, train_words=train_words)
    with pytest.raises(GraphseqError, match=match):
        fit_toy(model, **changes)


def test_a_model_of_no_dimensions_is_refused():
    with pytest.raises(GraphseqError, match="SupervisedParagraphVectors needs dim >= 1, got 0"):
        SupervisedParagraphVectors(7, 3, 2, dim=0)


def infer_toy(model, **changes):
    documents, _ = toy_corpus()
    return infer(model, FlatCorpus.of(documents[:4]), **toy_settings(documents, **{"epochs": 2, "batch_size": 8,
                                                                                  **changes}))


def test_inference_with_a_seeded_generator_ignores_the_global_rng():
    model = SupervisedParagraphVectors(7, 3, 2, dim=8)
    torch.manual_seed(1)
    first = infer_toy(model)
    torch.manual_seed(2)
    assert torch.equal(infer_toy(model), first)


@pytest.mark.parametrize("context", [torch.no_grad, torch.inference_mode])
def test_inference_runs_under_no_grad_and_inference_mode(context):
    model = SupervisedParagraphVectors(7, 3, 2, dim=8)
    expected = infer_toy(model)
    with context():
        vectors = infer_toy(model)
    assert torch.equal(vectors, expected) and not vectors.requires_grad and vectors.grad_fn is None


@pytest.mark.parametrize("mode", ["dm", "dbow"])
def test_inference_and_scoring_keep_a_double_models_dtype(mode):
    model = SupervisedParagraphVectors(7, 3, 2, dim=8, mode=mode).double()
    vectors = infer_toy(model)
    assert vectors.dtype == torch.float64
    documents, _ = toy_corpus()
    scores = class_log_likelihood(model, FlatCorpus.of(documents[:4]), vectors, window=2)
    assert scores.dtype == torch.float64 and scores.shape == (4, 2)



@pytest.mark.parametrize("bad", [7, -1])
def test_words_outside_the_vocabulary_are_refused(bad):
    model = SupervisedParagraphVectors(7, 2, 2, dim=8)
    documents = [[0, 1, 6], [2, bad]]
    corpus = FlatCorpus.of(documents)
    settings = toy_settings([[0, 1, 6], [2]])
    message = rf"needs word ids in 0 \.\. 6 \(the model's vocabulary\), got {bad}$"
    with pytest.raises(GraphseqError, match="^infer " + message):
        infer(model, corpus, **settings)
    with pytest.raises(GraphseqError, match="^fit " + message):
        fit(model, corpus, torch.tensor([0, 1]), model.parameters(), **settings)
    with pytest.raises(GraphseqError, match="^class_log_likelihood " + message):
        class_log_likelihood(model, corpus, torch.zeros(2, 8), window=2)


@pytest.mark.parametrize("classes, match", [
    (torch.tensor([0, 1, 2] * 20), r"^fit needs class ids in 0 \.\. 1, got 2$"),
    (torch.tensor([0, 1, -1] * 20), r"^fit needs class ids in 0 \.\. 1, got -1$"),
    (torch.tensor([0, 1]), r"^fit needs classes as one class id per document \(60\), got shape \(2,\)$"),
])
def test_fit_refuses_classes_the_model_has_no_vector_for(classes, match):
    model = SupervisedParagraphVectors(7, 60, 2, dim=8)
    documents, _ = toy_corpus()
    with pytest.raises(GraphseqError, match=match):
        fit(model, FlatCorpus.of(documents), classes, model.parameters(), **toy_settings(documents))


def test_a_model_without_classes_is_plain_paragraph_vectors():
    torch.manual_seed(0)
    model = SupervisedParagraphVectors(7, 60, 0, dim=8)
    documents, classes = toy_corpus()
    corpus = FlatCorpus.of(documents)
    assert len(fit(model, corpus, None, model.parameters(), **toy_settings(documents))) == 1
    with pytest.raises(GraphseqError, match=r"^fit got classes, but the model has no class vectors \(num_classes=0\)"):
        fit(model, corpus, classes, model.parameters(), **toy_settings(documents))
    assert class_log_likelihood(model, corpus, torch.zeros(60, 8), window=2).shape == (60, 0)
    assert model.class_similarity(torch.ones(3, 8)).shape == (3, 0)
    with pytest.raises(GraphseqError, match=r"^nearest_words needs a class vector, but the model has none"):
        model.nearest_words(0)
    with pytest.raises(GraphseqError, match="^SupervisedParagraphVectors needs num_classes >= 0, got -1$"):
        SupervisedParagraphVectors(7, 3, -1, dim=8)


def test_nearest_words_refuses_a_class_the_model_lacks():
    model = toy_model("dm")
    assert model.nearest_words(-1, k=3) == model.nearest_words(1, k=3)
    for bad in (2, -3):
        with pytest.raises(GraphseqError, match=f"^nearest_words got class_index {bad}, but the model has 2 classes$"):
            model.nearest_words(bad)
