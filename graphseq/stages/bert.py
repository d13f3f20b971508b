"""Stages of ``bert-pretrain``: a corpus of documents, a WordPiece tokenizer
trained on it, a small BERT, and masked-LM plus next-sentence pretraining by
steps on the step trainer, scored on held-out documents. A corpus that reads
no polarity text drops every sentence holding a polarity snippet, and so
serves every polarity test fold (:mod:`.bert_polarity` fine-tunes on them).
"""
from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Dict, List, Optional

import torch

from .. import distributed
from ..checks import Domain, at_least, between, each, fraction, non_negative, one_of, positive
from ..data.files import file_sha256
from ..data.imdb import TRAIN, UNSUP, load_imdb_parts
from ..data.polarity import SnippetMatcher, cv_folds, load_polarity
from ..data.pretraining import (Document, SentencePairs, TokenGraphs, read_text_folder, shakespeare_speeches,
                                split_held_out)
from ..data.text import load_tiny_shakespeare
from ..data.wordpiece import TOKENIZER_FILE, WordPieceTokenizer
from ..errors import GraphseqError, plural
from ..io import load_checkpoint, read_json, write_json
from ..models.bert import BertConfig, BertForPretraining, save_pretrained
from ..seeding import MAX_SEED
from ..training import CHECKPOINT, train_steps
from .polarity import FOLD_LIST
from .registry import stage

CORPUS_FILE = "pretraining.json"  # what a pretraining read, so fine-tuning can check its test folds
# The SHA-256 of tokenizer.json, recorded in the checkpoint and in pretraining.json: the weights embed
# its pieces by id, so another tokenizer (a new training may differ in a few pieces) would read them wrong.
TOKENIZER_SHA256 = "tokenizer_sha256"
# In pretraining.json: true where the corpus read no polarity text and dropped every sentence that holds a
# polarity snippet, so the run serves every test fold (false where it read polarity and left test folds out).
POLARITY_CHECKED = "polarity_checked"

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
# the default 2,000 is plenty for a steady metric, and more would stall the run before it starts.
MAX_EVAL_EXAMPLES = 100_000
# Sentences tokenized in one call: enough for every thread of the tokenizer, few enough to hold in memory.
ENCODE_CHUNK = 10_000


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


def fold_list(values, folds: int, key: str) -> List[int]:
    values = sorted({int(v) for v in values})
    bad = [v for v in values if not 0 <= v < folds]
    if bad:
        raise GraphseqError(f"{key} must name folds 0..{folds - 1}, got {bad}")
    return values


def _corpus_documents(data_root: Path, data_mirror, folder: str, texts: list, exclude_folds: list, folds: int,
                      fold_seed: int, log=None, table: str = "corpus") -> tuple[List[Document], str, List[int]]:
    """The documents of ``bert_corpus``, where they came from, and the
    polarity test folds left out."""
    excluded = fold_list(exclude_folds, folds, f"{table}.exclude_folds")
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
                                        fold_seed, table=check.section)
    if not _reads_polarity(folder, texts):  # the stage trains on what is left, so the split is checked on it
        documents, _ = _drop_polarity_snippets(documents, check.data_root, check.data_mirror)
    _split_corpus(documents, held_out, check.section)


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
    train, held = _split_corpus(documents, held_out)  # (its precheck refused a split under the section's name)
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
                                    f"{ctx.section}.vocab_size = {vocab_size:,}, because the special tokens and "
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
    documents has none, and no next-sentence metrics)."""
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
    ctx.log.info(f"held-out masked-LM accuracy {final['val_mlm_accuracy']:.4f}{pairs} after "
                 f"{plural(result.step, 'step')}, {result.seconds / 60:.1f} min")
