"""The active-learning loop: train, ask about the items the strategy
wants, store each answer the moment it is given, retrain; until the budget
of labels is spent, the pool is empty, or the oracle says quit.

Every answer goes into the :class:`~graphseq.active.store.LabelStore`
before the next question, and the loop rebuilds its state from the store
when resumed: labelled items keep their labels, skipped items stay skipped
(a skip means "not this one, not ever, in this run"), and only the rest of
the pool is asked about. The test accuracy after every round is stored too:
the learning curve.
"""
from __future__ import annotations

import logging
import operator
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Dict, List, Mapping, Optional, Protocol, Sequence, Tuple

import torch
from torch import Tensor
from tqdm.auto import tqdm

from ..errors import GraphseqError, draw_bars, plural
from ..pictures import terminal_width
from ..seeding import keyed_generator
from .oracles import QUIT, SKIP, UNDO, Question, Reply
from .prompt import fit
from .store import Answer, LabelStore
from .strategies import get_strategy, random_sampling

# What a person reads about an item: (item, probabilities [num_items,
# num_classes] or None before the first model, labelled {item: class}) -> lines.
Describe = Callable[[int, Tensor, Mapping[int, int]], List[str]]


@dataclass
class Task:
    """What is being labelled: the items' graph and classes, the pool of
    items that may be asked about, and how to show an item to a person."""

    class_names: List[str]
    pool: Tensor        # [num_pool] item indices
    edge_index: Tensor  # [2, num_edges] over all items
    describe: Describe


class Learner(Protocol):
    def fit(self, items: Tensor, labels: Tensor) -> None: ...
    def predict(self) -> Tuple[Tensor, Tensor]: ...  # probabilities, embeddings
    def accuracy(self) -> float: ...


class Oracle(Protocol):
    source: str
    def ask(self, question: Question) -> Reply: ...
    def tell(self, text: str) -> None: ...
    def restrict(self, pool: Tensor) -> Tensor: ...


@dataclass
class Outcome:
    """What one strategy's loop ended with."""

    curve: List[List[float]]  # [[num_labels, test_accuracy], ...] after each whole round
    labels: int               # how many items are labelled
    stopped: bool             # the oracle asked to stop before the budget was spent


def _check_stored_items(store: LabelStore, strategy: str, pool: Tensor) -> None:
    """The stored answers and questions name items of the pool, each answered
    once: a store edited by hand or taken from another task is refused, not
    trained on."""
    allowed = set(pool.tolist())
    answered = [a.item for a in store.answers(strategy, skips=True)]
    outside = [item for item in answered + store.pending(strategy) if item not in allowed]
    if outside:
        raise GraphseqError(f"{store.path}: item {outside[0]} is not among the items that may be labelled "
                            f"(the pool of this task); was the store edited, or taken from another run? "
                            f"It was left as it is")
    twice = sorted(item for item, count in Counter(answered).items() if count > 1)
    if twice:
        raise GraphseqError(f"{store.path}: item {twice[0]} is answered more than once; was the store edited? "
                            f"It was left as it is")


def _class_index(label, item: int, names: Sequence[str], who: str) -> int:
    """``label`` as an index of ``names``, checked before it is stored."""
    try:
        index = operator.index(label)
    except TypeError:
        index = -1
    if not 0 <= index < len(names):
        raise GraphseqError(f"{who} label {label!r} for item {item} is no class (0..{len(names) - 1})")
    return index


def store_answer(store: LabelStore, strategy: str, item: int, reply: Reply, names: Sequence[str],
                 oracle: Oracle, who: str, pending: Optional[Sequence[int]] = None) -> Optional[int]:
    """Stores ``reply`` (a class's index, or SKIP) to the question about
    ``item`` at once, before the next question is asked: every question an
    oracle answers, in any loop, is stored here. Returns the class's index,
    or None for a skip. ``who`` names the loop in the refusal of a reply
    that is no class; ``pending``: the questions left of the round. The
    oracle is told what was stored (a person reads which class a typed
    prefix stood for)."""
    if reply is SKIP:
        store.add(strategy, item, None, oracle.source, pending=pending)
        oracle.tell("  stored: skipped (no label)")
        return None
    label = _class_index(reply, item, names, f"{who}: the {oracle.source} oracle's")
    store.add(strategy, item, names[label], oracle.source, pending=pending)
    oracle.tell(f"  stored: {names[label] if names[label] != str(label) else f'class {label}'}")
    return label


def undo_answer(store: LabelStore, strategy: str, oracle: Oracle, name: Callable[[Answer], str],
                requeue: bool = False) -> Optional[Answer]:
    """Takes the last answer back (an UNDO reply), telling the oracle what
    was undone (``name(answer)``) or that there was nothing to undo."""
    undone = store.undo(strategy, requeue=requeue)
    oracle.tell("  nothing to undo" if undone is None else f"  undone: {name(undone)}")
    return undone


def _check_task(task: Task, initial: Mapping[int, int] | Sequence[int]) -> Dict[int, int] | List[int]:
    """The class names differ and the initial items are items of the pool, each once, with labels
    among the classes: checked before the store is touched. Returns ``initial`` as ints."""
    names = list(task.class_names)
    twice = [name for name, count in Counter(names).items() if count > 1]
    if twice:
        raise GraphseqError(f"active_learning: the task's class names hold {twice[0]!r} twice; "
                            f"labels are stored by name, so each must differ")
    allowed = set(task.pool.tolist())
    items = []
    for item in initial:
        try:
            items.append(operator.index(item))
        except TypeError:
            raise GraphseqError(f"active_learning: initial item {item!r} is not an item index") from None
        if items[-1] not in allowed:
            raise GraphseqError(f"active_learning: initial item {item} is not among the items that may be "
                                f"labelled (the pool of this task)")
    repeated = [item for item, count in Counter(items).items() if count > 1]
    if repeated:
        raise GraphseqError(f"active_learning: initial item {repeated[0]} is given twice")
    if isinstance(initial, Mapping):
        return {item: _class_index(label, item, names, "active_learning: initial")
                for item, label in zip(items, initial.values())}
    return items


def active_learning(task: Task, learner: Learner, oracle: Oracle, store: LabelStore, *,
                    strategy: str, initial: Mapping[int, int] | Sequence[int], budget: int,
                    batch_size: int, seed: Optional[int] = None, resume: bool = False,
                    progress: bool = False, log: Optional[logging.Logger] = None,
                    resume_hint: str = "") -> Outcome:
    """Runs the loop for one strategy until the budget is spent, the pool is
    empty or the oracle says quit.

    ``initial`` is either labels known before the first question, ``{item:
    class}`` (stored with source ``initial``), or items the oracle is asked
    about first, before any model can choose (a person's or a file's first,
    random round). ``budget`` counts every label, the initial ones included;
    ``batch_size`` items are asked about per round. Until some item is
    labelled (``initial`` empty, or every item of the first round skipped),
    the items asked about are drawn at random from the pool. Labels are
    checked against the classes (and an oracle with a ``check(class_names,
    pool)`` method is asked to check itself) before the store is touched.
    A round cut short by
    quit is finished first when the run is resumed, so the learning curve
    gets a point after each whole round, resumed or not. An undo that takes
    back the last answer of a finished round opens that round again: its
    point leaves the curve, and the questions chosen after it are dropped and
    chosen again when it ends, by a model of the answers kept, as in a run
    that never had the undone answer. A choice that draws at random (random
    sampling, AGE's clustering) draws from a generator made for it from
    ``seed``, the strategy and the number of answers stored then
    (:func:`round_generator`), so a resumed run, or a round chosen again
    after an undo, draws what a run never interrupted draws; without
    ``seed``, from torch's global generator. A resumed run whose ``budget``
    is below the labels stored (and the questions left of a round cut
    short) is refused. ``resume_hint`` is what the oracle is told to type
    to continue. ``progress`` asks for a bar of the labels, drawn where a
    person watches it (:func:`~graphseq.errors.draw_bars`).
    """
    log = log or logging.getLogger("graphseq")
    select = get_strategy(strategy)
    for name, value in (("budget", budget), ("batch_size", batch_size)):
        try:
            operator.index(value)
        except TypeError:
            raise GraphseqError(f"active_learning: {name} must be a whole number, got {value!r}") from None
    if budget < len(initial):
        raise GraphseqError(f"the budget ({budget}) is smaller than the initial labelled set ({len(initial)})")
    if batch_size < 1:
        raise GraphseqError(f"batch_size must be at least 1, got {batch_size}")
    names = list(task.class_names)
    index_of = {name: i for i, name in enumerate(names)}
    initial = _check_task(task, initial)
    check_oracle = getattr(oracle, "check", None)
    if callable(check_oracle):
        check_oracle(names, task.pool)

    if not resume:
        if store.has_human_answers(strategy):
            raise GraphseqError(f"{store.path} already holds answers a person gave; continue them with "
                                f"--resume, or choose another --out")
        store.clear(strategy)
    if not store.answers(strategy, skips=True) and not store.pending(strategy):
        if isinstance(initial, Mapping):
            for item, label in initial.items():
                store.add(strategy, item, names[label], "initial")
        else:
            store.set_pending(strategy, initial)
    _check_stored_items(store, strategy, task.pool)
    labelled: Dict[int, int] = {}
    for answer in store.answers(strategy):
        if answer.label not in index_of:
            raise GraphseqError(f"{store.path}: item {answer.item} has the label {answer.label!r}, "
                                f"which is no class of this task ({', '.join(names)})")
        labelled[answer.item] = index_of[answer.label]
    skipped = set(store.skipped(strategy))
    queue = store.pending(strategy)  # The questions left of a round cut short.
    if len(labelled) + len(queue) > budget:  # a resumed run given a smaller budget
        left = f" and the {plural(len(queue), 'question')} left of the round cut short" if queue else ""
        raise GraphseqError(f"the budget ({budget}) is smaller than the {plural(len(labelled), 'label')} stored in "
                            f"{store.path}{left}; resume with a budget of {len(labelled) + len(queue)} or more")
    if resume:
        log.info(f"{strategy}: resumed with {plural(len(labelled), 'label')}, "
                 f"{plural(len(skipped), 'skipped item')}"
                 + (f" and {plural(len(queue), 'question')} left of the last round" if queue else ""))

    pool = oracle.restrict(task.pool)
    stopped = False
    # No bar where no person watches (a log file, which its \r redraws would fill); tqdm's own
    # test (disable=None) would also hide it in a notebook, whose stderr is no terminal.
    bar = tqdm(total=budget, initial=len(labelled), desc=strategy, disable=not (progress and draw_bars()),
               leave=False)
    try:
        while True:
            probabilities = embeddings = None
            trained = set(labelled)  # what the model shown and choosing knows
            if labelled:
                items = torch.tensor(list(labelled), dtype=torch.long)
                learner.fit(items, torch.tensor([labelled[i] for i in labelled], dtype=torch.long))
                probabilities, embeddings = learner.predict()
                if not queue:  # A whole round is done: a point of the learning curve.
                    accuracy = learner.accuracy()
                    store.add_round(strategy, len(labelled), accuracy)
                    scored = getattr(learner, "mask_name", "test_mask").removesuffix("_mask")
                    log.info(f"{strategy}: {plural(len(labelled), 'label')}, {scored} accuracy {accuracy:.4f}")
            if not queue:
                taken = torch.tensor(sorted(set(labelled) | skipped), dtype=pool.dtype, device=pool.device)
                candidates = pool[~torch.isin(pool, taken)]
                if len(labelled) >= budget or candidates.numel() == 0:
                    break
                k = min(batch_size, budget - len(labelled))
                generator = (None if seed is None else
                             round_generator(seed, strategy, len(store.answers(strategy, skips=True))))
                if labelled:
                    round = len(store.rounds(strategy)) - 1  # rounds chosen by the strategy before
                    chosen = select(probabilities, candidates.to(probabilities.device), k,
                                    generator=generator, edge_index=task.edge_index.to(probabilities.device),
                                    embeddings=embeddings, round=round,
                                    labelled=items.to(probabilities.device))
                else:  # No model yet (every item asked so far was skipped): ask about random items.
                    chosen = random_sampling(None, candidates, k, generator=generator)
                queue = [int(i) for i in chosen]
                store.set_pending(strategy, queue)
            while queue:
                item = queue[0]
                # The rounds a model chose start after the first point of the curve; before it, the
                # round is random (it may hold answers already: the first round's start).
                done = len(store.rounds(strategy))
                which = f"round {done}" if done else "random first round"
                question = Question(item, names, task.describe(item, probabilities, labelled),
                                    f"{strategy}: {len(labelled)} of {budget} labels, {which}")
                reply = oracle.ask(question)
                if reply is QUIT:
                    stopped = True
                    # Wrapped to the width, but the command on a line of its own, whole, to copy.
                    said = fit(f"stopped with {plural(len(labelled), 'label')} stored in {store.path}",
                               getattr(oracle, "width", None) or terminal_width())
                    oracle.tell("\n".join(said + ([f"continue with: {resume_hint}"] if resume_hint else [])))
                    break
                if reply is UNDO:
                    undone = undo_answer(store, strategy, oracle, lambda answer: f"item {answer.item} " + (
                        f"= {answer.label}" if answer.label is not None else "(skipped)"), requeue=True)
                    if undone is None:
                        continue
                    labelled.pop(undone.item, None)
                    skipped.discard(undone.item)
                    queue = store.pending(strategy)
                    if undone.item in trained:  # Train again: no model may know the undone answer.
                        break
                    continue
                queue.pop(0)
                label = store_answer(store, strategy, item, reply, names, oracle, "active_learning", pending=queue)
                if label is None:
                    skipped.add(item)
                else:
                    labelled[item] = label
                bar.update(len(labelled) - bar.n)
            if stopped:
                break
    finally:
        bar.close()
    return Outcome(store.rounds(strategy), len(labelled), stopped)


def round_generator(seed: int, strategy: str, answers: int) -> torch.Generator:
    """The generator a round chosen after ``answers`` answers (skips
    included) draws from: the same for the same seed, strategy and count,
    whether the run was interrupted, resumed or undone in between."""
    return keyed_generator(seed, strategy, answers)
