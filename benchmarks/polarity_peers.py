"""Sentence polarity on the shared 10-fold cross-validation: supervised
paragraph vectors (SPV-DM, SPV-DBOW) against the tools a practitioner would
otherwise use, fold by fold in one process and on one thread: TF-IDF +
logistic regression, multinomial naive Bayes and NBSVM (Wang & Manning,
2012) on word bigrams (scikit-learn), and gensim's Doc2Vec PV-DM and
PV-DBOW + logistic regression; the chain BiLSTM of ``polarity-bilstm`` on
request; and
the figures of a finished ``bert-polarity`` run beside them. Every model
reads the same folds (``graphseq.data.polarity.cv_folds``) and the same
words, makes its choices on the validation fold and reads the test fold
once. Prints each model's validation and test accuracy (mean ± std over
the folds) and its seconds per fold, and SPV-DM's and SPV-DBOW's seconds
per fold over one Doc2Vec fit of the setting chosen on validation
(``fit_seconds``: Doc2Vec's seconds per fold cover its whole grid).

    pip install -e ".[peers]"      # gensim; scikit-learn is a base dependency
    python benchmarks/polarity_peers.py [--folds 0,1,2] [--models tfidf,nbsvm-bi,...]
        [--spv RUN_DIR] [--bert RUN_DIR] [--json results.json] [--data-root DIR] [--data-mirror DIR]

``--json`` is written again after every model of every fold, so a run cut
short keeps what it finished.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np
import torch

from graphseq.data.polarity import cv_folds, load_polarity
from graphseq.errors import GraphseqError
from graphseq.io import atomic_write_text, check_output_file, read_json
from graphseq.data.places import default_data_mirror, default_data_root
from graphseq.stages.paragraph_vectors import spv_fold, words_of
from graphseq.stages.polarity import read_folds
from timing import run_script

MODELS = ("tfidf", "mnb-bi", "nbsvm-bi", "doc2vec-dm", "doc2vec-dbow", "spv-dm", "spv-dbow", "bilstm")
FOLDS = 10
LOGISTIC_C = (0.1, 0.3, 1.0, 3.0, 10.0, 30.0)


def best_logistic(train_x, train_y, val_x, val_y, choices=LOGISTIC_C):
    """Logistic regression with the C that scores best on the validation fold."""
    from sklearn.linear_model import LogisticRegression

    fitted = [LogisticRegression(C=c, max_iter=3000).fit(train_x, train_y) for c in choices]
    scores = [m.score(val_x, val_y) for m in fitted]
    best = int(np.argmax(scores))
    return fitted[best], choices[best]


def tfidf_fold(words, labels, split) -> Dict[str, Any]:
    """TF-IDF (sub-linear term frequency) of unigrams or unigrams and bigrams,
    whichever the validation fold prefers, with the best C."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    train, val, test = (s.numpy() for s in split)
    best = None
    for ngrams in ((1, 1), (1, 2)):
        vectorizer = TfidfVectorizer(analyzer=lambda d: d, sublinear_tf=True) if ngrams == (1, 1) else \
            TfidfVectorizer(analyzer=lambda d: d + [f"{a} {b}" for a, b in zip(d, d[1:])], sublinear_tf=True)
        x_train = vectorizer.fit_transform([words[i] for i in train])
        x_val = vectorizer.transform([words[i] for i in val])
        model, c = best_logistic(x_train, labels[train], x_val, labels[val])
        score = model.score(x_val, labels[val])
        if best is None or score > best[0]:
            best = (score, model, vectorizer, ngrams, c)
    score, model, vectorizer, ngrams, c = best
    test_score = model.score(vectorizer.transform([words[i] for i in test]), labels[test])
    return {"val_accuracy": score, "test_accuracy": test_score, "choice": f"ngrams {ngrams}, C {c}"}


def with_bigrams(words: List[str]) -> List[str]:
    return words + [f"{a} {b}" for a, b in zip(words, words[1:])]


def binary_bigrams(words, split):
    """Which unigrams and bigrams each sentence holds (0/1), for the training,
    validation and test sentences, over the training sentences' vocabulary."""
    from sklearn.feature_extraction.text import CountVectorizer

    vectorizer = CountVectorizer(analyzer=with_bigrams, binary=True)
    train, val, test = (s.numpy() for s in split)
    x_train = vectorizer.fit_transform([words[i] for i in train])
    return x_train, *(vectorizer.transform([words[i] for i in part]) for part in (val, test))


def mnb_fold(words, labels, split) -> Dict[str, Any]:
    """Multinomial naive Bayes on binarized unigrams and bigrams (MNB-bi of
    Wang & Manning, 2012), its smoothing chosen on the validation fold."""
    from sklearn.naive_bayes import MultinomialNB

    train, val, test = (s.numpy() for s in split)
    x_train, x_val, x_test = binary_bigrams(words, split)
    fitted = {alpha: MultinomialNB(alpha=alpha).fit(x_train, labels[train]) for alpha in (0.1, 0.3, 1.0, 3.0)}
    alpha = max(fitted, key=lambda a: fitted[a].score(x_val, labels[val]))
    return {"val_accuracy": fitted[alpha].score(x_val, labels[val]),
            "test_accuracy": fitted[alpha].score(x_test, labels[test]), "choice": f"alpha {alpha}"}


def nbsvm_fold(words, labels, split) -> Dict[str, Any]:
    """NBSVM-bi (Wang & Manning, 2012): binarized unigrams and bigrams scaled
    by their naive-Bayes log-count ratios (smoothing 1), a linear SVM (L2
    regularization, squared hinge loss) on them, and its weights interpolated
    toward their mean magnitude, ``(1 - beta) * mean|w| + beta * w``; C and
    beta chosen on the validation fold."""
    from sklearn.svm import LinearSVC

    train, val, test = (s.numpy() for s in split)
    x_train, x_val, x_test = binary_bigrams(words, split)
    y = labels[train]
    p = 1.0 + np.asarray(x_train[y == 1].sum(axis=0)).ravel()
    q = 1.0 + np.asarray(x_train[y == 0].sum(axis=0)).ravel()
    ratio = np.log((p / p.sum()) / (q / q.sum()))

    def scaled(x):
        return x.multiply(ratio).tocsr()

    best = None
    for c in (0.01, 0.1, 1.0):
        svm = LinearSVC(C=c, max_iter=10_000).fit(scaled(x_train), y)
        w, b = svm.coef_.ravel(), float(svm.intercept_[0])
        for beta in (0.25, 0.5, 1.0):
            weights = (1 - beta) * np.abs(w).mean() + beta * w

            def accuracy(x, ids, weights=weights):
                return float(((scaled(x) @ weights + b > 0).astype(int) == labels[ids]).mean())

            score = accuracy(x_val, val)
            if best is None or score > best[0]:
                best = (score, accuracy, f"C {c}, beta {beta}")
    score, accuracy, choice = best
    return {"val_accuracy": score, "test_accuracy": accuracy(x_test, test), "choice": choice}


DOC2VEC_GRID = {1: ({"epochs": 20}, {"epochs": 50}),
                0: ({"epochs": 20}, {"epochs": 50}, {"epochs": 20, "dbow_words": 1})}


def doc2vec_fold(words, labels, split, dm: int) -> Dict[str, Any]:
    """gensim's Doc2Vec with the settings SPV uses (100 dimensions, window 5,
    5 noise words, min_count 2, sample 1e-3), one worker; the passes (20 or
    50, for training and inference) and, for PV-DBOW, whether word vectors
    are trained alongside (``dbow_words``) are chosen on the validation
    fold. Logistic regression on the training sentences' vectors as trained
    or as inferred, whichever the validation fold prefers, with the best C.
    ``fit_seconds``: the training of the chosen setting's model alone (no
    inference, no classifier), the figure to set beside SPV's seconds."""
    from gensim.models.doc2vec import Doc2Vec, TaggedDocument

    train, val, test = (s.numpy() for s in split)

    def infer(model, epochs, ids):
        return np.stack([model.infer_vector(words[i], epochs=epochs) for i in ids])

    best = None
    for settings in DOC2VEC_GRID[dm]:
        epochs = settings["epochs"]
        documents = [TaggedDocument(words[i], [k]) for k, i in enumerate(train)]
        started = time.perf_counter()
        model = Doc2Vec(documents, dm=dm, vector_size=100, window=5, negative=5, hs=0, min_count=2, sample=1e-3,
                        workers=1, seed=0, **settings)
        fit_seconds = time.perf_counter() - started
        # Inferred in this order (validation, test, training) for gensim's one random stream.
        x_val, x_test = infer(model, epochs, val), infer(model, epochs, test)
        for source, x_train in (("trained", np.stack([model.dv[k] for k in range(len(train))])),
                                ("inferred", infer(model, epochs, train))):
            classifier, c = best_logistic(x_train, labels[train], x_val, labels[val])
            score = classifier.score(x_val, labels[val])
            if best is None or score > best[0]:
                best = (score, classifier, x_test, f"{settings}, {source} training vectors, C {c}", fit_seconds)
    score, classifier, x_test, choice, fit_seconds = best
    # The test fold is scored once, for the choice of the validation fold.
    return {"val_accuracy": score, "test_accuracy": classifier.score(x_test, labels[test]), "choice": choice,
            "fit_seconds": fit_seconds}


def spv_peer_fold(sentences, labels, split, mode: str, settings: Dict[str, Any], rule: str) -> Dict[str, Any]:
    """Ours, as the spv-polarity pipeline runs it (its settings, its rule)."""
    result = spv_fold(sentences, torch.as_tensor(labels), split, mode=mode, **settings)
    return {"val_accuracy": result[f"{rule}_val_accuracy"], "test_accuracy": result[f"{rule}_test_accuracy"],
            "choice": f"rule {rule}; logistic on its vectors {result['logistic_val_accuracy']:.4f}/"
                      f"{result['logistic_test_accuracy']:.4f}",
            "class_words": result["class_words"]}


def bilstm_fold(fold: int, args) -> Dict[str, Any]:
    """The polarity-bilstm pipeline on one fold, through the runner."""
    import graphseq

    summary = graphseq.run("polarity-bilstm", overrides={"data.test_folds": [fold]},
                           out=Path(args.scratch) / f"bilstm-{fold}-{time.strftime('%Y%m%d-%H%M%S')}",
                           data_root=args.data_root, data_mirror=args.data_mirror, quiet=True)
    figures = summary["runs"][0]
    return {"val_accuracy": figures["val_accuracy"], "test_accuracy": figures["test_accuracy"],
            "choice": "polarity-bilstm as configured"}


def spv_settings(pipeline: str = "spv-polarity") -> tuple[Dict[str, Any], str]:
    """The spv-polarity pipeline's settings and rule, so ours runs as the pipeline does."""
    from graphseq.runner.config import read_config, resolve_pipeline

    table = dict(read_config(resolve_pipeline(pipeline))["spv"])
    rule = table.get("classify", "likelihood")
    for key in ("stage", "modes", "folds", "fold_seed", "run_folds", "classify"):
        table.pop(key, None)
    return table, rule


def fold_list(text: str) -> List[int]:
    """``--folds``: distinct folds of the ten, comma-separated (none: all of them)."""
    try:
        folds = [int(f) for f in text.split(",") if f.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated fold numbers, got {text}") from None
    outside = [f for f in folds if not 0 <= f < FOLDS]
    if outside:
        raise argparse.ArgumentTypeError(f"fold(s) {', '.join(map(str, outside))} out of range: "
                                         f"there are {FOLDS} folds, 0..{FOLDS - 1}")
    repeated = sorted({f for f in folds if folds.count(f) > 1})
    if repeated:
        raise argparse.ArgumentTypeError(f"fold(s) {', '.join(map(str, repeated))} named more than once")
    return folds


def finished_run(parser: argparse.ArgumentParser, option: str, run: str, name: str,
                 fold_keys: Optional[Sequence[str]] = None) -> Any:
    """The JSON file ``name`` of the finished run given to ``option``, or a usage error.
    With ``fold_keys``, a ``folds.json``: a list of folds, each with its ``fold`` and these keys."""
    try:
        content = read_json(Path(run) / name)
        return content if fold_keys is None else read_folds(Path(run) / name, fold_keys)
    except GraphseqError as error:
        parser.error(f"{option} {run}: not a finished run ({error})")


def summary_line(name: str, rows: List[Dict[str, Any]]) -> str:
    def stats(key):
        values = [r[key] for r in rows]
        return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)

    (val, val_std), (test, test_std) = stats("val_accuracy"), stats("test_accuracy")
    seconds = statistics.fmean(r["seconds"] for r in rows)
    return f"| {name} | {val:.4f} ± {val_std:.4f} | {test:.4f} ± {test_std:.4f} | {seconds:.1f} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--folds", type=fold_list, default="", help="comma-separated folds (default: all ten)")
    parser.add_argument("--models", default="tfidf,mnb-bi,nbsvm-bi,doc2vec-dm,doc2vec-dbow,spv-dm,spv-dbow",
                        help=f"comma-separated, of {', '.join(MODELS)}")
    parser.add_argument("--bert", default=None, metavar="RUN_DIR", help="a finished bert-polarity run to list beside")
    parser.add_argument("--spv", default=None, metavar="RUN_DIR",
                        help="a finished spv-polarity run to list beside (instead of running spv-* here)")
    parser.add_argument("--json", default=None, help="write every fold's figures here, after each")
    parser.add_argument("--data-root", default=default_data_root())
    parser.add_argument("--data-mirror", default=default_data_mirror())
    parser.add_argument("--scratch", default="runs/polarity-peers", help="where the BiLSTM's runs go")
    args = parser.parse_args()
    torch.set_num_threads(1)

    models = [m for m in args.models.split(",") if m]
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(MODELS)}")
    if not models:  # "--models ," would otherwise load the data and print an empty table.
        parser.error(f"--models {args.models!r} names no model; choose from {', '.join(MODELS)}")
    repeated = sorted({m for m in models if models.count(m) > 1})
    if repeated:  # A model named twice would run twice a fold and count each fold twice.
        parser.error(f"--models: model(s) {', '.join(repeated)} named more than once")
    # The runs listed beside and the output are checked now, not after hours of folds.
    settings, rule = spv_settings()
    spv_rows = finished_run(parser, "--spv", args.spv, "folds.json",
                            ("mode", "seconds", f"{rule}_val_accuracy", f"{rule}_test_accuracy")) if args.spv else []
    bert = finished_run(parser, "--bert", args.bert, "metrics.json") if args.bert else None
    if bert is not None and not (isinstance(bert, dict) and isinstance(bert.get("runs"), list) and bert["runs"]):
        parser.error(f"--bert {args.bert}: its metrics.json lists no runs")
    if args.json:
        try:
            check_output_file(args.json, ".json", "--json")
        except GraphseqError as error:
            parser.error(str(error))
    doc2vec = [m for m in models if m.startswith("doc2vec")]
    if doc2vec and importlib.util.find_spec("gensim") is None:
        parser.error(f"--models {','.join(doc2vec)}: gensim is not installed; install the peers extra: "
                     'pip install -e ".[peers]"')
    sentences, labels = load_polarity(Path(args.data_root), Path(args.data_mirror) if args.data_mirror else None)
    labels = np.asarray(labels)
    words = [words_of(s) for s in sentences]
    splits = cv_folds(len(sentences), FOLDS)
    folds = args.folds or list(range(FOLDS))
    runners: Dict[str, Callable[[int], Dict[str, Any]]] = {
        "tfidf": lambda f: tfidf_fold(words, labels, splits[f]),
        "mnb-bi": lambda f: mnb_fold(words, labels, splits[f]),
        "nbsvm-bi": lambda f: nbsvm_fold(words, labels, splits[f]),
        "doc2vec-dm": lambda f: doc2vec_fold(words, labels, splits[f], dm=1),
        "doc2vec-dbow": lambda f: doc2vec_fold(words, labels, splits[f], dm=0),
        "spv-dm": lambda f: spv_peer_fold(sentences, labels, splits[f], "dm", {**settings, "seed": f}, rule),
        "spv-dbow": lambda f: spv_peer_fold(sentences, labels, splits[f], "dbow", {**settings, "seed": f}, rule),
        "bilstm": lambda f: bilstm_fold(f, args),
    }
    results: Dict[str, List[Dict[str, Any]]] = {m: [] for m in models}
    for fold in folds:
        # The models take turns within each fold, so a change in the
        # machine's load falls on all of them alike.
        for name in models:
            started = time.perf_counter()
            row = runners[name](fold)
            row.update(fold=fold, seconds=time.perf_counter() - started)
            results[name].append(row)
            print(f"fold {fold} {name}: validation {row['val_accuracy']:.4f}, test {row['test_accuracy']:.4f}, "
                  f"{row['seconds']:.1f} s ({row['choice']})", flush=True)
            for label, nearest in row.get("class_words", {}).items():
                print(f"  nearest words to the {label} class vector: {', '.join(nearest)}", flush=True)
            if args.json:  # After every model of every fold, so that a later failure loses nothing finished.
                atomic_write_text(args.json, json.dumps(results, indent=2) + "\n")

    print(f"\nsentence polarity, folds {folds}, one thread\n")
    print("| model | validation accuracy | test accuracy | seconds per fold |")
    print("|---|---|---|---|")
    for name, rows in results.items():
        print(summary_line(name, rows))
    if args.spv:
        for mode in ("dm", "dbow"):
            rows = [{"val_accuracy": r[f"{rule}_val_accuracy"], "test_accuracy": r[f"{rule}_test_accuracy"],
                     "seconds": r["seconds"]} for r in spv_rows if r["mode"] == mode and r["fold"] in folds]
            if rows:
                print(summary_line(f"SPV-{mode.upper()} (from {args.spv}, {len(rows)} folds)", rows))
    if args.bert:
        metrics = bert["runs"][0]
        for variant in ("pretrained", "scratch"):
            if f"{variant}_test_accuracy" in metrics:
                print(f"| BERT {variant} (from {args.bert}, folds {metrics['folds']}) | "
                      f"{metrics[f'{variant}_val_accuracy']:.4f} ± {metrics[f'{variant}_val_std']:.4f} | "
                      f"{metrics[f'{variant}_test_accuracy']:.4f} ± {metrics[f'{variant}_test_std']:.4f} | |")
    # Doc2Vec's seconds per fold cover its whole validation grid (2-3 fits and
    # their inference); SPV's one run is set beside one fit of the chosen setting.
    ratios = []
    for mode in ("dm", "dbow"):
        ours, peer = results.get(f"spv-{mode}"), results.get(f"doc2vec-{mode}")
        if ours and peer:
            spv_seconds = statistics.fmean(r["seconds"] for r in ours)
            fit_seconds = statistics.fmean(r["fit_seconds"] for r in peer)
            ratios.append(f"seconds per fold, SPV-{mode.upper()} / one Doc2Vec PV-{mode.upper()} fit of the chosen "
                          f"setting: {spv_seconds / fit_seconds:.2f} ({spv_seconds:.1f} vs {fit_seconds:.1f} s)")
    if ratios:
        print("\n" + "\n".join(ratios))


if __name__ == "__main__":
    run_script(main)
