"""Stages of the captioning pipelines (``caption-*``): load a captioning set
(the generated shapes, or MS-COCO), pretrain a small CNN encoder on the
images' attributes, build a captioner with one of three decoders, train it
with teacher forcing, and evaluate greedy decoding and beam search with BLEU
and, on the shapes, an exact count of the objects a caption gets right.
"""
from __future__ import annotations

import math
import warnings
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..checks import Domain, at_least, between, each, is_number, non_negative, one_of, positive, probability
from ..data.captions import COCO_SPLITS, CaptionSet, caption_vocabulary, locate_coco, read_coco_captions
from ..data.shapes import MAX_OBJECTS, SPLITS, load_shapes, score_objects
from ..data.text import Vocabulary
from ..errors import GraphseqError
from ..io import first_sentence, load_checkpoint, save_checkpoint, write_json
from ..models.caption_search import MAX_CAPTION_WORDS, Generated, beam_search, greedy
from ..models.captioner import DECODERS, MODEL_FILE, Captioner, ConvEncoder, colour_summary
from ..seeding import MAX_SEED
from ..training import CHECKPOINT, train_steps
from ..pictures import draw_attention
from .registry import stage, stage_params

ENCODER_CHECKPOINT = "encoder_checkpoint.pt"
# The encoder halves an image three times, so its side is a multiple of 8.
IMAGE_SIZE = Domain("a multiple of 8, at least 16", lambda v: is_number(v) and v >= 16 and v % 8 == 0)
CHANNELS = Domain("a list of 4 whole numbers >= 1 (the encoder's four convolutions)",
                  lambda v: isinstance(v, list) and len(v) == 4
                  and all(isinstance(c, int) and not isinstance(c, bool) and c >= 1 for c in v))
SCORES_TEST = Domain("a list that holds 'test'", lambda v: "test" in v)  # the splits the figure is drawn from
BLEU_WEIGHTS = [(1.0, 0, 0, 0), (0.5, 0.5, 0, 0), (1 / 3, 1 / 3, 1 / 3, 0), (0.25, 0.25, 0.25, 0.25)]


@dataclass
class CaptionData:
    """The splits of a captioning set (``train``, ``val``, ``test`` and, for
    the shapes, ``test_unseen``) and the vocabulary of the training captions."""
    splits: Dict[str, CaptionSet]
    vocab: Vocabulary
    image_size: int


def cosine_schedule(optimizer: torch.optim.Optimizer, steps: int, final_fraction: float):
    """Every learning rate falls along half a cosine to ``final_fraction`` of
    itself over ``steps`` steps."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: final_fraction + (
        1 - final_fraction) * 0.5 * (1 + math.cos(math.pi * min(step, steps) / steps)))


def _step_generator(seed: int, step: int) -> torch.Generator:
    # A generator per step, so a resumed run draws the same batches.
    return torch.Generator().manual_seed(seed * 1_000_003 + step)


# --------------------------------------------------------------------------- #
# Data
# --------------------------------------------------------------------------- #

def _note_splits(check, *, val: int, test: int, test_unseen: Optional[int] = None, **_) -> None:
    # For the prechecks of the training (its validation images) and the evaluation (its test figure,
    # and the splits it scores: none that a size of 0 left out).
    check.facts["caption_val"], check.facts["caption_test"] = val, test > 0
    check.facts["caption_empty"] = [name for name, size in (("test", test), ("test_unseen", test_unseen))
                                    if size == 0]
    check.facts["caption_data_table"] = check.section  # which the refusals of later sections name


@stage("shapes_captions", checks={
    "seed": between(0, MAX_SEED), "train": at_least(1), "val": at_least(1), "test": non_negative,
    "test_unseen": non_negative, "image_size": IMAGE_SIZE, "max_objects": between(1, MAX_OBJECTS)},
    precheck=_note_splits,
    makes={"data": "a caption dataset"})
def shapes_captions(ctx, *, seed: int = 0, train: int = 8000, val: int = 500, test: int = 1000,
                    test_unseen: int = 1000, image_size: int = 64, max_objects: int = 3) -> None:
    """The generated shapes set (:mod:`graphseq.data.shapes`): ``train``,
    ``val`` and ``test`` images of seen colour-shape pairs and
    ``test_unseen`` images with at least one pair never seen in training,
    all drawn from ``seed`` (the data's own seed, fixed whatever the run's)."""
    sizes = {"train": train, "val": val, "test": test, "test_unseen": test_unseen}
    splits = {name: load_shapes(name, count, seed, image_size, max_objects)
              for name, count in sizes.items() if count > 0}
    vocab = caption_vocabulary(t for caps in splits["train"].tokens for t in caps)
    ctx.data = CaptionData(splits, vocab, image_size)
    ctx.log.info("shapes: " + ", ".join(f"{n} {len(s)}" for n, s in splits.items())
                 + f" images of {image_size}x{image_size}; {len(vocab)} words")


@stage("coco_captions", checks={
    "train_split": one_of(*COCO_SPLITS), "eval_split": one_of(*COCO_SPLITS), "val": at_least(1),
    "test": non_negative, "max_train": non_negative, "image_size": IMAGE_SIZE, "min_count": at_least(1)},
    precheck=_note_splits,
    makes={"data": "a caption dataset"})
def coco_captions(ctx, *, train_split: str = "train2014", eval_split: str = "val2014",
                  val: int = 5000, test: int = 5000, max_train: int = 0, image_size: int = 128,
                  min_count: int = 5, download: bool = True) -> None:
    """MS-COCO captions from ``DATA_ROOT/coco`` or ``MIRROR/coco``
    (``annotations/captions_SPLIT.json`` and ``SPLIT/`` images), downloaded
    when neither has them. Training on ``train_split`` (its first
    ``max_train`` images by id, 0: all); validation and test are the first
    ``val`` and the next ``test`` images of ``eval_split`` by id (the sizes
    of Karpathy's split). Words seen fewer than ``min_count`` times in
    training become ``<unk>``. With ``test = 0`` there is no test split."""
    train_set = read_coco_captions(*locate_coco(train_split, ctx.data_root, ctx.data_mirror, download),
                                   image_size=image_size)
    held_out = read_coco_captions(*locate_coco(eval_split, ctx.data_root, ctx.data_mirror, download),
                                  image_size=image_size)
    if max_train > 0:
        train_set = train_set.subset(range(min(max_train, len(train_set))))
    if len(held_out) < val + test:
        raise GraphseqError(f"COCO {eval_split} has {len(held_out)} images, fewer than val={val} + test={test}; "
                            f"lower {ctx.section}.val or {ctx.section}.test")
    splits = {"train": train_set, "val": held_out.subset(range(val))}
    if test > 0:  # An empty split would score nothing (BLEU of no captions is no number).
        splits["test"] = held_out.subset(range(val, val + test))
    vocab = caption_vocabulary((t for caps in train_set.tokens for t in caps), min_count)
    ctx.data = CaptionData(splits, vocab, image_size)
    ctx.log.info("COCO: " + ", ".join(f"{n} {len(s)}" for n, s in splits.items())
                 + f" images at {image_size}x{image_size}; {len(vocab)} words")


# --------------------------------------------------------------------------- #
# The encoder and its pretraining
# --------------------------------------------------------------------------- #

class AttributeClassifier(nn.Module):
    """An encoder with a linear read-out of attributes from its global feature."""

    def __init__(self, encoder: ConvEncoder, num_attributes: int):
        super().__init__()
        self.encoder = encoder
        self.head = nn.Linear(encoder.feature_dim, num_attributes)

    def forward(self, images: Tensor) -> Tensor:
        return self.head(self.encoder(images)[1])


def attribute_targets(labels: Sequence[Sequence[str]], names: Sequence[str]) -> Tensor:
    """Multi-hot ``[len(labels), len(names)]``: which named attributes each image has."""
    index = {n: i for i, n in enumerate(names)}
    targets = torch.zeros(len(labels), len(names))
    for row, image_labels in enumerate(labels):
        for label in image_labels:
            if label in index:
                targets[row, index[label]] = 1.0
    return targets


@torch.no_grad()
def attribute_scores(model: AttributeClassifier, data: CaptionSet, targets: Tensor,
                     device: torch.device, batch_size: int = 250) -> Dict[str, float]:
    """Micro-averaged F1 of the attributes predicted at probability 0.5, and
    the share of images whose attributes are all right."""
    predicted = torch.cat([model(data.load_images(range(i, min(i + batch_size, len(data)))).to(device)).cpu() > 0
                           for i in range(0, len(data), batch_size)])
    truth = targets.bool()
    hits = (predicted & truth).sum().item()
    f1 = 2 * hits / max(1, predicted.sum().item() + truth.sum().item())
    exact = (predicted == truth).all(dim=1).float().mean().item()
    return {"val_attribute_f1": f1, "val_attributes_exact": exact}


@stage("caption_encoder", checks={
    "channels": CHANNELS, "pretrain_steps": non_negative, "batch_size": at_least(1), "lr": positive,
    "max_attributes": at_least(1), "eval_every": at_least(1)}, resumes=ENCODER_CHECKPOINT,
    applies={key: {"from_run": ("",)} for key in ("pretrain_steps", "batch_size", "lr", "eval_every")},
    makes={"encoder": "an image encoder"}, needs={"data": "a caption dataset"})
def caption_encoder(ctx, *, channels: list = [16, 32, 64, 128], pretrain_steps: int = 1500,
                    batch_size: int = 64, lr: float = 0.002, max_attributes: int = 1000,
                    eval_every: int = 250, from_run: str = "") -> None:
    """A :class:`~graphseq.models.captioner.ConvEncoder` pretrained to tell
    which attributes an image has (multi-label, binary cross-entropy): for
    the shapes, each shape, colour and size present, each colour-shape pair
    and the number of objects; for other sets, the ``max_attributes`` most
    frequent content words of the training captions. Adam at ``lr``
    (decayed along a cosine to a tenth) for ``pretrain_steps`` steps of
    ``batch_size`` images (0: no pretraining,
    the encoder starts from random weights); the weights with the best
    validation F1 are kept. Writes ``encoder_checkpoint.pt`` (resumable) and
    ``encoder_curves.png``. With ``from_run`` (the ``--out`` folder of an
    earlier captioning run of the same data) its pretrained encoder is
    copied instead, so that several decoders share one pretraining (the
    pretraining's keys then have no use)."""
    data: CaptionData = ctx.require("data", "caption_encoder")
    encoder = ConvEncoder(channels)
    train, val = data.splits["train"], data.splits["val"]
    counts = Counter(label for labels in train.labels for label in labels)
    names = sorted(counts, key=lambda n: (-counts[n], n))[:max_attributes]
    ctx.encoder = encoder.to(ctx.device)
    if from_run:
        _copy_encoder(ctx, encoder, Path(from_run), names)
        return
    if pretrain_steps <= 0:
        # Kept all the same, so that the run resumes and other runs can copy it.
        save_checkpoint({"model": {f"encoder.{k}": v for k, v in encoder.state_dict().items()},
                         "best_model": None, "step": 0, "attributes": names}, ctx.out / ENCODER_CHECKPOINT)
        ctx.log.info("encoder: not pretrained (random weights)")
        return
    model = AttributeClassifier(encoder, len(names)).to(ctx.device)
    train_targets = attribute_targets(train.labels, names)
    val_targets = attribute_targets(val.labels, names)

    def loss_fn(model: AttributeClassifier, step: int):
        rows = torch.randint(len(train), (batch_size,), generator=_step_generator(ctx.seed, step))
        logits = model(train.load_images(rows).to(ctx.device))
        return F.binary_cross_entropy_with_logits(logits, train_targets[rows].to(ctx.device))

    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    ctx.log.info(f"encoder: pretraining on {len(names)} attributes of {len(train)} images")
    result = train_steps(model, optimizer, loss_fn, steps=pretrain_steps, out=ctx.out, device=ctx.device,
                         resume=ctx.resume, quiet=ctx.quiet, log=ctx.log, pipeline=ctx.pipeline,
                         scheduler=cosine_schedule(optimizer, pretrain_steps, 0.1),
                         evaluate=lambda m: attribute_scores(m, val, val_targets, ctx.device),
                         eval_every=eval_every, select=("val_attribute_f1", "max"),
                         checkpoint_every=eval_every, checkpoint=ENCODER_CHECKPOINT,
                         curves="encoder_curves.png", desc="pretrain encoder",
                         meta={"attributes": names})
    ctx.metrics.update(encoder_steps=result.step, encoder_minutes=result.seconds / 60,
                       encoder_val_attribute_f1=result.best["val_attribute_f1"],
                       encoder_val_attributes_exact=result.best["val_attributes_exact"])


def _copy_encoder(ctx, encoder: ConvEncoder, run_dir: Path, names: List[str]) -> None:
    """Loads the pretrained encoder of another run, and keeps a copy of its
    checkpoint in this run's folder, which a resumed run reads instead."""
    own = ctx.out / ENCODER_CHECKPOINT
    path = own if ctx.resume and own.is_file() else run_dir / ENCODER_CHECKPOINT
    if not path.is_file():
        raise GraphseqError(f"encoder.from_run: no {ENCODER_CHECKPOINT} in {run_dir}")
    try:
        checkpoint = load_checkpoint(path, map_location="cpu")
        weights = checkpoint["best_model"] or checkpoint["model"]
        state = {k[len("encoder."):]: v for k, v in weights.items() if k.startswith("encoder.")}
        if sorted(checkpoint.get("attributes") or []) != sorted(names):
            raise GraphseqError(f"encoder.from_run: {path} was pretrained on other attributes "
                                f"(another data set?)")
        encoder.load_state_dict(state)
    except GraphseqError:
        raise
    except Exception as error:  # A torn file, or an encoder of other channels.
        raise GraphseqError(f"encoder.from_run: cannot use {path}: {first_sentence(error)}") from None
    if path != own:
        save_checkpoint(checkpoint, own)
    ctx.log.info(f"encoder: copied from {path} (step {checkpoint['step']})")
    ctx.metrics.update(encoder_steps=checkpoint["step"])


# --------------------------------------------------------------------------- #
# The captioner and its training
# --------------------------------------------------------------------------- #

def _check_heads(check, *, decoder: str, hidden_size: int, heads: int, **_) -> None:
    # Before the encoder's pretraining writes its checkpoint.
    check.facts["caption_decoder"] = decoder  # for evaluate_captions' precheck of its attention figure
    check.facts["caption_model_table"] = check.section
    if decoder == "attention" and hidden_size % heads:
        raise GraphseqError(f"{check.section}.heads = {heads} must divide {check.section}.hidden_size = {hidden_size}")


@stage("captioner", checks={
    "decoder": one_of(*DECODERS), "embedding_dim": at_least(1), "hidden_size": at_least(1),
    "num_layers": at_least(1), "heads": at_least(1), "attention_layers": at_least(1), "dropout": probability},
       precheck=_check_heads,
       applies={"heads": {"decoder": ("attention",)}, "attention_layers": {"decoder": ("attention",)}},
       makes={"model": "a captioner"}, needs={"data": "a caption dataset", "encoder": "an image encoder"})
def captioner(ctx, *, decoder: str = "attention", embedding_dim: int = 64, hidden_size: int = 128,
              num_layers: int = 1, heads: int = 1, attention_layers: int = 2,
              dropout: float = 0.0) -> None:
    """A :class:`~graphseq.models.captioner.Captioner`: the pretrained
    encoder and a fresh ``init``, ``input`` or ``attention`` decoder
    (``heads`` and ``attention_layers``, the rounds of chain step and
    attention, apply to ``attention`` only)."""
    data: CaptionData = ctx.require("data", "captioner")
    encoder: ConvEncoder = ctx.require("encoder", "captioner")
    args: Dict[str, Any] = dict(embedding_dim=embedding_dim, hidden_size=hidden_size,
                                num_layers=num_layers, dropout=dropout)
    if decoder == "attention":
        args.update(heads=heads, layers=attention_layers)
    model = Captioner(data.vocab, decoder, channels=encoder.channels, image_size=data.image_size, **args)
    model.encoder.load_state_dict(encoder.state_dict())
    ctx.model = model.to(ctx.device)
    size = sum(p.numel() for p in model.decoder.parameters())
    ctx.log.info(f"captioner: {decoder} decoder, {size:,} parameters; encoder "
                 f"{sum(p.numel() for p in model.encoder.parameters()):,}")


def bleu(references: Sequence[Sequence[Sequence[str]]], hypotheses: Sequence[Sequence[str]]) -> Dict[str, float]:
    """Corpus BLEU-1..4 (NLTK's ``corpus_bleu``, no smoothing, as the
    captioning papers report it) of tokenised captions against each image's
    tokenised references."""
    from nltk.translate.bleu_score import corpus_bleu

    if not hypotheses:
        return {f"bleu{n}": math.nan for n in range(1, 5)}
    with warnings.catch_warnings():
        # NLTK warns when a caption has no n-gram of some order; BLEU is 0 then.
        warnings.simplefilter("ignore")
        scores = corpus_bleu([list(map(list, r)) for r in references], [list(h) for h in hypotheses],
                             weights=BLEU_WEIGHTS)
    # Without a single matching n-gram NLTK returns a denormal stand-in for
    # zero (about 1e-231) to keep its logarithms finite; report it as 0.
    return {f"bleu{n}": float(s) if s > 1e-100 else 0.0 for n, s in enumerate(scores, 1)}


def object_scores(hypotheses: Sequence[Sequence[str]], scenes: Sequence) -> Dict[str, float]:
    """On the shapes: the share of the scenes' objects whose size, colour
    and shape a caption names (``objects``), the share of named objects that
    are in the scene (``object_precision``) and of captions that parse to
    exactly their scene, relations included (``exact``)."""
    right = named = total = exact = 0
    for words, scene in zip(hypotheses, scenes):
        r, n, e = score_objects(words, scene)
        right, named, total, exact = right + r, named + n, total + len(scene.objects), exact + e
    return {"objects": right / max(1, total), "object_precision": right / max(1, named),
            "exact": exact / max(1, len(scenes))}


@torch.no_grad()
def caption_split(model: Captioner, data: CaptionSet, device: torch.device, method: str = "greedy",
                  beam_size: int = 3, max_length: int = 20, batch_size: int = 100,
                  limit: int = 0) -> Generated:
    """Captions for the first ``limit`` images of ``data`` (0: all)."""
    count = len(data) if limit <= 0 else min(limit, len(data))
    words, log_probs, attention = [], [], []
    for start in range(0, count, batch_size):
        images = data.load_images(range(start, min(start + batch_size, count))).to(device)
        out = (greedy(model, images, max_length) if method == "greedy"
               else beam_search(model, images, beam_size, max_length))
        words += out.words
        log_probs += out.log_probs
        attention += out.attention or []
    return Generated(words, log_probs, attention or None)


def score_captions(words: Sequence[Sequence[str]], data: CaptionSet) -> Dict[str, float]:
    """BLEU-1..4 against each image's captions and, on the shapes, the object scores."""
    figures = bleu(data.tokens[:len(words)], words)
    if data.scenes is not None:
        figures.update(object_scores(words, data.scenes[:len(words)]))
    return figures


class FeatureCache:
    """The frozen encoder's features of images held in memory, computed once
    (decoder training then never runs the CNN); other images are encoded
    batch by batch."""

    def __init__(self, model: Captioner, data: CaptionSet, device: torch.device, chunk: int = 250):
        self.model, self.data, self.device = model, data, device
        self.regions: Optional[Tensor] = None
        self.pooled: Optional[Tensor] = None
        if model.freeze_encoder and data.images is not None:
            parts = [model.encode(data.load_images(range(i, min(i + chunk, len(data)))).to(device))
                     for i in range(0, len(data), chunk)]
            self.regions = torch.cat([p[0] for p in parts])
            self.pooled = torch.cat([p[1] for p in parts])

    def __call__(self, rows: Tensor):
        if self.regions is not None:
            rows = rows.to(self.regions.device)
            return self.regions[rows], self.pooled[rows]
        return self.model.encode(self.data.load_images(rows).to(self.device))


# What a run holds once the decoder's training has started (beside its checkpoint): the
# training's products and the evaluation's.
TRAINED = (MODEL_FILE, "curves.png", "captions_*.json", "attention.png")


def _check_decoder_started(folder: Path) -> None:
    """Refuses to resume a run that lost the decoder's checkpoint after its
    training had started: it would train the decoder again from scratch
    and overwrite what the run holds, as if it had never started."""
    if (folder / CHECKPOINT).is_file():
        return
    found = sorted(path.name for pattern in TRAINED for path in folder.glob(pattern))
    if found:
        raise GraphseqError(f"--resume: {folder / CHECKPOINT} is missing, but the decoder's training had started "
                            f"({', '.join(found)} {'are' if len(found) > 1 else 'is'} there), so the run cannot "
                            f"continue where it stopped; put {CHECKPOINT} back, or start a new run with another "
                            f"--out")


def _check_eval_images(check, *, eval_images: int, **_) -> None:
    val, data = check.facts.get("caption_val"), check.facts.get("caption_data_table", "data")
    if val is not None and eval_images > val:
        raise GraphseqError(f"{check.section}.eval_images = {eval_images} is more than the {val} validation "
                            f"images ({data}.val = {val}); lower it to {val} or less, or raise {data}.val")
    for folder in check.resumed:  # the run's folders that --resume continues
        _check_decoder_started(folder)


def image_range(data: CaptionSet, most: int = 1000) -> List[List[float]]:
    """The lowest and highest :func:`colour_summary` of (up to ``most``,
    evenly spread) training images: what ``graphseq caption`` compares an
    image with."""
    rows = torch.linspace(0, len(data) - 1, min(most, len(data))).long().unique().tolist()
    summaries = torch.cat([colour_summary(data.load_images(rows[i:i + 250])) for i in range(0, len(rows), 250)])
    return [summaries.min(0).values.tolist(), summaries.max(0).values.tolist()]


@stage("train_captioner", checks={
    "steps": at_least(1), "batch_size": at_least(1), "lr": positive, "final_lr_fraction": probability,
    "clip": non_negative, "encoder_lr": positive, "eval_every": at_least(1), "eval_images": at_least(1),
    "max_length": between(1, MAX_CAPTION_WORDS), "checkpoint_every": at_least(1)}, resume_may_change=("steps",),
    resume_reads=(CHECKPOINT,), precheck=_check_eval_images, applies={"encoder_lr": {"finetune_encoder": (True,)}},
    needs={"data": "a caption dataset", "model": "a captioner"})
def train_captioner(ctx, *, steps: int = 3000, batch_size: int = 64, lr: float = 0.002,
                    final_lr_fraction: float = 0.1, clip: float = 5.0, finetune_encoder: bool = False,
                    encoder_lr: float = 0.0002, eval_every: int = 500, eval_images: int = 500,
                    max_length: int = 20, checkpoint_every: int = 500) -> None:
    """Teacher forcing: each step takes ``batch_size`` training images and
    one of each image's captions at random, and minimises the cross-entropy
    of every next word. Adam at ``lr``, decayed along a cosine to
    ``final_lr_fraction * lr``; gradients clipped to norm ``clip``. The
    encoder stays frozen, or with ``finetune_encoder`` learns at
    ``encoder_lr``. Every ``eval_every`` steps the first ``eval_images``
    validation images (no more than there are) are captioned greedily;
    the weights with the best validation BLEU-4 are kept and written to
    ``captioner.pt`` for ``graphseq caption``. ``checkpoint.pt`` (every ``checkpoint_every``
    steps) lets ``--resume`` continue a run (one that lost it after the
    training had started is refused, rather than trained afresh); a resume that raises ``steps``
    lays the rest of the cosine over the new budget, so it is not the run
    that budget would have been from the start (unless
    ``final_lr_fraction = 1``)."""
    model: Captioner = ctx.require("model", "train_captioner")
    data: CaptionData = ctx.require("data", "train_captioner")
    train, val = data.splits["train"], data.splits["val"]
    model.set_encoder_frozen(not finetune_encoder)
    features = FeatureCache(model, train, ctx.device)

    def loss_fn(model: Captioner, step: int):
        generator = _step_generator(ctx.seed, step)
        rows = torch.randint(len(train), (batch_size,), generator=generator)
        picks = torch.rand(batch_size, generator=generator)
        captions = [train.tokens[r][int(p * len(train.tokens[r]))] for r, p in zip(rows.tolist(), picks.tolist())]
        regions, pooled = features(rows)
        return model.loss(regions, pooled, captions)

    def evaluate(model: Captioner) -> Dict[str, float]:
        generated = caption_split(model, val, ctx.device, "greedy", max_length=max_length, limit=eval_images)
        figures = score_captions(generated.words, val)
        keep = ["bleu4", "objects"] if "objects" in figures else ["bleu1", "bleu4"]
        return {f"val_{k}": figures[k] for k in keep}

    groups = [{"params": model.decoder.parameters(), "lr": lr}]
    if finetune_encoder:
        groups.append({"params": model.encoder.parameters(), "lr": encoder_lr})
    optimizer = torch.optim.Adam(groups)
    scheduler = cosine_schedule(optimizer, steps, final_lr_fraction)
    ctx.log.info(f"training the {model.config['decoder']} decoder for {steps} steps of {batch_size} "
                 f"captions, encoder {'fine-tuned' if finetune_encoder else 'frozen'}")
    # A run stopped before the decoder's first checkpoint (while pretraining,
    # say) resumes the earlier stages and starts the decoder afresh; one that
    # lost the checkpoint later is refused (by the precheck, before a write).
    started = (ctx.out / CHECKPOINT).is_file()
    result = train_steps(model, optimizer, loss_fn, steps=steps, out=ctx.out, device=ctx.device,
                         resume=ctx.resume and started, quiet=ctx.quiet, log=ctx.log, pipeline=ctx.pipeline, scheduler=scheduler, clip=clip, evaluate=evaluate,
                         eval_every=eval_every, select=("val_bleu4", "max"),
                         checkpoint_every=checkpoint_every, desc=f"train {model.config['decoder']}",
                         meta={"model_config": dict(model.config), "vocabulary": list(model.vocab.symbols)})
    model.image_range = image_range(train)
    save_checkpoint(model.checkpoint(step=result.best.get("step", result.step)), ctx.out / MODEL_FILE)
    ctx.metrics.update(steps=result.step, train_minutes=result.seconds / 60,
                       best_step=result.best.get("step", result.step),
                       **{k: v for k, v in result.best.items() if k.startswith("val_")})


# --------------------------------------------------------------------------- #
# Evaluation
# --------------------------------------------------------------------------- #

def _check_evaluation(check, *, figure_images: int, splits: List[str], **_) -> None:
    # The precheck sees the settings with their defaults: a value other than the default was set.
    data, model = check.facts.get("caption_data_table", "data"), check.facts.get("caption_model_table", "model")
    if figure_images != stage_params(evaluate_captions)["figure_images"]:
        decoder = check.facts.get("caption_decoder", "attention")
        if decoder != "attention":
            raise GraphseqError(f"{check.section}.figure_images = {figure_images} has no use when {model}.decoder "
                                f"= {decoder!r}: the attention figure applies only with 'attention'; leave it out")
        if not check.facts.get("caption_test", True):
            raise GraphseqError(f"{check.section}.figure_images = {figure_images} has no use when {data}.test = 0: "
                                f"the figure is of test images, so it applies only with {data}.test > 0; "
                                f"leave it out")
    # A split the data set to 0 images would not be scored. (COCO has no test_unseen split at all: that
    # one is said in the log.) A run started before this was refused still continues.
    for name in splits:
        if name in check.facts.get("caption_empty", ()) and not check.resumed:
            raise GraphseqError(f"{check.section}.splits = {list(splits)!r} names {name!r}, but {data}.{name} = 0 "
                                f"draws no {name} images; leave {name!r} out of {check.section}.splits, or set "
                                f"{data}.{name} above 0")


@stage("evaluate_captions", checks={
    "splits": each(one_of(*SPLITS), distinct=True), "beam_size": at_least(1),
    "max_length": between(1, MAX_CAPTION_WORDS), "batch_size": at_least(1), "figure_images": non_negative},
    precheck=_check_evaluation, applies={"figure_images": {"splits": SCORES_TEST}},
    needs={"data": "a caption dataset", "model": "a captioner"})
def evaluate_captions(ctx, *, splits: list = ["val", "test", "test_unseen"], beam_size: int = 3,
                      max_length: int = 20, batch_size: int = 100, figure_images: int = 4) -> None:
    """Captions every image of each split (those the data has: COCO has no
    ``test_unseen``; a split the data sets to 0 images is refused) greedily and
    by beam search of width ``beam_size``, and scores both: BLEU-1..4 and,
    on the shapes, the objects right. Writes ``captions_SPLIT.json`` (the
    references and both captions of every image) and, for the attention
    decoder, ``attention.png``: each word's attention over the regions for
    the first ``figure_images`` test images."""
    model: Captioner = ctx.require("model", "evaluate_captions")
    data: CaptionData = ctx.require("data", "evaluate_captions")
    model.eval()
    for name in splits:
        if name not in data.splits:
            ctx.log.info(f"{name}: the data has no such split (none drawn, or COCO's); not scored")
            continue
        split = data.splits[name]
        results, figures = {}, {}
        for method in ("greedy", "beam"):
            generated = caption_split(model, split, ctx.device, method, beam_size, max_length, batch_size)
            results[method] = generated
            figures.update({f"{method}_{k}": v for k, v in score_captions(generated.words, split).items()})
        ctx.metrics.update({f"{name}_{k}": v for k, v in figures.items()})
        write_json(ctx.out / f"captions_{name}.json", [
            {"image": i, "references": split.captions[i], "greedy": " ".join(results["greedy"].words[i]),
             "beam": " ".join(results["beam"].words[i])} for i in range(len(split))])
        ctx.log.info(f"{name}: " + ", ".join(f"{k} {v:.4f}" for k, v in figures.items()))
        if name == "test" and results["beam"].attention is not None and figure_images > 0:
            count = min(figure_images, len(split))
            draw_attention(list(split.load_images(range(count))), results["beam"].words[:count],
                           results["beam"].attention[:count], ctx.out / "attention.png")
