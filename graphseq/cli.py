"""The ``graphseq`` command: argument parsing only. Every command calls the
Python API, so whatever the CLI can do, ``graphseq.run(...)`` can do too.
Problems in what the user asked for exit with code 2 and a one-line message.

This module imports no torch at the top: ``--threads`` must set OpenMP's
environment before torch loads.
"""
from __future__ import annotations

import argparse
import errno
import math
import os
import sys
from pathlib import Path
from typing import List, Optional

from .errors import GraphseqError, end_interrupted_line, plural, tell

# Why a write fails that no check of the command line foresees.
UNWRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT)
DESCRIPTION = ("graphseq: attention, recurrent networks and active learning as PyTorch Geometric "
               "message passing; run named pipelines, label data at the terminal, sample models.")


def _add_run(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("run", help="run a named pipeline or a pipeline TOML file")
    p.add_argument("pipeline", help="a name from 'graphseq list' or a path to a .toml file")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override one setting of the pipeline (repeatable)")
    p.add_argument("--seed", type=_whole, default=None,
                   help="seed of the first run (default 0, or the resumed run's)")
    p.add_argument("--runs", type=_whole, default=None,
                   help="repeat with seeds seed..seed+N-1 (default 1, or the resumed run's)")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N (default auto)")
    p.add_argument("--threads", type=_whole, default=None, metavar="N",
                   help="CPU threads for torch (default: torch's, one per core). Either way OpenMP's "
                        "threads sleep rather than spin while they wait, so a run does not collapse "
                        "on a machine other jobs share")
    p.add_argument("--data-root", default=None, help="where datasets live (default $GRAPHSEQ_DATA or ./datasets)")
    p.add_argument("--data-mirror", default=None,
                   help="read-only folder of raw dataset files consulted before any download "
                        "(default $GRAPHSEQ_MIRROR)")
    p.add_argument("--out", default=None, help="output directory (default runs/NAME-TIME)")
    p.add_argument("--resume", action="store_true",
                   help="continue the run stored in --out, with the settings it was started with")
    p.add_argument("--quiet", action="store_true",
                   help="no progress bars or console log (what libraries print goes to log.txt)")
    p.add_argument("--oracle", choices=["simulated", "human", "web", "file"], default=None,
                   help="who answers an active-learning pipeline's questions: the ground truth "
                        "(default), you at the terminal (or a pipe), you in the browser (a page on "
                        "127.0.0.1 whose address is printed), or --labels")
    p.add_argument("--labels", default=None, metavar="F.csv",
                   help="answers for --oracle file, rows item,label (implies --oracle file)")
    p.add_argument("--nproc-per-node", type=int, default=1, metavar="N",
                   help="train data-parallel in N processes on this machine, through torch's elastic "
                        "launcher (for several machines, use torchrun ... -m graphseq run)")
    p.set_defaults(handler=_run)


def _whole(text: str) -> int:
    """argparse's int, with a message that names what was typed."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


def _set_threads(threads: Optional[int]) -> None:
    """Before torch loads: OpenMP threads that sleep, rather than spin, while
    they wait (a spinning thread that waits for a busy core made a
    gat-citeseer epoch 10-100 times slower on a shared 2-core machine), and N
    of them if asked. A wait policy the user set is kept."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    if threads is not None:
        for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[name] = str(threads)


def _run(args: argparse.Namespace) -> int:
    if args.resume and args.out is None:
        raise GraphseqError("--resume needs --out DIR, the run to continue")
    if args.threads is not None and args.threads < 1:
        raise GraphseqError(f"--threads must be at least 1, got {args.threads}")
    if args.threads is not None and args.threads > (os.cpu_count() or 1):
        # More than the machine's gains nothing, and OpenMP crashes (SIGSEGV) past a few thousand.
        raise GraphseqError(f"--threads {args.threads}: this machine has {os.cpu_count() or 1} CPU threads; "
                            f"give at most that many")
    if "torch" not in sys.modules:
        _set_threads(args.threads)
    if args.nproc_per_node < 1:
        raise GraphseqError(f"--nproc-per-node must be at least 1, got {args.nproc_per_node}")
    from .runner import execute, plan

    options = {}
    if args.labels:  # First, so that a pipeline without a use for it names the option the user typed.
        options["labels"] = args.labels
    if args.oracle or args.labels:
        options["oracle"] = args.oracle or "file"
    checked = plan(args.pipeline, overrides=args.overrides, seed=args.seed, runs=args.runs, device=args.device,
                   out=args.out, data_root=args.data_root, data_mirror=args.data_mirror, quiet=args.quiet,
                   resume=args.resume, threads=args.threads,
                   processes=args.nproc_per_node if args.nproc_per_node > 1 else None, **options)
    if args.nproc_per_node > 1:  # Planned here once; each worker runs the same command.
        from .runner.launch import launch

        argv = _without_nproc(args.argv)
        if args.out is None:  # One folder for all workers, named once.
            argv += ["--out", str(checked.out)]
        return launch(argv, args.nproc_per_node, checked)
    summary = execute(checked)
    from .distributed import launched_rank

    if launched_rank() != 0:
        return 0  # Rank 0 alone reports.
    mean, std = summary["mean"], summary["std"]
    several = len(summary["runs"]) > 1
    figures = ", ".join(f"{k} {_number(v, _counts(summary['runs'], k))}"
                        + (f" ± {_number(std[k], False)}" if several else "") for k, v in mean.items())
    print(f"{summary['pipeline']}: {figures}")
    return 0


def _without_nproc(argv: List[str]) -> List[str]:
    """The command line minus ``--nproc-per-node N``: what each worker runs."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--nproc-per-node":
            skip = True
        elif not arg.startswith("--nproc-per-node="):
            kept.append(arg)
    return kept


def _counts(runs: List[dict], key: str) -> bool:
    """Whether every run's ``key`` is a whole number (steps, labels), not a fraction that may be 1.0."""
    return all(isinstance(run.get(key), int) and not isinstance(run.get(key), bool) for run in runs)


def _number(value: float, count: bool) -> str:
    """A count as a whole number; any other figure with four decimals (an accuracy of 1 as 1.0000)."""
    return str(int(value)) if count and float(value).is_integer() else f"{value:.4f}"


def _add_list(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("list", help="list the named pipelines")
    p.set_defaults(handler=_list)


def _list(args: argparse.Namespace) -> int:
    from .runner.config import available_pipelines, read_config

    pipelines = available_pipelines()
    width = max((len(n) for n in pipelines), default=0)
    broken = 0
    for name, path in pipelines.items():
        try:  # One bad file under $GRAPHSEQ_PIPELINES does not hide the rest.
            description = read_config(path).get("description", "")
        except GraphseqError as error:
            tell(f"graphseq: error: {error}")
            broken += 1
            continue
        print(f"{name:<{width}}  {description}")
    return 2 if broken else 0


def _add_labels(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("labels", help="print the labels an active-learning run stored, as CSV")
    p.add_argument("dir", help="the run's --out directory")
    p.add_argument("--strategy", default=None, help="which strategy's labels, when the run compared several")
    p.add_argument("--skips", action="store_true",
                   help="list the skipped items too, as rows with an empty label (without it, their "
                        "number is said on stderr)")
    p.set_defaults(handler=_labels)


def _labels(args: argparse.Namespace) -> int:
    from .active.store import answers_csv, run_answers

    answers = run_answers(args.dir, args.strategy)
    sys.stdout.write(answers_csv(answers, skips=args.skips))
    skipped = [a.item for a in answers if a.label is None]
    if skipped and not args.skips:  # stdout stays the labels alone, for programs to read
        shown = ", ".join(map(str, skipped[:10])) + (", ..." if len(skipped) > 10 else "")
        tell(f"graphseq: {plural(len(skipped), 'skipped item')} not listed ({shown}); "
             f"--skips lists them with an empty label")
    return 0


def _add_plot_curves(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("plot-curves", help="draw an active-learning run's learning curves (all seeds)")
    p.add_argument("dir", help="the run's --out directory")
    p.set_defaults(handler=_plot_curves)


def _plot_curves(args: argparse.Namespace) -> int:
    from .active.curves import plot_run

    print(plot_run(args.dir))
    return 0


# The most characters `sample --html` and `--units` read. Their text is held
# whole with every unit's activation after each character (hidden_size * 4
# bytes a character), and a page of more is too long to read in a browser.
VIEW_CHARACTERS = 100_000


def _add_sample(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("sample", help="generate text from a charlm run, or map its hidden units over a text")
    p.add_argument("dir", help="the run's --out directory (holding checkpoint.pt)")
    p.add_argument("--prime", default=None, help="text the sample starts with (default: none)")
    p.add_argument("--length", type=_whole, default=None,
                   help="characters generated after the prime (default 500)")
    p.add_argument("--temperature", type=float, default=None,
                   help="softmax temperature; lower is safer, 0 always takes the likeliest (default 1)")
    p.add_argument("--seed", type=_whole, default=None, help="seed of the draws (default: random)")
    p.add_argument("--device", default="cpu", help="auto, cpu, cuda or cuda:N (default cpu)")
    p.add_argument("--html", default=None, metavar="OUT.html",
                   help="instead of sampling, write a heat map of hidden units over a text (a name "
                        "ending in .html, outside the run folder, not the --text-file)")
    p.add_argument("--cells", default=None, metavar="I,J,K",
                   help="the units --html draws (default: those that best track line position, "
                        "speaker lines, words, ...)")
    p.add_argument("--text-file", default=None, metavar="F",
                   help=f"the text --html and --units read, at most {VIEW_CHARACTERS:,} characters "
                        f"(default: a sample generated as above)")
    p.add_argument("--units", type=_whole, default=0, metavar="K",
                   help="list the K units that best track each feature of the text")
    p.set_defaults(handler=_sample)


SAMPLE_DEFAULTS = {"prime": "", "length": 500, "temperature": 1.0}


def _typed(args: argparse.Namespace, *names: str) -> List[str]:
    """The options among ``names`` (attribute names) that the command line
    gave: those whose value is not their default of None."""
    return [f"--{name.replace('_', '-')}" for name in names if getattr(args, name) is not None]


def _refuse_unused(options: List[str], why: str) -> None:
    """Refuses options that would change nothing, naming them: a silently
    ignored option leaves the user believing it took effect."""
    if options:
        verb = "has" if len(options) == 1 else "have"
        raise GraphseqError(f"{', '.join(options)} {verb} no effect {why}")


def _sample(args: argparse.Namespace) -> int:
    views_asked = bool(args.html or args.units)
    if args.text_file is not None and not views_asked:
        _refuse_unused(["--text-file"], "without --html or --units, which read it (to sample text, "
                                        "leave it out)")
    if args.text_file is not None:
        _refuse_unused(_typed(args, "prime", "length", "temperature", "seed"),
                       "with --text-file: the units are read over that file, not over a generated sample")
    if args.cells is not None and not args.html:
        _refuse_unused(["--cells"], "without --html (it names the units the heat map draws)")
    typed = {name: getattr(args, name) for name in SAMPLE_DEFAULTS}
    for name, default in SAMPLE_DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, default)
    if args.length < 0:
        raise GraphseqError(f"--length must be at least 0, got {args.length}")
    _check_draws(args.temperature, args.seed)
    if args.units < 0:
        raise GraphseqError(f"--units must be at least 0, got {args.units}")
    _check_utf8(args.prime, "--prime")
    cells = None if args.cells is None else _int_list(args.cells, "--cells")
    from . import views
    from .io import check_output_file
    from .devices import resolve_device
    from .models import charlm

    if args.html:
        check_output_file(args.html, ".html", "--html", inputs=[args.text_file] if args.text_file else [],
                          run_dir=args.dir)
    text = None
    if args.text_file is not None:
        text = _read_text(Path(args.text_file), VIEW_CHARACTERS if views_asked else None)
    elif views_asked and len(args.prime) + args.length > VIEW_CHARACTERS:
        shown = "--length asks" if typed["prime"] is None else "--prime and --length ask"
        raise GraphseqError(f"{shown} for a sample of {len(args.prime) + args.length:,} characters; "
                            f"--html and --units read at most {VIEW_CHARACTERS:,}")
    model, vocab = charlm.load_char_lm(args.dir, resolve_device(args.device))
    if cells is not None:  # Before anything is printed or drawn.
        views.check_cells(cells, model.config["hidden_size"], f"--cells {args.cells}: ")
    if text is None:
        text = charlm.sample(model, vocab, args.prime, args.length, args.temperature, args.seed)
    if not views_asked:
        print(text)
        return 0
    if len(text) < 2:  # One character varies in nothing a unit could track.
        raise GraphseqError(f"the text is {'empty' if not text else '1 character long'}; "
                            f"--html and --units need at least 2 characters")
    if args.units:
        activations = views.hidden_activations(model, vocab, text)
        found = views.interesting_units(text, activations, args.units)
        if not found:
            raise GraphseqError(views.NOTHING_VARIES)
        print(views.describe_units(found))
    if args.html:
        drawn = views.write_heatmap(model, vocab, text, args.html, cells)
        print(f"wrote {args.html}: units {', '.join(map(str, drawn))} over {len(text)} characters")
    return 0


def _check_draws(temperature: float, seed: Optional[int]) -> None:
    """The temperature and seed of random draws (``sample``, ``caption --sample``)."""
    if not math.isfinite(temperature) or temperature < 0:
        raise GraphseqError(f"--temperature must be a finite number >= 0, got {temperature}")
    if seed is not None and not 0 <= seed < 2**32:
        raise GraphseqError(f"--seed must be a whole number from 0 to {2**32 - 1}, got {seed}")


def _check_utf8(text: str, what: str) -> None:
    """Python hands the bytes of an argument that are not UTF-8 over as lone
    surrogates, which no tokenizer or vocabulary takes."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        byte = ord(text[error.start]) & 0xFF
        raise GraphseqError(f"{what} is not valid UTF-8: byte 0x{byte:02x} at character "
                            f"{error.start}") from None


def _read_text(path: Path, limit: Optional[int] = None) -> str:
    """The --text-file, refused before it is read whole where it holds more
    than ``limit`` characters (UTF-8 takes at most 4 bytes for one)."""
    from .io import read_utf8

    too_long = f"; --html and --units read at most {limit:,} characters (give an excerpt)"
    try:
        if limit is not None and path.stat().st_size > 4 * limit:
            raise GraphseqError(f"--text-file {path} holds {path.stat().st_size:,} bytes{too_long}")
        text = read_utf8(path)
    except OSError as error:
        raise GraphseqError(f"cannot read --text-file {path}: {error.strerror}") from None
    if limit is not None and len(text) > limit:
        raise GraphseqError(f"--text-file {path} holds {len(text):,} characters{too_long}")
    return text


def _int_list(text: str, option: str) -> List[int]:
    try:
        numbers = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        numbers = []
    if not numbers or min(numbers) < 0:
        raise GraphseqError(f"{option} takes comma-separated whole numbers like 3,17,42, got {text!r}")
    return numbers


class _Parser(argparse.ArgumentParser):
    """argparse, with its errors on one line like graphseq's own (exit code 2)."""

    def error(self, message: str) -> None:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


ATTENTION_CAPTIONS = 8  # drawn by caption --attention: each takes a block of panels of the figure


def _add_caption(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("caption", help="caption an image with the model of a caption-* run")
    p.add_argument("dir", help="the run's --out directory (holding captioner.pt)")
    p.add_argument("image", help="an image file (PNG, JPEG, ...); it is resized to the model's input")
    p.add_argument("--beam", type=int, default=None, metavar="K",
                   help="beam width, at most the model's vocabulary size; the best caption is printed "
                        "(1: greedy; default 3)")
    p.add_argument("--sample", type=int, default=0, metavar="N",
                   help="instead print N captions drawn at --temperature (at most 1000; with "
                        f"--attention, at most {ATTENTION_CAPTIONS})")
    p.add_argument("--temperature", type=float, default=None,
                   help="softmax temperature of --sample; 0 always takes the likeliest word (default 1)")
    p.add_argument("--seed", type=_whole, default=None, help="seed of --sample's draws (default: random)")
    p.add_argument("--max-length", type=int, default=20,
                   help="longest caption in words (default 20, at most 100)")
    p.add_argument("--attention", default=None, metavar="OUT.png",
                   help="attention decoder: draw each word's attention over the image (a name ending "
                        "in .png, outside the run folder, not the image)")
    p.add_argument("--device", default="cpu", help="auto, cpu or cuda (default cpu)")
    p.set_defaults(handler=_caption)


EMPTY_CAPTION = "(empty caption)"  # the model ended the caption before its first word


def _caption(args: argparse.Namespace) -> int:
    temperature = 1.0 if args.temperature is None else args.temperature
    _check_draws(temperature, args.seed)
    if args.sample > 0:
        _refuse_unused(_typed(args, "beam"), "with --sample (the captions are drawn, not searched)")
    else:
        _refuse_unused(_typed(args, "temperature", "seed"), "without --sample (beam search draws nothing)")
    if args.attention and args.sample > ATTENTION_CAPTIONS:
        raise GraphseqError(f"--attention draws at most {ATTENTION_CAPTIONS} captions (the figure grows with "
                            f"each), got --sample {args.sample}; ask for fewer, or leave --attention out")
    from .models.caption_search import caption_image

    out = caption_image(args.dir, args.image, beam_size=3 if args.beam is None else args.beam,
                        samples=args.sample, temperature=temperature, seed=args.seed,
                        max_length=args.max_length, attention=args.attention, device=args.device)
    if out.unlike:
        tell(f"graphseq: warning: {args.image} is unlike the images the model was trained on ({out.unlike}); "
             f"its caption may not describe it")
    for words in out.words:
        print(" ".join(words) if words else EMPTY_CAPTION)
    if args.attention:
        tell(f"wrote {args.attention}: the attention of each word over the image")
    return 0


def _add_fill_mask(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("fill-mask", help="the likeliest pieces for each [MASK] of a text, from a bert-pretrain run")
    p.add_argument("dir", help="the bert-pretrain run's --out directory (holding bert.pt and tokenizer.json)")
    p.add_argument("text", help='a text with one or more [MASK], e.g. "the movie was [MASK] ."')
    p.add_argument("--top-k", type=int, default=5,
                   help="pieces shown per mask (default 5; more than the vocabulary shows every piece)")
    p.add_argument("--device", default="cpu", help="auto, cpu or cuda (default cpu)")
    p.set_defaults(handler=_fill_mask)


def _fill_mask(args: argparse.Namespace) -> int:
    from .devices import resolve_device
    from .models.bert import fill_mask, load_pretrained

    if args.top_k < 1:
        raise GraphseqError(f"--top-k must be at least 1, got {args.top_k}")
    _check_utf8(args.text, "the text")
    model, tokenizer = load_pretrained(args.dir, resolve_device(args.device))
    for i, candidates in enumerate(fill_mask(model, tokenizer, args.text, args.top_k), start=1):
        print(f"[MASK] {i}")
        for token, probability in candidates:
            print(f"  {probability:.3f}  {token}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="graphseq", description=DESCRIPTION)
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    _add_run(commands)
    _add_list(commands)
    _add_labels(commands)
    _add_plot_curves(commands)
    _add_sample(commands)
    _add_caption(commands)
    _add_fill_mask(commands)
    return parser


class _OutputError(Exception):
    """Standard output could not be written (a full disk, a reader gone)."""


class _Output:
    """Standard output, whose failed writes are told apart from the OSErrors
    of the files a command reads. A closed standard output (``>&-``, where
    Python has no stream) takes every write and drops it, as ``print`` does
    then; a person's oracle is refused in the run's checks instead."""

    def __init__(self, stream):
        self.stream = stream

    @property
    def closed(self) -> bool:
        return self.stream is None or getattr(self.stream, "closed", False)

    def write(self, text: str) -> int:
        if self.stream is None:
            return len(text)
        try:
            return self.stream.write(text)
        except OSError as error:
            raise _OutputError(error) from None

    def flush(self) -> None:
        if self.stream is None:
            return
        try:
            self.stream.flush()
        except OSError as error:
            raise _OutputError(error) from None

    def __getattr__(self, name: str):
        return getattr(self.stream, name)


def _discard_output() -> None:
    """Points standard output at /dev/null, so that Python's own flush at
    exit does not fail again on what is still buffered."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.__stdout__.fileno())
    except (AttributeError, OSError, ValueError):
        pass  # not a file descriptor (a test's capture)


def main(argv: Optional[List[str]] = None) -> int:
    for stream in (sys.stdout, sys.stderr):  # A name like Veličković under an ASCII locale: escaped, not a crash.
        if hasattr(stream, "reconfigure") and stream.errors == "strict":
            stream.reconfigure(errors="backslashreplace")
    # Bytes that are no text in the locale's encoding, piped to the prompt, make an answer that is
    # no class (and says so, naming the line), not a UnicodeDecodeError.
    if hasattr(sys.stdin, "reconfigure") and getattr(sys.stdin, "errors", None) == "strict":
        sys.stdin.reconfigure(errors="surrogateescape")
    stdout, sys.stdout = sys.stdout, _Output(sys.stdout)
    try:
        code = _command(argv)
        sys.stdout.flush()  # A full disk shows here, while a message can still say so.
        return code
    except _OutputError as failure:
        _discard_output()
        error = failure.args[0]
        if isinstance(error, BrokenPipeError):
            return 141  # Quietly, as a tool that SIGPIPE ends (graphseq list | head -1).
        tell(f"graphseq: error: cannot write the output: {error.strerror or error}")
        return 2
    finally:
        sys.stdout = stdout


def _command(argv: Optional[List[str]]) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as stop:  # --help, or a malformed command line (code 2)
        return stop.code if isinstance(stop.code, int) else 2
    args.argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return args.handler(args)
    except GraphseqError as error:
        _say(f"graphseq: error: {error}")
        return 2
    except OSError as error:
        # A place this run must write in and cannot (a read-only data root
        # that lacks the processed files, a full disk): one line naming it.
        if error.errno not in UNWRITABLE or not error.filename:
            raise
        _say(f"graphseq: error: cannot write {error.filename}: {error.strerror}")
        return 2
    except KeyboardInterrupt as interrupt:
        if not os.environ.get("GRAPHSEQ_LAUNCHED"):  # --nproc-per-node: the launcher says it, once.
            # What the run did with its folder, where its log did not say it (see runner.execute).
            _say("; ".join(["graphseq: interrupted", *getattr(interrupt, "__notes__", [])]), interrupt)
        return 130


def _say(line: str, interrupt: Optional[KeyboardInterrupt] = None) -> None:
    """Prints a last word on standard error, once for all the workers of a
    run under torchrun where they refuse it alike in its checks: rank 0
    (as ``RANK`` says) speaks for them. The word on an ``interrupt`` starts
    a line of its own at a terminal, which echoed "^C" with no line end,
    unless the run's own word on it (its log's last line) ended that line
    already and said so (:func:`graphseq.errors.end_interrupted_line`)."""
    rank = os.environ.get("RANK", "0").strip()
    distributed = sys.modules.get("graphseq.distributed")
    if not rank.isdigit() or int(rank) == 0 or getattr(distributed, "past_checks", True):
        if interrupt is not None:
            end_interrupted_line(interrupt, sys.stderr)
        tell(line)


if __name__ == "__main__":
    sys.exit(main())
