"""Stages of the BERT pipelines. ``bert-pretrain``: a corpus of documents, a
WordPiece tokenizer trained on it, a small BERT, and masked-LM plus
next-sentence pretraining by steps on the step trainer, scored on held-out
documents. ``bert-polarity``: that pretraining for each group of
cross-validation folds (leaving out every sentence of the group's test
folds), then fine-tuning on sentence polarity from the pretrained weights
and from scratch, fold by fold. A corpus that reads no polarity text
drops every sentence holding a polarity snippet, and so serves every
fold.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F

from .. import distributed
from ..checks import Domain, at_least, between, each, fraction, non_negative, one_of, positive
from ..data.files import file_sha256
from ..data.imdb import TRAIN, UNSUP, load_imdb_parts
from ..data.polarity import SnippetMatcher, cv_folds, load_polarity
from ..data.pretraining import (Document, SentencePairs, TokenGraphs, collate, pack_pair,
                                read_text_folder, shakespeare_speeches, split_held_out)
from ..data.text import load_tiny_shakespeare
from ..data.wordpiece import TOKENIZER_FILE, WordPieceTokenizer
from ..errors import GraphseqError, plural
from ..io import check_run_folder, load_checkpoint, read_json, write_json, write_png
from ..models.bert import (POOLS, WEIGHTS_FILE, BertClassifier, BertConfig, BertForPretraining,
                           load_pretrained, save_pretrained)
from ..seeding import MAX_SEED
from ..training import CHECKPOINT, train_steps
from .polarity import FOLD_LIST, read_folds
from .registry import stage

CORPUS_FILE = "pretraining.json"  # what a pretraining read, so fine-tuning can check its test folds
PLAN_FILE = "plan.json"  # bert-polarity: the pretraining each test fold fine-tunes from
FOLDS_FILE = "folds.json"  # bert-polarity: the figures of every finished fold
# The SHA-256 of tokenizer.json, recorded in the checkpoint and in pretraining.json: the weights embed
# its pieces by id, so another tokenizer (a new training may differ in a few pieces) would read them wrong.
TOKENIZER_SHA256 = "tokenizer_sha256"
# In pretraining.json: true where the corpus read no polarity text and dropped every sentence that holds a
# polarity snippet, so the run serves every test fold (false where it read polarity and left test folds out).
POLARITY_CHECKED = "polarity_checked"

TEXT_LIST = Domain("a list of strings", lambda v: isinstance(v, list) and all(isinstance(i, str) for i in v))
SHARED_TEXTS = ("shakespeare", "polarity", "imdb", "imdb-train")  # what bert_corpus reads without a folder
# The IMDB texts: the folders of the archive each reads, and what they hold, for the log. "imdb-train" is the
# text of the labelled training reviews, negative then positive; their labels are not read.
IMDB_TEXTS = {"imdb": ((UNSUP,), "unlabelled IMDB reviews"),
              "imdb-train": (TRAIN, "IMDB training reviews, their labels unread")}
DEFAULT_TEXTS = ("shakespeare", "polarity")  # those it reads by default
DROPOUT = Domain("a number from 0 to 1, 1 excluded", lambda v: isinstance(v, (int, float)) and 0 <= v < 1)
# The shortest example: [CLS] A [SEP] B [SEP] with a token of each sentence (pack_pair; one sentence needs 4).
MIN_MAX_LEN = 5
# The held-out examples are built in memory before the first step and scored at every evaluation: 50 times
# the default 2,000 is plenty for a steady figure, and more would stall the run before it starts.
MAX_EVAL_EXAMPLES = 100_000
# Sentences tokenized in one call: enough for every thread of the tokenizer, few enough to hold in memory.
ENCODE_CHUNK = 10_000
# Chosen by bert-polarity itself from its folds for each group's pretraining (_group_overrides).
GROUP_KEYS = ("corpus.exclude_folds", "corpus.folds", "corpus.fold_seed")


@dataclass
class PretrainingCorpus:
    train: List[Document]
    held_out: List[Document]
    source: str
    texts: List[str]  # the shared texts read ([] for a corpus folder)
    excluded_folds: List[int]
    folds: int
    fold_seed: int
    # Whether the corpus was scanned for polarity snippets (one without polarity text is), and how
    # many of its sentences held one and were dropped.
    polarity_checked: bool = False
    polarity_sentences_dropped: int = 0

    def digest(self) -> str:
        """SHA-256 of the training and held-out documents, in order."""
        digest = hashlib.sha256()
        for part in (self.train, self.held_out):
            _hash_documents(digest, part)
            digest.update(b"\1")
        return digest.hexdigest()


def _hash_documents(digest, documents: List[Document]) -> None:
    """Feeds ``documents`` to ``digest``: each one's sentences, a line each,
    then a NUL, so that no two lists of documents feed it the same bytes."""
    for document in documents:
        digest.update("\n".join(document).encode() + b"\0")


def _fold_list(values, folds: int, key: str) -> List[int]:
    values = sorted({int(v) for v in values})
    bad = [v for v in values if not 0 <= v < folds]
    if bad:
        raise GraphseqError(f"{key} must name folds 0..{folds - 1}, got {bad}")
    return values


def _corpus_documents(data_root: Path, data_mirror, folder: str, texts: list, exclude_folds: list, folds: int,
                      fold_seed: int, log=None, table: str = "corpus") -> tuple[List[Document], str, List[int]]:
    """The documents of ``bert_corpus``, where they came from, and the
    polarity test folds left out."""
    excluded = _fold_list(exclude_folds, folds, f"{table}.exclude_folds")
    if folder:
        if excluded:
            raise GraphseqError("exclude_folds leaves polarity folds out of the shared texts; "
                                "it has no meaning with a corpus folder")
        return read_text_folder(folder), str(Path(folder).resolve()), excluded
    documents: List[Document] = []
    parts: List[str] = []  # what was read, for the log
    if "shakespeare" in texts:
        speeches = shakespeare_speeches(load_tiny_shakespeare(data_root, data_mirror))
        documents += speeches
        parts.append(f"{len(speeches):,} tiny-shakespeare speeches")
    if "polarity" in texts:
        sentences, _ = load_polarity(data_root, data_mirror)
        left_out = set()
        for i, (_, _, test) in enumerate(cv_folds(len(sentences), folds, fold_seed)):
            if i in excluded:
                left_out.update(sentences[j] for j in test.tolist())
        # By text, so that a duplicate of a test sentence elsewhere is left out too.
        kept = [[s] for s in sentences if s not in left_out]
        documents += kept
        parts.append(f"{len(kept):,} of {len(sentences):,} polarity sentences (left out: test folds "
                     f"{excluded or 'none'})")
    imdb_texts = [text for text in IMDB_TEXTS if text in texts]
    if imdb_texts:  # asked for together, so that one pass over the archive unpacks every part missing
        wanted = [part for text in imdb_texts for part in IMDB_TEXTS[text][0]]
        reviews = load_imdb_parts(data_root, data_mirror, wanted, log)
        for text in imdb_texts:
            folders, what = IMDB_TEXTS[text]
            read = [review for part in folders for review in reviews[part]]
            documents += read
            parts.append(f"{len(read):,} {what} ({sum(map(len, read)):,} sentences)")
    if log is not None:
        log.info("corpus: " + ", ".join(parts[:-1]) + (" and " if len(parts) > 1 else "") + parts[-1])
    return documents, "shared", excluded


def _reads_polarity(folder: str, texts: list) -> bool:
    return not folder and "polarity" in texts


# The sentences the last scan found, by the digest of the snippets and the documents it read: the
# precheck and the stage read the same corpus one after the other, and the scan (seconds on IMDB's
# text) need not run twice. One entry, so memory holds a few indices, never a corpus.
_last_scan: Dict[str, Dict[int, List[int]]] = {}


def _drop_polarity_snippets(documents: List[Document], data_root: Path, data_mirror
                            ) -> tuple[List[Document], int]:
    """The documents without their sentences that hold a polarity snippet
    (:class:`~graphseq.data.polarity.SnippetMatcher`: the same words, or a
    snippet of 3+ words inside the text), a document left empty dropped;
    and how many sentences were dropped. A pretraining on what is left has
    read no test sentence of any fold."""
    snippets, _ = load_polarity(data_root, data_mirror)
    digest = hashlib.sha256()
    _hash_documents(digest, [snippets, *documents])
    key = digest.hexdigest()
    if key not in _last_scan:
        matcher = SnippetMatcher(snippets)
        found = {d: held for d, document in enumerate(documents) if (held := matcher.sentences_holding(document))}
        _last_scan.clear()
        _last_scan[key] = found
    found = _last_scan[key]
    kept: List[Document] = []
    for d, document in enumerate(documents):
        if d in found:
            held = set(found[d])
            document = [sentence for i, sentence in enumerate(document) if i not in held]
            if not document:
                continue
        kept.append(document)
    return kept, sum(map(len, found.values()))


def _split_corpus(documents: List[Document], held_out: float, table: str = "corpus"
                  ) -> tuple[List[Document], List[Document]]:
    """The training and held-out documents; next-sentence prediction draws
    its false pairs from another document, so a part with sentence pairs
    needs two documents or more (else every pair it scores is a true one)."""
    train, held = split_held_out(documents, held_out, seed=0)
    for part, docs, fix in (("training", train, "give more documents"),
                            ("held-out", held, f"give more documents or raise {table}.held_out")):
        if len(docs) < 2 and any(len(doc) > 1 for doc in docs):
            raise GraphseqError(f"the corpus has {len(documents)} documents and its {part} part {len(docs)}: "
                                f"next-sentence prediction takes its false pairs from another document, so "
                                f"each part needs 2 or more ({fix})")
    return train, held


def _check_corpus(check, *, folder: str, texts: list, exclude_folds: list, folds: int, fold_seed: int,
                  held_out: float, **_) -> None:
    # Read once more before a write, for bert-polarity, whose pretrainings come after its first file.
    documents, _, _ = _corpus_documents(check.data_root, check.data_mirror, folder, texts, exclude_folds, folds,
                                        fold_seed, table=check.table)
    if not _reads_polarity(folder, texts):  # the stage trains on what is left, so the split is checked on it
        documents, _ = _drop_polarity_snippets(documents, check.data_root, check.data_mirror)
    _split_corpus(documents, held_out, check.table)


@stage("bert_corpus", checks={"texts": each(one_of(*SHARED_TEXTS), distinct=True), "exclude_folds": FOLD_LIST,
                              "folds": at_least(3), "fold_seed": between(0, MAX_SEED), "held_out": fraction},
       precheck=_check_corpus,
       applies={key: {"folder": ("",)} for key in ("texts", "exclude_folds", "folds", "fold_seed")},
       makes={"corpus": "a pretraining corpus"})
def bert_corpus(ctx, *, folder: str = "", texts: list = list(DEFAULT_TEXTS), exclude_folds: list = [],
                folds: int = 10, fold_seed: int = 0, held_out: float = 0.05) -> None:
    """The pretraining documents: every ``*.txt`` of ``folder`` (one document
    per file, one sentence per line), or the shared ``texts``: by default
    tiny-shakespeare's speeches and the sentence-polarity snippets, leaving
    out every snippet whose text is in one of the polarity test folds
    ``exclude_folds`` (of ``cv_folds(10662, folds, fold_seed)``); ``"imdb"``
    adds the 50,000 unlabelled IMDB reviews (:mod:`graphseq.data.imdb`), a
    document each, and ``"imdb-train"`` the text of the 25,000 labelled
    training reviews (negative then positive, their labels unread). A corpus
    without ``"polarity"`` (a folder too) drops every sentence that holds a
    polarity snippet (:func:`_drop_polarity_snippets`; the snippets are read,
    or downloaded, as ``bert-polarity`` reads them), so its run serves every
    test fold of ``bert-polarity``. A seeded ``held_out`` fraction of the
    documents is kept for scoring."""
    documents, source, excluded = _corpus_documents(ctx.data_root, ctx.data_mirror, folder, texts, exclude_folds,
                                                    folds, fold_seed, ctx.log)
    checked, dropped = not _reads_polarity(folder, texts), 0
    if checked:
        documents, dropped = _drop_polarity_snippets(documents, ctx.data_root, ctx.data_mirror)
        ctx.log.info(f"corpus: dropped {plural(dropped, 'sentence')} that {'holds' if dropped == 1 else 'hold'} "
                     f"a polarity snippet")
    train, held = _split_corpus(documents, held_out)  # (its precheck refused a split under the table's name)
    ctx.corpus = PretrainingCorpus(train, held, source, [] if folder else list(texts), excluded, folds, fold_seed,
                                   checked, dropped)
    ctx.log.info(f"corpus: {len(train):,} documents ({sum(map(len, train)):,} sentences) for training, "
                 f"{len(held):,} held out")


def _recorded_tokenizer(record: Path) -> Optional[str]:
    """The SHA-256 of ``tokenizer.json`` that a checkpoint or a
    ``pretraining.json`` holds; None where it holds none (written before the
    digest was recorded)."""
    if not record.is_file():  # a run killed between its model and its pretraining.json
        return None
    saved = load_checkpoint(record) if record.suffix == ".pt" else read_json(record)
    return saved.get(TOKENIZER_SHA256) if isinstance(saved, dict) else None


def check_tokenizer(folder: Path, record: str, weights: str, fix: str, prefix: str = "") -> Optional[str]:
    """Refuses the ``tokenizer.json`` of the run in ``folder`` where it is
    missing, no file, or another than the one whose SHA-256 the run
    recorded in its file ``record``: the weights (``weights``) embed that
    tokenizer's pieces by id. ``fix`` ends the message, ``prefix`` starts
    it. Returns the digest recorded (None from a run that recorded none)."""
    path, trained = folder / TOKENIZER_FILE, folder / weights
    if not path.is_file():
        state = "a folder, not a file" if path.is_dir() else "missing"
        raise GraphseqError(f"{prefix}{path} is {state}: {trained} embeds the pieces of the tokenizer it was trained "
                            f"with, and another tokenizer would give them to other pieces; {fix}")
    recorded = _recorded_tokenizer(folder / record)
    if recorded is not None and file_sha256(path) != recorded:
        raise GraphseqError(f"{prefix}{path} is not the tokenizer {trained} was trained with (its SHA-256 is "
                            f"{file_sha256(path)[:16]}..., the run recorded {recorded[:16]}...), so the "
                            f"embeddings would be read as other pieces; {fix}")
    return recorded


@stage("bert_tokenizer", checks={"vocab_size": at_least(16), "min_frequency": at_least(1)},
       resume_reads=(TOKENIZER_FILE,),
       applies={"vocab_size": {"file": ("",)}, "min_frequency": {"file": ("",)}},
       makes={"tokenizer": "a WordPiece tokenizer"}, needs={"corpus": "a pretraining corpus"})
def bert_tokenizer(ctx, *, vocab_size: int = 8000, min_frequency: int = 2, file: str = "") -> None:
    """A WordPiece vocabulary of at most ``vocab_size`` pieces trained on the
    training documents (or the tokenizer ``file``, a ``tokenizer.json`` of
    another run, whose pieces are used as they are), saved as ``tokenizer.json`` and read back on ``--resume``:
    the trainer breaks ties between equally frequent merges in an order that
    varies between processes, so a new training may differ in a few pieces.
    A resume is refused when the file is missing or is not the one the
    checkpoint recorded (by SHA-256), since the checkpoint's embeddings
    belong to its pieces."""
    corpus = ctx.require("corpus", "bert_tokenizer")
    path = ctx.out / TOKENIZER_FILE
    if ctx.resume:
        # Checked before the stage writes anything, so the runner leaves the folder as it was.
        recorded = check_tokenizer(ctx.out, CHECKPOINT, CHECKPOINT, "put the run's own tokenizer.json back, or "
                                   "start a new run with another --out", prefix="--resume: ")
        tokenizer = WordPieceTokenizer.load(path)
        # A checkpoint written before the digest was recorded keeps none (a resume compares the meta).
        ctx.tokenizer_sha256 = recorded
    else:
        if path.exists() and not path.is_file():
            raise GraphseqError(f"{path} is a folder; the run saves its tokenizer file there: move the folder "
                                f"away, or choose another --out")
        # Rank 0 trains (or copies) and saves the tokenizer, the others read that file: two trainings may
        # differ in a few pieces, and every process must number the pieces alike.
        with distributed.main_first():
            if not distributed.is_main():
                tokenizer = WordPieceTokenizer.load(path)
            elif file:
                tokenizer = WordPieceTokenizer.load(file)
                tokenizer.save(path)
            else:
                tokenizer = WordPieceTokenizer.train((s for doc in corpus.train for s in doc), vocab_size,
                                                     min_frequency)
                tokenizer.save(path)
                if tokenizer.vocab_size > vocab_size:
                    ctx.log.warning(f"tokenizer: it holds {tokenizer.vocab_size:,} pieces, more than "
                                    f"{ctx.table}.vocab_size = {vocab_size:,}, because the special tokens and "
                                    f"every character of the corpus need a piece each")
        ctx.tokenizer_sha256 = file_sha256(path)
    ctx.tokenizer = tokenizer
    ctx.log.info(f"tokenizer: {tokenizer.vocab_size:,} WordPiece pieces, saved as {path}")


def _pretraining_model(config: BertConfig) -> BertForPretraining:
    try:
        return BertForPretraining(config)
    except ValueError as error:  # the layers' own checks: heads must divide the width, ...
        raise GraphseqError(f"bert_model: {error}") from None


def _check_model(check, *, hidden_size: int, num_layers: int, num_heads: int, feedforward_size: int,
                 max_len: int, dropout: float, activation: str, norm_first: bool, **_) -> None:
    # The layers' checks before the tokenizer is trained and saved. The vocabulary is not known yet and
    # checks nothing; on the meta device the model takes no memory.
    if hidden_size % num_heads:
        raise GraphseqError(f"bert_model: hidden_size = {hidden_size} must be divisible by num_heads = "
                            f"{num_heads} (each head reads hidden_size / num_heads features)")
    with torch.device("meta"):
        _pretraining_model(BertConfig(16, hidden_size, num_layers, num_heads, feedforward_size, max_len,
                                      dropout, activation, norm_first))


@stage("bert_model", checks={"hidden_size": at_least(1), "num_layers": at_least(1), "num_heads": at_least(1),
                             "feedforward_size": at_least(1), "max_len": at_least(MIN_MAX_LEN),
                             "dropout": DROPOUT, "activation": one_of("gelu", "relu")}, precheck=_check_model,
       makes={"model": "a BERT model"}, needs={"tokenizer": "a WordPiece tokenizer"})
def bert_model(ctx, *, hidden_size: int = 128, num_layers: int = 2, num_heads: int = 4,
               feedforward_size: int = 512, max_len: int = 64, dropout: float = 0.1,
               activation: str = "gelu", norm_first: bool = False) -> None:
    """A BERT with the masked-LM and next-sentence heads, sized for the tokenizer."""
    tokenizer = ctx.require("tokenizer", "bert_model")
    config = BertConfig(tokenizer.vocab_size, hidden_size, num_layers, num_heads, feedforward_size,
                        max_len, dropout, activation, norm_first)
    ctx.model = _pretraining_model(config).to(ctx.device)
    size = sum(p.numel() for p in ctx.model.parameters())
    ctx.log.info(f"model: {num_layers} layers, {hidden_size} wide, {num_heads} heads, "
                 f"{size:,} parameters ({tokenizer.vocab_size * hidden_size:,} in the token embedding)")


def warmup_linear_decay(optimizer: torch.optim.Optimizer, steps: int, warmup: float):
    """BERT's schedule: the rate rises linearly over the first ``warmup``
    fraction of the steps (from ``1 / warm-up steps`` at the first), then
    falls linearly, reaching zero as the last step ends."""
    warmup_steps = max(1, round(warmup * steps))

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        return max(0.0, (steps - step) / max(1, steps - warmup_steps))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def adamw(model: torch.nn.Module, lr: float, weight_decay: float, layer_decay: float = 1.0) -> torch.optim.AdamW:
    """AdamW with no weight decay on biases and layer-norm weights, as BERT
    trains. With ``layer_decay`` < 1 each encoder layer trains at that
    factor of the rate of the one above it, the embeddings at that factor of
    the lowest layer's, and the head at ``lr`` (layer-wise rate decay, as
    ELECTRA fine-tunes): pretrained weights change the less, the more
    general they are."""
    groups: Dict[tuple, List[torch.nn.Parameter]] = {}
    for name, p in model.named_parameters():
        key = (_depth(name, model), p.dim() < 2)
        groups.setdefault(key, []).append(p)
    return torch.optim.AdamW([{"params": params, "weight_decay": 0.0 if no_decay else weight_decay,
                               "lr": lr * layer_decay ** depth}
                              for (depth, no_decay), params in sorted(groups.items())], lr=lr)


def _depth(name: str, model: torch.nn.Module) -> int:
    """How many layers below the head the parameter ``name`` lies: 0 for
    the head, 1 for the top encoder layer, ``num_layers + 1`` for the
    embeddings."""
    if not name.startswith("encoder."):
        return 0
    num_layers = model.config.num_layers
    parts = name.split(".")
    if parts[1] == "layers":
        return num_layers - int(parts[2])
    return 1 if parts[1] == "final_norm" else num_layers + 1  # final_norm tops the top layer.


def step_generator(seed: int, step: int, stream: int = 0) -> torch.Generator:
    """A generator fixed by the run's seed, the step, the rank and a stream
    number, so that a resumed run draws the same batches."""
    return torch.Generator().manual_seed(
        (seed * 1_000_003 + step * 7_919 + distributed.rank() * 104_729 + stream) % 2**63)


def encode_documents(tokenizer: WordPieceTokenizer, documents: List[Document],
                     chunk: int = ENCODE_CHUNK) -> List[List[List[int]]]:
    """The piece ids of every sentence, document by document. The sentences
    go to the tokenizer ``chunk`` at a time, whatever document they belong
    to, so that it spreads each call over its threads: a call a document
    (the ten sentences of a review) kept most of them idle. A chunk's
    encodings (offsets, strings) are dropped before the next is made, so
    memory holds the ids and one chunk's worth of the rest."""
    sentences = [sentence for document in documents for sentence in document]
    ids = [piece_ids for start in range(0, len(sentences), chunk)
           for piece_ids in tokenizer.encode_batch(sentences[start:start + chunk])]
    encoded, start = [], 0
    for document in documents:
        encoded.append(ids[start:start + len(document)])
        start += len(document)
    return encoded


@torch.no_grad()
def score_pretraining(model: BertForPretraining, batches: List[TokenGraphs], device) -> Dict[str, float]:
    """Held-out masked-LM accuracy and loss, and next-sentence accuracy and
    loss where the batches hold sentence pairs (a corpus of one-sentence
    documents has none, and no next-sentence figures)."""
    totals = dict.fromkeys(("mlm_loss", "nsp_loss", "mlm_correct", "mlm_count", "nsp_correct", "nsp_count"), 0.0)
    for batch in batches:
        _, figures = model.loss(batch.to(device))
        totals["mlm_loss"] += figures["mlm_loss"] * figures["mlm_count"]
        totals["nsp_loss"] += figures["nsp_loss"] * figures["nsp_count"]
        for key in ("mlm_correct", "mlm_count", "nsp_correct", "nsp_count"):
            totals[key] += figures[key]
    scores = {"val_mlm_accuracy": totals["mlm_correct"] / max(totals["mlm_count"], 1),
              "val_mlm_loss": totals["mlm_loss"] / max(totals["mlm_count"], 1)}
    if totals["nsp_count"]:
        scores.update(val_nsp_accuracy=totals["nsp_correct"] / totals["nsp_count"],
                      val_nsp_loss=totals["nsp_loss"] / totals["nsp_count"])
    return scores


@stage("bert_pretrain", checks={"steps": at_least(1), "batch_size": at_least(1), "lr": positive,
                                "warmup": between(0, 1), "weight_decay": non_negative, "clip": non_negative,
                                "mask_rate": fraction, "eval_every": non_negative,
                                "eval_examples": between(1, MAX_EVAL_EXAMPLES), "checkpoint_every": non_negative,
                                "minutes": non_negative},
       resumes=CHECKPOINT, resume_may_change=("minutes",), data_parallel=True,
       resume_notes={"steps": "the learning rate warms up and decays to zero over the steps the run was "
                              "started with, so more steps would be another schedule (start a new run, "
                              "with another --out, to pretrain longer)"},
       needs={"corpus": "a pretraining corpus", "tokenizer": "a WordPiece tokenizer", "model": "a BERT model"})
def bert_pretrain(ctx, *, steps: int = 4000, batch_size: int = 64, lr: float = 1e-3, warmup: float = 0.06,
                  weight_decay: float = 0.01, clip: float = 1.0, mask_rate: float = 0.15, amp: bool = True,
                  eval_every: int = 250, eval_examples: int = 2000, checkpoint_every: int = 250,
                  minutes: float = 0.0) -> None:
    """Masked-LM plus next-sentence pretraining for ``steps`` steps of
    ``batch_size`` examples: AdamW, warm-up over the first ``warmup``
    fraction of the steps then linear decay, gradients clipped to ``clip``,
    mixed precision on CUDA when ``amp``. Every ``eval_every`` steps the
    masked-LM and next-sentence accuracies are scored on ``eval_examples``
    fixed examples from the held-out documents; ``checkpoint.pt`` every
    ``checkpoint_every`` steps (``--resume`` continues from it). Writes
    ``bert.pt`` (weights and sizes), ``pretraining.json`` and ``curves.png``."""
    model, corpus, tokenizer = (ctx.require(k, "bert_pretrain") for k in ("model", "corpus", "tokenizer"))
    config = model.config
    examples = SentencePairs(encode_documents(tokenizer, corpus.train), config.max_len, tokenizer.cls_id,
                             tokenizer.sep_id)
    held = SentencePairs(encode_documents(tokenizer, corpus.held_out), config.max_len, tokenizer.cls_id,
                         tokenizer.sep_id)
    fixed = torch.Generator().manual_seed(12_345)  # the same held-out examples at every evaluation
    eval_batches = [held.batch(min(256, eval_examples - start), fixed, tokenizer.vocab_size, tokenizer.mask_id,
                               mask_rate) for start in range(0, eval_examples, 256)]
    ctx.log.info(f"pretraining: {len(examples):,} training sentences, {eval_examples} held-out examples "
                 f"from {len(held):,} sentences; {steps} steps of {batch_size}")

    def loss_fn(model: BertForPretraining, step: int):
        batch = examples.batch(batch_size, step_generator(ctx.seed, step), tokenizer.vocab_size,
                               tokenizer.mask_id, mask_rate).to(ctx.device)
        loss, figures = model.loss(batch)
        shown = {"mlm_loss": figures["mlm_loss"],
                 "mlm_accuracy": figures["mlm_correct"] / max(figures["mlm_count"], 1)}
        if examples.has_pairs:
            shown.update(nsp_loss=figures["nsp_loss"],
                         nsp_accuracy=figures["nsp_correct"] / max(figures["nsp_count"], 1))
        return loss, shown

    optimizer = adamw(model, lr, weight_decay)
    result = train_steps(model, optimizer, loss_fn, steps=steps, out=ctx.out, device=ctx.device, resume=ctx.resume,
                         quiet=ctx.quiet, log=ctx.log, pipeline=ctx.pipeline,
                         scheduler=warmup_linear_decay(optimizer, steps, warmup), clip=clip, amp=amp,
                         evaluate=lambda m: score_pretraining(m, eval_batches, ctx.device),
                         eval_every=eval_every, checkpoint_every=checkpoint_every,
                         meta={"bert_config": asdict(config), "corpus_sha256": corpus.digest(),
                               TOKENIZER_SHA256: getattr(ctx, "tokenizer_sha256", None)},
                         minutes=minutes, desc="pretrain")
    final = result.history[-1]
    if distributed.is_main():
        save_pretrained(model, ctx.out)
        write_json(ctx.out / CORPUS_FILE, {
            "source": corpus.source, "texts": corpus.texts, "excluded_polarity_folds": corpus.excluded_folds,
            "folds": corpus.folds, "fold_seed": corpus.fold_seed,
            "training_documents": len(corpus.train), "held_out_documents": len(corpus.held_out),
            TOKENIZER_SHA256: file_sha256(ctx.out / TOKENIZER_FILE), POLARITY_CHECKED: corpus.polarity_checked,
            **({"polarity_sentences_dropped": corpus.polarity_sentences_dropped} if corpus.polarity_checked else {})})
    ctx.metrics.update({key: final[key] for key in ("val_mlm_accuracy", "val_nsp_accuracy", "val_mlm_loss",
                                                    "val_nsp_loss") if key in final},
                       steps=result.step, train_minutes=result.seconds / 60)
    pairs = (f", next-sentence accuracy {final['val_nsp_accuracy']:.4f}" if "val_nsp_accuracy" in final
             else " (no sentence pairs in the corpus: masked LM only)")
    ctx.log.info(f"held-out masked-LM accuracy {final['val_mlm_accuracy']:.4f}{pairs} after {result.step} steps, "
                 f"{result.seconds / 60:.1f} min")


# --------------------------------------------------------------------------- #
# bert-polarity: pretraining per group of folds, fine-tuning per fold
# --------------------------------------------------------------------------- #

def read_pretraining(folder: Path, folds: int, fold_seed: int) -> List[int]:
    """The polarity test folds a finished ``bert-pretrain`` run left out:
    all of them if it read no polarity text and dropped every sentence that
    holds a snippet (its record says ``polarity_checked``); of a run that
    read polarity, those it left out (none if it cut other folds). A run
    that read no polarity text, recorded before that check, is refused:
    its text was never checked (IMDB's training reviews hold polarity
    snippets)."""
    path = folder / CORPUS_FILE
    check_run_folder(folder, "name the --out folder of a finished bert-pretrain run")
    if not (folder / WEIGHTS_FILE).is_file() or not path.is_file():
        raise GraphseqError(f"{folder} is not a finished bert-pretrain run (no {WEIGHTS_FILE} "
                            f"and {CORPUS_FILE})")
    info = read_json(path)
    try:
        excluded = [int(f) for f in info["excluded_polarity_folds"]]
        shared = info["source"] == "shared"
        same_folds = shared and info["folds"] == folds and info["fold_seed"] == fold_seed
        texts = info.get("texts", list(DEFAULT_TEXTS))  # runs before texts was recorded read polarity
        read_polarity = shared and "polarity" in texts
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise GraphseqError(f"{path} is damaged ({type(error).__name__}: {error}); it was left as it is") from None
    if read_polarity:
        return excluded if same_folds else []
    if POLARITY_CHECKED not in info:
        raise GraphseqError(f"{folder} was pretrained before graphseq checked corpora for polarity snippets, so "
                            f"its text may hold test sentences of any fold; run bert-pretrain again (it drops "
                            f"them) and name the new run")
    return list(range(folds)) if info[POLARITY_CHECKED] is True else []


def check_pretraining_tokenizer(folder: Path, fix: str) -> None:
    """Refuses the ``tokenizer.json`` of a ``bert-pretrain`` run that is not
    the one its model was trained with: the one its ``pretraining.json``
    recorded once it finished, else its checkpoint's (a run to continue)."""
    if (folder / WEIGHTS_FILE).is_file():
        check_tokenizer(folder, CORPUS_FILE, WEIGHTS_FILE, fix)
    elif (folder / CHECKPOINT).is_file():
        check_tokenizer(folder, CHECKPOINT, CHECKPOINT, fix)


def _load_pretraining(folder: Path, device: torch.device | str = "cpu"):
    """The model and tokenizer of a finished ``bert-pretrain`` run, the tokenizer checked to be its own."""
    check_pretraining_tokenizer(folder, "put the run's own tokenizer.json back")
    return load_pretrained(folder, device)


def _pretrain_group(ctx, out: Path, overrides: List[str]) -> None:
    """Runs ``bert-pretrain`` into ``out`` as a run of its own (continuing it
    on ``--resume``), unless it has finished there already."""
    if (out / WEIGHTS_FILE).is_file():
        return
    started = (out / "config.toml").is_file()
    if started and not (out / CHECKPOINT).is_file():
        raise GraphseqError(f"the pretraining in {out} stopped before its first checkpoint; delete that "
                            f"folder and resume, and it starts again")
    ctx.runner.run("bert-pretrain", overrides=overrides, seed=ctx.seed, device=str(ctx.device), out=out,
                   data_root=ctx.data_root, data_mirror=ctx.data_mirror, quiet=ctx.quiet, resume=started)


def _groups(groups: int, folds: int, table: str) -> List[List[int]]:
    """The ``folds`` test folds cut into ``groups`` contiguous groups."""
    if groups > folds:
        raise GraphseqError(f"{table}.groups = {groups} is more than the {folds} folds")
    return [part.tolist() for part in torch.arange(folds).tensor_split(groups)]


def _group_overrides(pretrain_set: list, part: List[int], folds: int, fold_seed: int, table: str) -> List[str]:
    """The settings of the pretraining that serves the test folds ``part``."""
    for entry in pretrain_set:
        section, _, name = entry.split("=", 1)[0].partition(".")
        key = f"{section.strip()}.{name.strip()}"
        if key in GROUP_KEYS:
            raise GraphseqError(f"{table}.pretrain_set: {key} is not allowed; bert-polarity sets "
                                f"{', '.join(GROUP_KEYS)} itself from its folds (set {table}.folds and "
                                f"{table}.fold_seed instead)")
    return list(pretrain_set) + [f"corpus.exclude_folds={part}", f"corpus.folds={folds}",
                                 f"corpus.fold_seed={fold_seed}"]


def _runs_plan(runs: list, folds: int, fold_seed: int, table: str = "pretrain") -> Dict[int, Path]:
    """Each test fold's first finished run (of ``runs``) that left its sentences
    out. A run named twice, or one that would serve no fold, is refused: it is
    a slip (another run meant), and running without it would hide that."""
    plan: Dict[int, Path] = {}
    seen: Dict[Path, str] = {}
    for name in runs:
        if not str(name).strip():
            raise GraphseqError(f"{table}.runs holds an empty path; name the --out folder of each bert-pretrain run")
        folder = Path(name)
        if folder.resolve() in seen:
            raise GraphseqError(f"{table}.runs names {seen[folder.resolve()]} twice; name each run once")
        seen[folder.resolve()] = name
        left_out = read_pretraining(folder, folds, fold_seed)
        if not left_out:
            raise GraphseqError(f"{table}.runs: {folder} serves no test fold: it may have read the sentences of "
                                f"every polarity test fold (of folds = {folds}, fold_seed = {fold_seed}); pretrain "
                                f"with corpus.exclude_folds, or leave it out")
        if all(fold in plan for fold in left_out):
            raise GraphseqError(f"{table}.runs: {folder} serves no test fold: the runs before it serve its folds "
                                f"{sorted(left_out)}; leave it out")
        for fold in left_out:
            plan.setdefault(fold, folder)
    return plan


def _check_pretrained_groups(check, *, runs: list, groups: int, folds: int, fold_seed: int,
                             pretrain_set: list, **_) -> None:
    """The finished runs, or the settings and texts of the pretrainings to
    run; leaves the folds served for bert_finetune's precheck."""
    if runs:
        plan = _runs_plan(runs, folds, fold_seed, check.table)
        for folder in dict.fromkeys(plan.values()):
            _load_pretraining(folder)  # a damaged model or tokenizer file is named now, not after plan.json
        served = set(plan)
    else:
        overrides = _group_overrides(pretrain_set, _groups(groups, folds, check.table)[0], folds, fold_seed,
                                     check.table)
        try:
            config = check.runner.checked_config("bert-pretrain", overrides)
        except GraphseqError as error:
            raise GraphseqError(f"pretrain_set: {error}") from None
        check.runner.precheck(config, check.data_root, check.data_mirror)
        served = set(range(folds))
    check.facts["bert_folds"] = (folds, served)


@stage("bert_pretrained_groups", checks={"runs": TEXT_LIST, "groups": at_least(1), "folds": at_least(3),
                                         "fold_seed": between(0, MAX_SEED), "pretrain_set": TEXT_LIST},
       resumes=PLAN_FILE, precheck=_check_pretrained_groups,
       applies={"groups": {"runs": ([],)}, "pretrain_set": {"runs": ([],)}},
       makes={"pretrained": "pretrained BERT models"})
def bert_pretrained_groups(ctx, *, runs: list = [], groups: int = 2, folds: int = 10, fold_seed: int = 0,
                           pretrain_set: list = []) -> None:
    """The pretrained model each test fold fine-tunes from, written to
    ``plan.json``. With ``runs`` (folders of finished ``bert-pretrain``
    runs), each test fold takes the first run that left its sentences out.
    Without, the ``folds`` test folds are cut into ``groups`` contiguous
    groups, each served by a ``bert-pretrain`` run in ``pretrain-G/`` that
    leaves out the sentences of the group's test folds, with the
    ``pretrain_set`` overrides (``"pretrain.steps=4000"``, ...). Fine-tuning
    runs a group's pretraining when it comes to the group's first fold, so
    a run of some folds pretrains only for their groups; a resumed run
    continues an unfinished pretraining."""
    if runs:
        plan, pending = _runs_plan(runs, folds, fold_seed, ctx.table), {}
    else:
        parts = _groups(groups, folds, ctx.table)
        plan = {fold: ctx.out / f"pretrain-{g}" for g, part in enumerate(parts) for fold in part}
        pending = {ctx.out / f"pretrain-{g}": (part, _group_overrides(pretrain_set, part, folds, fold_seed,
                                                                      ctx.table))
                   for g, part in enumerate(parts)}
    for folder in dict.fromkeys(plan.values()):  # a resumed run's pretrainings, before plan.json is written
        check_pretraining_tokenizer(folder, "put the run's own tokenizer.json back" if runs else
                                    f"put the run's own tokenizer.json back, or delete {folder} and resume, "
                                    f"and it pretrains again")
    if distributed.is_main():
        write_json(ctx.out / PLAN_FILE, {str(f): str(p) for f, p in sorted(plan.items())})
    ctx.pretrained = PretrainedFolds(plan, folds, fold_seed, pending)


@dataclass
class PretrainedFolds:
    """What ``bert_pretrained_groups`` hands to ``bert_finetune``: the
    pretraining folder that serves each test fold (``plan``), the folds'
    setup, and the pretrainings still to run, each with the test folds it
    leaves out and its overrides."""
    plan: Dict[int, Path]
    folds: int
    fold_seed: int
    pending: Dict[Path, Tuple[List[int], List[str]]]


@dataclass
class SentenceFold:
    train: List[List[int]]
    val: List[List[int]]
    test: List[List[int]]
    train_labels: torch.Tensor
    val_labels: torch.Tensor
    test_labels: torch.Tensor


def sentence_batch(sentences: List[List[int]], tokenizer: WordPieceTokenizer, max_len: int) -> TokenGraphs:
    return collate([pack_pair(s, None, max_len, tokenizer.cls_id, tokenizer.sep_id)[0] for s in sentences])


@torch.no_grad()
def classify(model: BertClassifier, sentences: List[List[int]], tokenizer: WordPieceTokenizer,
             device, batch_size: int = 256) -> torch.Tensor:
    predictions = []
    for start in range(0, len(sentences), batch_size):
        batch = sentence_batch(sentences[start:start + batch_size], tokenizer, model.config.max_len)
        predictions.append(model(batch.to(device)).argmax(-1).cpu())
    return torch.cat(predictions) if predictions else torch.zeros(0, dtype=torch.long)


def finetune_fold(ctx, model: BertClassifier, data: SentenceFold, tokenizer: WordPieceTokenizer, *,
                  fold: int, epochs: int, batch_size: int, lr: float, warmup: float, weight_decay: float,
                  clip: float, amp: bool, evals_per_epoch: int, max_steps: int, test: bool,
                  layer_decay: float = 1.0) -> Dict[str, Any]:
    """Fine-tunes on the fold's training sentences, keeps the weights with
    the best validation accuracy, and scores the test sentences once (when
    ``test``)."""
    per_epoch = math.ceil(len(data.train) / batch_size)
    steps = epochs * per_epoch if max_steps <= 0 else min(max_steps, epochs * per_epoch)
    max_len = model.config.max_len

    def loss_fn(model: BertClassifier, step: int):
        epoch, k = divmod(step, per_epoch)
        order = torch.randperm(len(data.train), generator=step_generator(ctx.seed, epoch, stream=fold + 1))
        ids = order[k * batch_size:(k + 1) * batch_size].tolist()
        batch = sentence_batch([data.train[i] for i in ids], tokenizer, max_len).to(ctx.device)
        logits = model(batch)
        labels = data.train_labels[ids].to(ctx.device)
        return F.cross_entropy(logits, labels), {"accuracy": float((logits.argmax(-1) == labels).float().mean())}

    def evaluate(model: BertClassifier) -> Dict[str, float]:
        predicted = classify(model, data.val, tokenizer, ctx.device)
        return {"val_accuracy": float((predicted == data.val_labels).float().mean())}

    optimizer = adamw(model, lr, weight_decay, layer_decay)
    result = train_steps(model, optimizer, loss_fn, steps=steps, out=ctx.out, device=ctx.device, resume=ctx.resume,
                         quiet=ctx.quiet, log=ctx.log, pipeline=ctx.pipeline,
                         scheduler=warmup_linear_decay(optimizer, steps, warmup), clip=clip, amp=amp,
                         evaluate=evaluate, eval_every=max(1, per_epoch // evals_per_epoch),
                         select=("val_accuracy", "max"), meta={"bert_config": asdict(model.config)},
                         desc=f"fold {fold} {ctx.out.name}")
    model.eval()
    figures = {"val_accuracy": result.best["val_accuracy"], "best_step": result.best["step"],
               "steps": result.step, "minutes": result.seconds / 60, "history": result.history}
    if test:
        figures["test_accuracy"] = float((classify(model, data.test, tokenizer, ctx.device)
                                          == data.test_labels).float().mean())
    return figures


def _chosen_folds(run_folds: list, folds: int, served, table: str = "finetune") -> List[int]:
    """The folds to fine-tune (``run_folds``, or all), each served by a
    pretraining that left its sentences out."""
    chosen = _fold_list(run_folds, folds, f"{table}.run_folds") or list(range(folds))
    missing = [f for f in chosen if f not in served]
    if missing:
        raise GraphseqError(f"no pretraining left out the sentences of test fold(s) {missing}; pretrain with "
                            f"corpus.exclude_folds naming them, or let bert-polarity pretrain")
    return chosen


def _check_finetune(check, *, run_folds: list, **_) -> None:
    """The folds against the pretrainings (before they run), and the data."""
    if "bert_folds" in check.facts:  # Without a pretraining stage, the stage itself says what it needs.
        _chosen_folds(run_folds, *check.facts["bert_folds"], check.table)
    load_polarity(check.data_root, check.data_mirror)


@stage("bert_finetune", checks={"run_folds": FOLD_LIST, "epochs": at_least(1), "batch_size": at_least(1),
                                "lr": positive, "scratch_lr": non_negative, "layer_decay": between(0, 1),
                                "pool": one_of(*POOLS),
                                "warmup": between(0, 1), "weight_decay": non_negative, "clip": non_negative,
                                "evals_per_epoch": at_least(1), "max_steps": non_negative},
       resume_may_change=("run_folds",), resume_reads=(FOLDS_FILE,), precheck=_check_finetune,
       applies={"scratch_lr": {"scratch": (True,)}},
       needs={"pretrained": "pretrained BERT models"})
def bert_finetune(ctx, *, run_folds: list = [], epochs: int = 3, batch_size: int = 32, lr: float = 1e-3,
                  scratch_lr: float = 0.0, layer_decay: float = 1.0, pool: str = "cls",
                  pretrained_pooler: bool = False, warmup: float = 0.1, weight_decay: float = 0.01, clip: float = 1.0,
                  amp: bool = True, evals_per_epoch: int = 2, scratch: bool = True, test: bool = True,
                  max_steps: int = 0) -> None:
    """Fine-tunes on sentence polarity, fold by fold (``run_folds``, or
    every fold): from the pretrained weights and, with ``scratch``, the
    same model and tokenizer from random weights (at ``scratch_lr``, 0 for
    ``lr``: a model from scratch may want another rate). With
    ``layer_decay`` < 1 the pretrained variant's encoder layers train at
    decaying rates below its head's (:func:`adamw`; 0 trains the head
    alone); the model from scratch has nothing to keep and trains every
    layer at its rate. The classifier reads the ``[CLS]`` node (``pool =
    "cls"``) or the mean of the sentence's nodes (``"mean"``);
    ``pretrained_pooler`` starts its pooler
    from the one next-sentence prediction trained (else afresh). Each
    trains for ``epochs`` epochs (``max_steps`` > 0 caps them, for smoke
    tests), AdamW with warm-up and linear decay (mixed precision on CUDA
    with ``amp``), is scored on its validation fold ``evals_per_epoch``
    times an epoch, keeps its best weights, and reads its test fold once
    (``test = false`` leaves the test folds unread, for choosing settings).
    ``folds.json`` holds the figures of every finished fold; a resumed run
    keeps them and runs the rest (an unfinished fold continues from its
    checkpoint)."""
    pretrained: PretrainedFolds = ctx.require("pretrained", "bert_finetune")
    folds, fold_seed, pending = pretrained.folds, pretrained.fold_seed, pretrained.pending
    chosen = _chosen_folds(run_folds, folds, pretrained.plan, ctx.table)
    sentences, labels = load_polarity(ctx.data_root, ctx.data_mirror)
    labels = torch.tensor(labels)
    variants = ["pretrained", "scratch"] if scratch else ["pretrained"]
    finished = read_folds(ctx.out / FOLDS_FILE, ("variant", "val_accuracy")) if ctx.resume else []
    done = {(r["fold"], r["variant"]): r for r in finished}
    # Folds outside run_folds stay recorded; only the chosen ones are reported.
    loaded: Dict[Path, Any] = {}
    for fold in chosen:
        if all((fold, v) in done for v in variants):
            ctx.log.info(f"fold {fold}: kept from {FOLDS_FILE}")
            continue
        source = pretrained.plan[fold]
        if source in pending:
            part, overrides = pending.pop(source)
            ctx.log.info(f"pretraining in {source}, leaving out the sentences of test folds {part}")
            _pretrain_group(ctx, source, overrides)
        if source not in loaded:
            loaded = {source: _load_pretraining(source, ctx.device)}  # one pretraining in memory at a time
        base, tokenizer = loaded[source]
        train, val, test_ids = cv_folds(len(sentences), folds, fold_seed)[fold]
        encode = lambda ids: tokenizer.encode_batch([sentences[i] for i in ids.tolist()])  # noqa: E731
        data = SentenceFold(encode(train), encode(val), encode(test_ids), labels[train], labels[val],
                            labels[test_ids])
        for variant in variants:
            if (fold, variant) in done:
                continue
            out = ctx.out / f"fold-{fold}" / variant
            out.mkdir(parents=True, exist_ok=True)
            torch.manual_seed(ctx.seed * 1000 + fold)  # the same classifier layer for both variants
            model = (BertClassifier.from_pretraining(base, pooler=pretrained_pooler, pool=pool)
                     if variant == "pretrained" else BertClassifier(base.config, pool=pool)).to(ctx.device)
            sub = replace(ctx, out=out, resume=ctx.resume and (out / CHECKPOINT).is_file())
            result = finetune_fold(sub, model, data, tokenizer, fold=fold, epochs=epochs, batch_size=batch_size,
                                   lr=lr if variant == "pretrained" or scratch_lr <= 0 else scratch_lr,
                                   warmup=warmup, weight_decay=weight_decay, clip=clip, amp=amp,
                                   evals_per_epoch=evals_per_epoch, max_steps=max_steps, test=test,
                                   layer_decay=layer_decay if variant == "pretrained" else 1.0)
            result.update(fold=fold, variant=variant, pretraining=str(source))
            done[(fold, variant)] = result
            if distributed.is_main():
                write_json(ctx.out / FOLDS_FILE, list(done.values()))
                # folds.json holds what the fold gave; its checkpoint is no longer needed.
                (out / CHECKPOINT).unlink(missing_ok=True)
            ctx.log.info(f"fold {fold} {variant}: validation {result['val_accuracy']:.4f}"
                         + (f", test {result['test_accuracy']:.4f}" if test else "")
                         + f" (best at step {result['best_step']})")
    if distributed.is_main():
        write_json(ctx.out / FOLDS_FILE, list(done.values()))
    _report(ctx, {v: [done[(f, v)] for f in chosen] for v in variants}, test)


def _mean_std(values: List[float]) -> tuple[float, float]:
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1)) if len(values) > 1 else 0.0
    return mean, std


def _report(ctx, results: Dict[str, List[Dict[str, Any]]], test: bool) -> None:
    splits = ("val", "test") if test else ("val",)
    for variant, rows in results.items():
        for split in splits:
            mean, std = _mean_std([r[f"{split}_accuracy"] for r in rows])
            ctx.metrics[f"{variant}_{split}_accuracy"], ctx.metrics[f"{variant}_{split}_std"] = mean, std
        ctx.metrics[f"{variant}_{splits[-1]}_by_fold"] = [r[f"{splits[-1]}_accuracy"] for r in rows]
        ctx.metrics[f"{variant}_minutes"] = sum(r["minutes"] for r in rows)
    if "scratch" in results:
        split = splits[-1]
        gains = [p[f"{split}_accuracy"] - s[f"{split}_accuracy"]
                 for p, s in zip(results["pretrained"], results["scratch"])]
        ctx.metrics[f"gain_{split}_accuracy"], ctx.metrics["gain_std"] = _mean_std(gains)
    ctx.metrics["folds"] = [r["fold"] for r in results["pretrained"]]
    if distributed.is_main():
        _plot_folds(results, ctx.out / "folds.png", ctx.pipeline, splits[-1])
    ctx.log.info(", ".join(f"{v}: {splits[-1]} {ctx.metrics[f'{v}_{splits[-1]}_accuracy']:.4f} ± "
                           f"{ctx.metrics[f'{v}_{splits[-1]}_std']:.4f}" for v in results)
                 + f" over {len(results['pretrained'])} fold(s)")


def _plot_folds(results: Dict[str, List[Dict[str, Any]]], path: Path, title: str, split: str) -> None:
    """Validation accuracy during fine-tuning (one line per fold and variant)
    and each fold's final accuracy (test, or validation without test)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(13, 4.5), dpi=100)
    FigureCanvasAgg(figure)
    curves, bars = figure.add_subplot(1, 2, 1), figure.add_subplot(1, 2, 2)
    colours = {"pretrained": "tab:blue", "scratch": "tab:orange"}
    for variant, rows in results.items():
        for i, row in enumerate(rows):
            points = [(h["step"], h["val_accuracy"]) for h in row.get("history", []) if "val_accuracy" in h]
            if points:
                curves.plot(*zip(*points), color=colours.get(variant), alpha=0.6,
                            label=variant if i == 0 else None)
        offset = -0.2 if variant == "pretrained" else 0.2
        bars.bar([r["fold"] + offset for r in rows], [r[f"{split}_accuracy"] for r in rows], width=0.4,
                 color=colours.get(variant), label=variant)
    curves.set_xlabel("fine-tuning step")
    curves.set_ylabel("validation accuracy")
    curves.grid(alpha=0.3)
    curves.legend()
    bars.set_xlabel("fold")
    bars.set_ylabel(f"{'test' if split == 'test' else 'validation'} accuracy")
    low = min(r[f"{split}_accuracy"] for rows in results.values() for r in rows)
    bars.set_ylim(max(0.0, low - 0.05), 1.0)
    bars.legend()
    figure.suptitle(title)
    write_png(figure, path)
