"""The loop with a scripted person: what is stored is exactly what was
accepted, whatever else was typed, and a resumed run picks up where the
last one stopped."""
import io

import pytest
import torch

from conftest import Terminal
from graphseq.active.loop import Task, active_learning
from graphseq.active.oracles import SimulatedOracle
from graphseq.active.prompt import HumanOracle
from graphseq.active.store import STORE_NAME, LabelStore
from graphseq.errors import GraphseqError

CLASSES = ["Theory", "Rule_Learning", "Case_Based"]
TRUTH = torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])


class FractionLearner:
    """Predicts node i's class with certainty (i % 3) / 3, so entropy asks in a fixed
    order; its accuracy is the fraction of items labelled."""

    def __init__(self):
        self.fitted = []

    def fit(self, items, labels):
        self.fitted.append(sorted(items.tolist()))

    def predict(self):
        certainty = torch.tensor([1.0 - (i % 4) / 4 for i in range(8)])
        probabilities = torch.stack([certainty, (1 - certainty) / 2, (1 - certainty) / 2], dim=1)
        return probabilities, probabilities

    def accuracy(self):
        return len(self.fitted[-1]) / 8


def task():
    edge_index = torch.tensor([[0, 1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5, 6, 7]])
    return Task(CLASSES, torch.arange(8), edge_index, lambda item, p, labelled: [f"  node {item}"])


HINT = "graphseq run active-cora --resume --out runs/me"


def run(store, oracle, resume=False, budget=6, batch_size=2, learner=None, initial=None):
    return active_learning(task(), learner or FractionLearner(), oracle, store, strategy="entropy",
                           initial={0: 0} if initial is None else initial, budget=budget,
                           batch_size=batch_size, resume=resume, resume_hint=HINT)


def stored(store):
    return [(a.item, a.label, a.source) for a in store.answers("entropy")]


def test_stored_labels_are_exactly_the_accepted_answers(tmp_path):
    # Entropy asks 3, 7 first (certainty 1/4), then 2, 6, then 1, 5.
    script = "theory\nbanana\n\nrule\nu\nca\n7\n?\n1\ns\nq\n"
    output = io.StringIO()
    with LabelStore(tmp_path / STORE_NAME) as store:
        outcome = run(store, HumanOracle(io.StringIO(script), output))
        assert stored(store) == [(0, "Theory", "initial"), (3, "Theory", "human"), (7, "Case_Based", "human"),
                                 (2, "Rule_Learning", "human")]
        assert store.skipped("entropy") == [6]
        assert store.pending("entropy") == [1, 5]  # the round q cut short
    assert "undone: item 7 = Rule_Learning" in output.getvalue()
    assert f"continue with: {HINT}" in output.getvalue()
    # A point after each whole round: the initial label, then two rounds of two questions.
    assert outcome.curve == [[1, 1 / 8], [3, 3 / 8], [4, 4 / 8]]
    assert outcome.stopped and outcome.labels == 4


def test_resume_asks_only_unanswered_unskipped_items_and_keeps_the_curve(tmp_path):
    with LabelStore(tmp_path / STORE_NAME) as store:
        run(store, HumanOracle(io.StringIO("t\nr\ns\n"), io.StringIO()))  # 3, 7 answered; 2 skipped; EOF
    learner = FractionLearner()
    with LabelStore(tmp_path / STORE_NAME) as store:
        curve = run(store, HumanOracle(io.StringIO("c\nt\nr\n"), io.StringIO()), resume=True,
                    learner=learner).curve
        assert stored(store)[-3:] == [(6, "Case_Based", "human"), (1, "Theory", "human"),
                                      (5, "Rule_Learning", "human")]
        assert store.skipped("entropy") == [2]
    assert learner.fitted[0] == [0, 3, 7]  # the stored labels, not a fresh start
    # The round cut short (2 skipped, 6 left) is finished first: the points an
    # uninterrupted run has, and no point for the moment of quitting.
    assert [n for n, _ in curve] == [1, 3, 4, 6]


@pytest.mark.parametrize("edit,problem", [
    (lambda store: store.add("entropy", 99, "Theory", "human"), "item 99 is not among the items"),
    (lambda store: store.set_pending("entropy", [-5]), "item -5 is not among the items"),
    (lambda store: store.add("entropy", 3, "Case_Based", "human"), "item 3 is answered more than once"),
])
def test_resume_refuses_a_store_whose_items_were_edited(tmp_path, edit, problem):
    with LabelStore(tmp_path / STORE_NAME) as store:
        run(store, HumanOracle(io.StringIO("t\n"), io.StringIO()))  # 3 answered, then EOF
        edit(store)
    before = (tmp_path / STORE_NAME).read_bytes()
    learner = FractionLearner()
    with LabelStore(tmp_path / STORE_NAME) as store, pytest.raises(GraphseqError, match=problem):
        run(store, HumanOracle(io.StringIO("t\nt\nt\n"), io.StringIO()), resume=True, learner=learner)
    assert learner.fitted == []  # nothing trained on it
    assert (tmp_path / STORE_NAME).read_bytes() == before


def test_a_resumed_run_asks_and_plots_what_an_uninterrupted_one_does(tmp_path):
    answers = ["t", "r", "s", "c", "t", "r"]
    straight_output = io.StringIO()
    with LabelStore(tmp_path / "straight.sqlite") as store:
        straight = run(store, HumanOracle(io.StringIO("\n".join(answers) + "\n"), straight_output)).curve
        straight_rows = stored(store)
    with LabelStore(tmp_path / "split.sqlite") as store:
        run(store, HumanOracle(io.StringIO("t\nr\nq\n"), io.StringIO()))
        run(store, HumanOracle(io.StringIO("q\n"), io.StringIO()), resume=True)
        resumed = run(store, HumanOracle(io.StringIO("\n".join(answers[2:]) + "\n"), io.StringIO()),
                      resume=True).curve
        assert [(i, label) for i, label, _ in stored(store)] == [(i, label) for i, label, _ in straight_rows]
        assert store.skipped("entropy") == [2]
    assert resumed == straight


@pytest.mark.parametrize("script", ["t\nq\n", "t\nr\nq\n", "t\nr\nc\nq\n"])
def test_a_resumed_random_run_draws_what_an_uninterrupted_one_draws(tmp_path, script):
    # Each round's draw comes from the seed and the answers stored, not from a generator made afresh on resume.
    answers = "t\nr\nc\nt\nr\n"
    results = []
    for name, scripts in (("straight", [answers]), ("split", [script, answers[len(script) - 2:]])):
        with LabelStore(tmp_path / f"{name}.sqlite") as store:
            for i, text in enumerate(scripts):
                outcome = active_learning(task(), FractionLearner(), HumanOracle(io.StringIO(text), io.StringIO()),
                                          store, strategy="random", initial={0: 0}, budget=6, batch_size=2,
                                          seed=7, resume=i > 0)
            results.append(([(a.item, a.label) for a in store.answers("random")], outcome.curve))
    assert results[0] == results[1] and len(results[0][0]) == 6


def test_a_resume_with_a_budget_below_the_labels_stored_is_refused(tmp_path):
    with LabelStore(tmp_path / STORE_NAME) as store:
        run(store, HumanOracle(io.StringIO("t\nr\nc\nq\n"), io.StringIO()))  # 4 labels, 1 question left
    before = (tmp_path / STORE_NAME).read_bytes()
    for budget in (3, 4):
        with LabelStore(tmp_path / STORE_NAME) as store, pytest.raises(
                GraphseqError, match=rf"the budget \({budget}\) is smaller than the 4 labels stored in .* and the 1 "
                                     r"question left of the round cut short; resume with a budget of 5 or more"):
            run(store, HumanOracle(io.StringIO("t\n"), io.StringIO()), resume=True, budget=budget)
    assert (tmp_path / STORE_NAME).read_bytes() == before


def test_a_person_answers_the_initial_items_too(tmp_path):
    output = io.StringIO()
    with LabelStore(tmp_path / STORE_NAME) as store:
        outcome = run(store, HumanOracle(io.StringIO("t\nr\nc\nq\n"), output), initial=[4, 1])
        assert stored(store) == [(4, "Theory", "human"), (1, "Rule_Learning", "human"),
                                 (3, "Case_Based", "human")]
    assert "random first round" in output.getvalue()
    assert outcome.curve == [[2, 2 / 8]]  # the first model, after the initial items


def test_every_question_of_the_random_first_round_is_labelled_as_that_round(tmp_path):
    output = io.StringIO()
    with LabelStore(tmp_path / STORE_NAME) as store:
        run(store, HumanOracle(io.StringIO("t\nr\nc\nq\n"), output), initial=[4, 1])
    progress = [line for line in output.getvalue().splitlines() if line.startswith("[entropy")]
    assert progress == ["[entropy: 0 of 6 labels, random first round] item 4",
                        "[entropy: 1 of 6 labels, random first round] item 1",
                        "[entropy: 2 of 6 labels, round 1] item 3", "[entropy: 3 of 6 labels, round 1] item 7"]


def test_the_stop_message_fits_the_width_and_keeps_the_command_whole(tmp_path):
    output = io.StringIO()
    with LabelStore(tmp_path / "a-folder-with-a-rather-long-name" / STORE_NAME) as store:
        run(store, HumanOracle(io.StringIO("q\n"), output, width=40))
    lines = output.getvalue().splitlines()
    assert lines[-1] == f"continue with: {HINT}"  # longer than 40 columns, but whole, to copy
    said = lines[lines.index("label> q") + 1:-1]
    assert " ".join(said) == f"stopped with 1 label stored in {store.path}"
    assert all(len(line) <= 40 for line in said if " " in line)  # a long path alone may be wider


def test_undo_reaches_back_into_the_previous_round(tmp_path):
    with LabelStore(tmp_path / STORE_NAME) as store:
        run(store, HumanOracle(io.StringIO("t\nr\nu\nc\nq\n"), io.StringIO()))
        # 7 was answered in round 1; undo in round 2 takes it back and asks it again.
        assert stored(store) == [(0, "Theory", "initial"), (3, "Theory", "human"), (7, "Case_Based", "human")]


def test_a_fresh_run_refuses_to_overwrite_a_persons_answers(tmp_path):
    with LabelStore(tmp_path / STORE_NAME) as store:
        run(store, HumanOracle(io.StringIO("t\n"), io.StringIO()))
        with pytest.raises(GraphseqError, match="--resume"):
            run(store, SimulatedOracle(TRUTH))


def test_the_simulated_oracle_spends_the_budget_exactly(tmp_path):
    with LabelStore(tmp_path / STORE_NAME) as store:
        curve = run(store, SimulatedOracle(TRUTH), budget=5, batch_size=3).curve
        answers = store.answers("entropy")
    assert len(answers) == 5
    assert all(CLASSES[TRUTH[a.item]] == a.label for a in answers)
    assert [n for n, _ in curve] == [1, 4, 5]


def test_budget_below_the_initial_set_is_refused(tmp_path):
    with LabelStore(tmp_path / STORE_NAME) as store, pytest.raises(GraphseqError, match="budget"):
        run(store, SimulatedOracle(TRUTH), budget=0)


def test_a_first_round_skipped_whole_is_followed_by_random_questions_until_a_label(tmp_path):
    # No label after the random first round: no model can choose, so more random items are asked.
    learner = FractionLearner()
    with LabelStore(tmp_path / STORE_NAME) as store:
        outcome = run(store, HumanOracle(io.StringIO("s\ns\nt\nc\nq\n"), io.StringIO()), initial=[3, 4],
                      learner=learner)
        assert store.skipped("entropy") == [3, 4]
        answers = stored(store)
    assert [(label, source) for _, label, source in answers] == [("Theory", "human"), ("Case_Based", "human")]
    assert not {item for item, _, _ in answers} & {3, 4}
    assert learner.fitted == [sorted(item for item, _, _ in answers)]
    assert outcome.stopped and outcome.curve == [[2, 2 / 8]]


@pytest.mark.parametrize("initial", [[], {}])
def test_an_empty_initial_set_starts_with_random_questions(tmp_path, initial):
    with LabelStore(tmp_path / STORE_NAME) as store:
        outcome = run(store, SimulatedOracle(TRUTH), initial=initial, budget=4)
        assert len(store.answers("entropy")) == 4
    assert [n for n, _ in outcome.curve] == [2, 4]


@pytest.mark.parametrize("truth,problem", [
    (torch.tensor([0, 1, 2, 0, 1, -1, 0, 1]), r"SimulatedOracle: label -1 for item 5 is no class \(0..2\)"),
    (torch.tensor([0, 1, 2, 0, 1, 2, 3, 1]), r"SimulatedOracle: label 3 for item 6 is no class \(0..2\)"),
    (torch.tensor([0, 1, 2]), r"SimulatedOracle: item 3 has no true label \(the truth holds 3 items\)"),
])
def test_true_labels_outside_the_classes_are_refused_before_anything_is_stored(tmp_path, truth, problem):
    with LabelStore(tmp_path / STORE_NAME) as store:
        with pytest.raises(GraphseqError, match=problem):
            run(store, SimulatedOracle(truth))
        assert store.answers("entropy", skips=True) == []


@pytest.mark.parametrize("initial,problem", [
    ({0: -1}, r"initial label -1 for item 0 is no class \(0..2\)"),
    ({0: 0, 1: 3}, r"initial label 3 for item 1 is no class \(0..2\)"),
    ({0: 0, 19: 1}, "initial item 19 is not among the items that may be labelled"),
    ([2, 2], "initial item 2 is given twice"),
])
def test_a_refused_initial_set_leaves_the_store_as_it_was(tmp_path, initial, problem):
    with LabelStore(tmp_path / STORE_NAME) as store:
        run(store, SimulatedOracle(TRUTH), budget=2)
        before = stored(store)
        with pytest.raises(GraphseqError, match=problem):
            run(store, SimulatedOracle(TRUTH), initial=initial)
        assert stored(store) == before


class WrongOracle:
    source = "file"

    def ask(self, question):
        return 7

    def tell(self, text):
        pass

    def restrict(self, pool):
        return pool


def test_an_oracles_label_outside_the_classes_is_refused_not_stored(tmp_path):
    with LabelStore(tmp_path / STORE_NAME) as store:
        with pytest.raises(GraphseqError, match=r"the file oracle's label 7 for item 3 is no class \(0..2\)"):
            run(store, WrongOracle())
        assert stored(store) == [(0, "Theory", "initial")]


def test_duplicate_class_names_are_refused(tmp_path):
    twice = Task(["a", "a", "b"], torch.arange(8), task().edge_index, task().describe)
    with LabelStore(tmp_path / STORE_NAME) as store:
        with pytest.raises(GraphseqError, match="class names hold 'a' twice"):
            active_learning(twice, FractionLearner(), SimulatedOracle(TRUTH), store, strategy="entropy",
                            initial={0: 0}, budget=4, batch_size=2)
        assert store.answers("entropy", skips=True) == []


class LabelLearner:
    """Its certainties and accuracy depend on the labels given, not only on how many:
    a model trained on other answers chooses other items and scores otherwise."""

    def __init__(self):
        self.fitted = []

    def fit(self, items, labels):
        self.fitted.append(sorted(zip(items.tolist(), labels.tolist())))

    def predict(self):
        shift = sum(label for _, label in self.fitted[-1])
        certainty = torch.tensor([1.0 - ((i + shift) % 4) / 4 for i in range(8)])
        probabilities = torch.stack([certainty, (1 - certainty) / 2, (1 - certainty) / 2], dim=1)
        return probabilities, probabilities

    def accuracy(self):
        return sum(int(TRUTH[item]) == label for item, label in self.fitted[-1]) / 8


@pytest.mark.parametrize("strategy", ["entropy", "random"])
def test_undo_into_a_finished_round_gives_the_curve_and_questions_of_the_kept_answers(tmp_path, strategy):
    # Round 1 asks 3 and 7. Answered c, r, both undone, then t, r: the same answers as t, r straight.
    results = []
    for name, script in (("undone", "c\nr\nu\nu\nt\nr\nq\n"), ("straight", "t\nr\nq\n")):
        learner = LabelLearner()
        with LabelStore(tmp_path / f"{name}.sqlite") as store:
            outcome = active_learning(task(), learner, HumanOracle(io.StringIO(script), io.StringIO()), store,
                                      strategy=strategy, initial={0: 0}, budget=6, batch_size=2,
                                      seed=0)
            answers = [(a.item, a.label) for a in store.answers(strategy)]
            results.append((outcome.curve, answers, store.pending(strategy), learner.fitted[-1]))
    assert results[0] == results[1]
    if strategy == "entropy":
        assert results[0][0] == [[1, 1 / 8], [3, 3 / 8]]
        assert results[0][2] == [2, 6]  # chosen by the model of 3 = Theory, 7 = Rule_Learning


@pytest.mark.parametrize("watched", ["terminal", "notebook", None])
def test_the_progress_bar_is_drawn_where_a_person_watches_only(tmp_path, monkeypatch, request, watched):
    # A stderr redirected to a file would fill with the bar's \r redraws; a notebook's is no
    # terminal, yet a person watches it.
    stderr = {"terminal": Terminal, "notebook": lambda: request.getfixturevalue("notebook"),
              None: io.StringIO}[watched]()
    monkeypatch.setattr("sys.stderr", stderr)
    with LabelStore(tmp_path / STORE_NAME) as store:
        active_learning(task(), FractionLearner(), SimulatedOracle(TRUTH), store, strategy="entropy",
                        initial={0: 0}, budget=4, batch_size=2, progress=True)
    assert ("\r" in stderr.getvalue()) == (watched is not None)
