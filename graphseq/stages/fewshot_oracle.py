"""Stage of ``fewshot-omniglot-active``: an active model asks, in each test
episode, for the label of the image its query head chooses, and a person
(at the terminal or in the browser), a labels file or the ground truth
answers; every answer goes into ``labels.sqlite`` before the next question,
and a resumed run asks only what is unanswered.
"""
from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import torch
from torch import Tensor
from torch_geometric.data import Data

from .. import distributed
from ..active.loop import store_answer, undo_answer
from ..active.oracles import QUIT, UNDO, FileOracle, Guess, PictureRow, Question
from ..active.store import STORE_NAME, LabelStore
from ..checks import at_least, one_of, probability
from ..data.episodes import EpisodeSampler
from ..errors import GraphseqError, plural
from ..io import read_json, write_json
from ..models.fewshot import QUERY_MODES, FewShotModel
from ..pictures import image_blocks, side_by_side, terminal_width
from .active import EXISTING_FILE, ORACLES, announcer, check_person, closing, make_oracle
from .fewshot import NAME, ORACLE_RECORD, read_oracle_record, name_suffix, step_seed
from .registry import stage

ORACLE_SEED = 30_000_001
# The columns of a --labels file: an episode, counted from 0 (the prompt's "item"), and its class number.
LABELS_COLUMNS = ("episode", "class")


def oracle_episodes(sampler: EpisodeSampler, episodes: int, seed: int, device: torch.device) -> Data:
    """``episodes`` episodes as one batch, episode ``e`` drawn from a
    generator of its own (seeded by ``seed`` and ``e``): episode ``e`` is
    the same however many there are, so a resumed run that asks about more
    episodes only adds some."""
    parts = [sampler.sample(1, torch.Generator().manual_seed(step_seed(seed, e))) for e in range(episodes)]
    size = sampler.episode_size
    fields = ("x", "y", "labelled", "query", "target", "classes", "image")
    return Data(**{key: torch.cat([part[key] for part in parts]).to(device) for key in fields},
                edge_index=sampler.edges(episodes).to(device),
                batch=torch.arange(episodes, device=device).repeat_interleave(size),
                ptr=torch.arange(episodes + 1, device=device) * size, num_nodes=episodes * size)


def _asking(model: FewShotModel, batch: Data, query: str, answers: Tensor, seed: int) -> Tensor:
    """The model's answers with the oracle's answers written in; a random
    query chooses the same images at every call (a seeded generator, the
    global one left as it was)."""
    devices = [batch.x.device] if batch.x.device.type == "cuda" else []
    with torch.no_grad(), torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        return model(batch, query=query, answers=answers)


def _check_asked(path: Path, stored: Dict[int, str], images: List[List[int]], strategy: str,
                 training: str) -> None:
    """Each stored answer is about the image the model asks about now."""
    if not stored:
        return
    if not path.is_file():
        raise GraphseqError(f"{path.parent / STORE_NAME} holds oracle answers but {path} is missing, so the "
                            f"images they were about are unknown; choose another --out")
    record = read_oracle_record(path)
    if record["training"] != training or record["query"] != strategy:
        raise GraphseqError(f"{path}: the stored answers were given to training {record['training']!r} "
                            f"asking with {record['query']!r}, not {training!r} with {strategy!r}")
    for episode in sorted(stored):
        if episode >= len(record["asked"]) or record["asked"][episode] != images[episode]:
            was = record["asked"][episode] if episode < len(record["asked"]) else None
            raise GraphseqError(f"fewshot_oracle: episode {episode} was answered about test image {was} "
                                f"(class, drawing), but the model now asks about {images[episode]}: it is "
                                f"not the model the answers were given to; choose another --out")


def _wrapped(text: str, width: int, indent: str = "") -> List[str]:
    return textwrap.wrap(text, width, initial_indent=indent, subsequent_indent=indent,
                         break_long_words=False, break_on_hyphens=False)


def _episode_nodes(batch, episode: int, ways: int) -> Tuple[List[Tuple[int, int]], int]:
    """The labelled nodes of an episode with their class, class by class,
    and its query node."""
    nodes = range(int(batch.ptr[episode]), int(batch.ptr[episode + 1]))
    labelled = [(node, way) for way in range(ways) for node in nodes
                if bool(batch.labelled[node]) and int(batch.y[node]) == way]
    return labelled, next(node for node in nodes if bool(batch.query[node]))


def _describe_episode(batch, episode: int, asked: int, before: torch.Tensor, ways: int,
                      picture_width: int, width: int) -> List[str]:
    """What a person sees at the terminal, in lines of at most ``width``
    columns: the labelled images of each class, the image the model asks
    about, the query, and the model's answer for the query so far (a
    :class:`Guess`, which the prompt wraps)."""
    labelled, query = _episode_nodes(batch, episode, ways)
    picture_width = min(picture_width, width)
    pictures = [image_blocks(batch.x[node], picture_width) for node, _ in labelled]
    lines = _wrapped("The labelled images of each class:", width)
    lines += side_by_side(pictures, [f"class {way}" for _, way in labelled], width=width)
    pair = side_by_side([image_blocks(batch.x[asked], picture_width), image_blocks(batch.x[query], picture_width)],
                        ["which class is this?", "query"], width=width)
    # Its first line holds the captions of the first row: both where the two fit beside each other.
    first, second = ("image on the left", "the right one") if "query" in pair[0] else \
        ("upper image", "the lower one")
    lines += [""] + _wrapped(f"The model asks about the {first}; {second} is the query it must classify:", width)
    lines += pair
    return lines + [_guess(before)]


def _guess(before: torch.Tensor) -> Guess:
    probabilities = before.softmax(dim=-1)
    guess = int(probabilities.argmax())
    return Guess(f"The model's answer for the query without your label: class {guess} "
                 f"(probability {float(probabilities[guess]):.2f})")


def _episode_pictures(batch, episode: int, asked: int, ways: int, images: Tensor) -> List[PictureRow]:
    """The same episode as images for a page: the labelled images of each
    class, then the image the model asks about beside the query, as the
    split's ``images`` ``[classes, per_class, channels, height, width]``
    hold them (the model's inputs are normalised)."""
    labelled, query = _episode_nodes(batch, episode, ways)

    def image(node: int) -> Tensor:
        kind, drawing = batch.image[node].tolist()
        return images[kind, drawing]

    return [PictureRow("The labelled images of each class", [image(node) for node, _ in labelled],
                       [f"class {way}" for _, way in labelled]),
            PictureRow("The model asks about the image on the left; the right one is the query it must classify",
                       [image(asked), image(query)], ["which class is this?", "the query"])]


def _check_training(table: str, training: str, trainings: Dict[str, bool], models: Dict[str, str] = {}) -> None:
    """The training the oracle asks for exists, and its model has a query
    head (``trainings``: each training's name, and whether its model has one;
    ``section``: the oracle's section, which the refusals name; ``models``: each
    training's model section, where known)."""
    if training not in trainings:
        raise GraphseqError(f"{table}.training = {training!r}: no earlier training of that name; "
                            f"the trainings of this pipeline: {', '.join(repr(n) for n in trainings)}")
    if not trainings[training]:
        raise GraphseqError(f"{table}.training = {training!r} trains a model without a query head; the oracle "
                            f"needs an active model ({models.get(training, 'model')}.active = true)")


def _stored_answers(table: str, path: Path, strategy: str, episodes: int, ways: Optional[int]) -> Dict[int, str]:
    """The class each episode was answered with in the label store ``path``
    (opened to read), refused where a run of ``episodes`` episodes (and
    ``ways`` classes, where known) cannot hold an answer: a resumed run keeps
    every answer (``section``: the oracle's, which the refusal names). Episodes
    are counted from 1, as the questions count them."""
    with LabelStore(path, read_only=True) as store:
        stored = {answer.item: answer.label for answer in store.answers(strategy)}
    last = max(stored, default=-1)
    if last >= episodes:
        raise GraphseqError(f"{table}.episodes = {episodes}, but {path} holds an answer for episode "
                            f"{last + 1} (item {last} in 'graphseq labels'), and a resumed run keeps every "
                            f"answer; set {table}.episodes to at least {last + 1}")
    for item, label in stored.items():
        if item < 0 or (ways is not None and label not in [str(way) for way in range(ways)]):
            classes = f"classes 0-{ways - 1}" if ways is not None else "classes from 0"
            raise GraphseqError(f"{path}: item {item} has the answer {label!r}, which this run cannot hold "
                                f"(items from 0, {classes}); it was left as it is")
    return stored


def _check_oracle(check, *, episodes: int, oracle: str, labels: str, training: str, query: str = "learned",
                  **_) -> None:
    """What would stop the oracle after the training: the training it names,
    an active model, ``--oracle file``'s labels file, every row, and, on
    ``--resume``, stored answers the run cannot hold."""
    if not oracle and "oracle" not in check.options:
        return  # No oracle: the stage is skipped.
    check_person(check.options.get("oracle", oracle))
    for folder in check.resumed:  # the run's folders that --resume continues
        if (folder / STORE_NAME).is_file():
            _stored_answers(check.section, folder / STORE_NAME, query, episodes, check.facts.get("fewshot_ways"))
    if "oracle" in check.options:
        return  # An oracle object answers as it is.
    if "fewshot_trainings" in check.facts:  # Else the stage itself says what it needs.
        _check_training(check.section, training, check.facts["fewshot_trainings"],
                        check.facts.get("fewshot_training_models", {}))
    if oracle == "file":
        answers = make_oracle(oracle, labels, torch.zeros(0), 0.0, 0, LABELS_COLUMNS)  # a missing or unreadable file
        if "fewshot_ways" in check.facts:
            answers.check([str(way) for way in range(check.facts["fewshot_ways"])], torch.arange(episodes))


@stage("fewshot_oracle", checks={"episodes": at_least(1), "oracle": one_of("", *ORACLES), "labels": EXISTING_FILE,
                                  "noise": probability, "query": one_of(*QUERY_MODES), "training": NAME,
                                  "picture_width": at_least(8)},
        options=("oracle", "labels"),
        resume_may_change=("episodes", "noise", "picture_width"),  # the last: display only
        resume_reads=(STORE_NAME, ORACLE_RECORD), precheck=_check_oracle,
        applies={"episodes": {"oracle": ORACLES}, "query": {"oracle": ORACLES}, "training": {"oracle": ORACLES},
                 "noise": {"oracle": ("simulated",)}, "labels": {"oracle": ("file",)},
                 "picture_width": {"oracle": ("human",)}},
       needs={"data": "a few-shot dataset", "trained": "a trained few-shot model"})
def fewshot_oracle(ctx, *, episodes: int = 20, oracle: str = "", labels: str = "", noise: float = 0.0,
                   query: str = "learned", training: str = "", picture_width: int = 28) -> None:
    """An active model asks, in each of ``episodes`` test episodes, for the
    label of the image its query head chooses; the oracle answers and the
    model's answer for the query is shown before and after.

    The oracle is ``--oracle human`` (you, at the terminal: the images are
    drawn with block characters, ``picture_width`` columns each (28, one
    column a pixel of Omniglot's images; narrower where the terminal is),
    and the text is wrapped to the terminal's width), ``--oracle web`` (a
    page in your browser), ``file`` (``--labels F.csv``
    of ``episode,class`` rows, the episode counted from 0 as the prompt's
    ``item`` and ``graphseq labels`` count it: the prompt's "episode 1" is
    episode 0; a header ``episode,class`` or ``item,label`` is taken) or
    ``simulated`` (the true labels, flipped with probability ``noise``);
    none (the default) skips the stage, and its
    other keys have no use then (nor ``noise``, ``labels`` and
    ``picture_width`` with another oracle than their own). The
    model is that of the training named ``training`` (the pipeline's
    unnamed one by default). Every answer goes into ``labels.sqlite`` at
    once (``graphseq labels DIR`` lists them; item = the episode's number
    from 0, label = the class number), the image it is about into
    ``oracle-images.json``, and ``--resume`` asks only what is unanswered.
    Episode ``e`` is the same for any ``episodes``, so a resumed run may ask
    about more; a model that asks about other images than the stored
    answers are about is refused.
    """
    kind = ctx.options.get("oracle") or oracle
    labels = ctx.options.get("labels") or labels
    if not kind:
        ctx.log.info("fewshot_oracle: no oracle (use --oracle human, file or simulated); skipped")
        return
    data = ctx.require("data", "fewshot_oracle")
    trained = ctx.require("trained", "fewshot_oracle")
    _check_training(ctx.section, training, {name: model.config.active for name, model in trained.items()})
    model = trained[training]

    model.eval()
    seed = ctx.seed + ORACLE_SEED
    batch = oracle_episodes(data.sampler("test"), episodes, seed, ctx.device)
    nothing = torch.full((episodes,), -1, dtype=torch.long, device=ctx.device)
    with torch.no_grad():
        before = model(batch, query="none").cpu()
    _asking(model, batch, query, nothing, seed)
    asked = model.asked.clone()
    images = batch.image[asked].tolist()  # [episodes, 2]: the (class, drawing) of the test split asked about
    truth = batch.y[asked].cpu()
    strategy = query
    width = terminal_width()
    path, record = ctx.out / STORE_NAME, ctx.out / ORACLE_RECORD
    stored = {}
    if ctx.resume and path.is_file():  # Checked before anything is written (and before the run, by the precheck).
        stored = _stored_answers(ctx.section, path, strategy, episodes, data.ways)
        _check_asked(record, stored, images, strategy, training)

    the_oracle = make_oracle(kind, labels, truth, noise, ctx.seed, LABELS_COLUMNS, announcer(ctx))
    names = [str(way) for way in range(data.ways)]
    if isinstance(the_oracle, FileOracle):
        the_oracle.check(names, torch.arange(episodes))  # Every row, before the first answer is stored.
    with closing(the_oracle, kind), LabelStore(path) as store:
        if not ctx.resume:
            if store.has_human_answers(strategy):
                raise GraphseqError(f"{store.path} already holds answers a person gave; continue them with "
                                    f"--resume, or choose another --out")
            store.clear(strategy)
        written = {"training": training, "query": strategy,
                   "steps": int(ctx.metrics.get(f"steps{name_suffix(training)}", 0)), "asked": images}
        if distributed.is_main() and (not record.is_file() or read_json(record) != written):
            write_json(record, written)  # Before the first answer is stored.
        answers = nothing.clone()
        for answer in store.answers(strategy):
            answers[answer.item] = names.index(answer.label)
        skipped = set(store.skipped(strategy))
        queue = [e for e in range(episodes) if int(answers[e]) < 0 and e not in skipped]
        ctx.log.info(f"oracle {the_oracle.source}: {episodes} test episodes, "
                     f"{episodes - len(queue)} answered or skipped before")
        while queue:
            e = queue.pop(0)
            question = Question(e, names, _describe_episode(batch, e, int(asked[e]), before[e], data.ways,
                                                            picture_width, width),
                                f"episode {e + 1} of {episodes}",
                                _episode_pictures(batch, e, int(asked[e]), data.ways, data.splits["test"].images))
            reply = the_oracle.ask(question)
            if reply is QUIT:
                the_oracle.tell("\n".join(_wrapped(f"stopped; your answers are stored in {store.path}; "
                                                   f"continue with:", width)
                                          + [f"{ctx.resume_command or f'--resume --out {ctx.out}'} "
                                             f"--oracle {the_oracle.source}"]))
                ctx.stopped = True
                break
            if reply is UNDO:
                queue.insert(0, e)
                undone = undo_answer(store, strategy, the_oracle, lambda answer: f"episode {answer.item + 1} " + (
                    f"= class {answer.label}" if answer.label is not None else "(skipped)"))
                if undone is not None:
                    answers[undone.item] = -1
                    skipped.discard(undone.item)
                    queue.insert(0, undone.item)
                continue
            label = store_answer(store, strategy, e, reply, names, the_oracle, "fewshot_oracle")
            if label is None:
                skipped.add(e)
            else:
                answers[e] = label
                after = _asking(model, batch, query, answers, seed)[e].softmax(dim=-1)
                guess, was = int(after.argmax()), int(before[e].argmax())
                the_oracle.tell("\n".join(_wrapped(
                    f"with your answer the model says class {guess} (probability {float(after[guess]):.2f}); "
                    f"before it said class {was}; the query is class {int(batch.target[e])}", width, "  ")))
        given = answers >= 0
        after = _asking(model, batch, query, answers, seed).argmax(dim=1).cpu()
    model.train()
    given, target = given.cpu(), batch.target.cpu()
    count = int(given.sum())
    ctx.metrics["oracle_answers"] = count
    if count:
        ctx.metrics["oracle_answers_correct"] = float((answers.cpu()[given] == truth[given]).float().mean())
        ctx.metrics["oracle_query_accuracy_before"] = float((before.argmax(dim=1)[given] == target[given]).float().mean())
        ctx.metrics["oracle_query_accuracy_after"] = float((after[given] == target[given]).float().mean())
    ctx.log.info(f"oracle: {plural(count, 'answer')} stored in {ctx.out / STORE_NAME}")
