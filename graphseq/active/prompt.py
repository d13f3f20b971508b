"""The person at the terminal as an oracle. :class:`HumanOracle` shows
what a person needs to decide about an item and reads the answer from a
stream it is given (``sys.stdin`` at the terminal, an ``io.StringIO`` in
tests, a pipe in scripts); at the process's own terminal it reads through
``input()``, for readline's line editing where the platform has it.

Answers: a class name (a unique prefix is enough, any case, a space for
an underscore) or number; ``?`` help, ``s`` skip, ``u`` undo the last
answer, ``q`` save and quit. Anything else (``-1``, ``_2``, ``1-``: a
number with a stray sign is a typo, not a class) is asked again and stores
nothing (read from a pipe, the next line answers the same item). The end
of the input counts as ``q``, and so does a last line without its line end
(a stream cut off there could name another class by a prefix of the
answer). A byte-order mark before an answer is no part of it. At a
terminal, keys typed while no question was shown (the model retraining)
are dropped before the next question: they would answer one the person
has not seen. Every line of a question and of the help fits the
terminal's width: a longer one is wrapped at words, keeping its indent.
"""
from __future__ import annotations

import io
import os
import re
import stat
import sys
import textwrap
from typing import Optional, TextIO, Union

try:
    import termios
except ImportError:  # Windows: no terminal line discipline to flush
    termios = None

from ..errors import GraphseqError
from ..pictures import terminal_width
from .oracles import QUIT, SKIP, UNDO, Question, Reply, parse_class, quoted

NO_BREAK = "\u00a0"  # textwrap breaks lines at ASCII spaces only
BOM = "\ufeff"  # what Windows editors (and PowerShell's pipes) put before the first line
COMMANDS = {"s": SKIP, "skip": SKIP, "u": UNDO, "undo": UNDO, "q": QUIT, "quit": QUIT}

HELP = """\
Type the class of the item shown, by name or number; a unique prefix of the
name is enough, case does not matter, and a space does for an underscore.
Every answer is saved at once.
  s   skip: no label for this item; it is not asked again, even after --resume
  u   undo: take back your last answer (or skip) and be asked it again
  q   save and quit: continue later with 'graphseq run ... --resume --out DIR'
  ?   this help
Single letters are commands; to give a class that starts with s, u or q,
type at least two of its letters."""


def parse_reply(text: str, class_names) -> Union[Reply, str]:
    """A reply, ``"?"`` for help, or raises ValueError saying what is wrong."""
    text = text.strip().removeprefix(BOM).strip()
    if not text:
        raise ValueError("type a class name or number (? for help)")
    if text == "?" or text.lower() == "help":
        return "?"
    if text.lower() in COMMANDS:
        return COMMANDS[text.lower()]
    try:
        return parse_class(text, class_names)
    except ValueError:
        # "neural networks" for Neural_Networks: a person types the space they read the name with.
        # Only between letters or digits: "-1", "_2" or "1-" are typos, never class 1 or 2.
        if SEPARATOR.search(text) and text.strip(" _-") == text:
            try:
                return parse_class(words(text), [words(name) for name in class_names])
            except ValueError:
                pass
        raise


SEPARATOR = re.compile(r"[\s_-]+")


def words(name: str) -> str:
    """``name`` with each run of spaces, underscores and hyphens as one space."""
    return SEPARATOR.sub(" ", name).strip()


class HumanOracle:
    """Asks a person. Reads lines from ``input`` and writes to ``output``."""

    source = "human"

    def __init__(self, input: Optional[TextIO] = None, output: Optional[TextIO] = None,
                 width: Optional[int] = None):
        self.input = input if input is not None else sys.stdin
        self.output = output if output is not None else sys.stdout
        self.width = width  # None: the terminal's, read at every question (it may be resized).
        self.closed = False  # After q or the end of input, every question gets QUIT.
        self.shown_classes = False

    def _width(self) -> int:
        return self.width if self.width is not None else terminal_width()

    def _write(self, text: str = "", fitted: bool = True) -> None:
        if fitted:
            text = "\n".join(piece for line in text.split("\n") for piece in fit(line, self._width()))
        self.output.write(text + "\n")
        self.output.flush()

    def classes(self, class_names, then: str = "") -> str:
        """The classes by number and name, on as many lines as the width
        asks, no entry split; ``then`` after the last, or on a line of its
        own where it is longer than a row of classes may be."""
        width = self._width()
        entries = [name if name == str(i) else f"{i} {name}" for i, name in enumerate(class_names)]
        last = [then] if then and len(" " * 9 + then) <= width else []
        rows: list[list[str]] = [[]]
        for entry in entries + last:
            if rows[-1] and len("classes: " + "  ".join(rows[-1] + [entry])) > width:
                rows.append([])
            rows[-1].append(entry)
        lines = [("classes: " if k == 0 else " " * 9) + "  ".join(row) for k, row in enumerate(rows)]
        return "\n".join(lines + (fit(then, width) if then and not last else []))

    def ask(self, question: Question) -> Reply:
        if self.closed:
            return QUIT
        self._drop_type_ahead()
        if not self.shown_classes:
            self._write(self.classes(question.class_names, "(? help, s skip, u undo, q quit)"))
            self.shown_classes = True
        self._write()
        # "item N" is never split by the wrap: a no-break space joins them until the line is fitted.
        header = f"[{question.progress}] item{NO_BREAK}{question.item}" if question.progress \
            else f"item {question.item}"
        self._write("\n".join(fit(header, self._width())).replace(NO_BREAK, " "), fitted=False)
        for line in question.details:
            self._write(line)
        while True:
            try:
                line = self._read_line("label> ")
            except KeyboardInterrupt as interrupt:
                self._write()  # The terminal echoed ^C without a newline.
                interrupt.line_ended = True  # ended: the run's and the command's words need not end it again
                raise
            if not line.endswith("\n"):  # The end of the input: save and stop, like q.
                # A last line without its line end was cut off (a unique prefix of it could
                # name the wrong class): it is no answer.
                self._write()
                self._write("(end of input: your answers are saved" +
                            (f"; the last line, {quoted(line)}, has no line end and was not taken as an "
                             f"answer)" if line else ")"))
                self.closed = True
                return QUIT
            line = line.removeprefix(BOM)
            if not self.input.isatty():
                # No terminal echoes piped answers; echoing them makes the
                # transcript read like a session (a long line cut to the width).
                self._write(clip(line.rstrip("\n"), self._width() - len("label> ")))
            try:
                reply = parse_reply(line, question.class_names)
            except ValueError as problem:
                self._write(f"  {problem}")
                continue
            if reply == "?":
                self._write(HELP)
                self._write(self.classes(question.class_names))
                continue
            if reply is QUIT:
                self.closed = True
            return reply

    def _read_line(self, prompt: str) -> str:
        """The next line typed after ``prompt``, with its line end ("" at
        the end of the input). At the process's own terminal it is read by
        ``input()`` with readline's line editing (arrows, history) where the
        platform has readline; any other stream is read as it is."""
        if self.input is sys.stdin and self.output is sys.stdout and _is_terminal(self.input) \
                and _is_terminal(self.output):
            try:
                import readline  # noqa: F401  (input() edits lines once it is loaded)
            except ImportError:  # Windows, or a Python built without it: plain reading
                pass
            else:
                try:
                    return input(prompt) + "\n"
                except EOFError:  # Ctrl-D
                    return ""
        self.output.write(prompt)
        self.output.flush()
        return self.input.readline()

    def _drop_type_ahead(self) -> None:
        """Discards what was typed at the terminal since the last answer, while
        the model retrained: it would answer a question not yet shown."""
        if termios is None:
            return
        try:
            if self.input.isatty():
                termios.tcflush(self.input.fileno(), termios.TCIFLUSH)
        except (OSError, ValueError, termios.error):
            pass  # not a terminal after all (a wrapped stream); nothing typed ahead to drop

    def tell(self, text: str) -> None:
        """Writes ``text`` as it is: its lines may hold a command to copy,
        which a break would spoil (the terminal folds a long line itself)."""
        self._write(text, fitted=False)

    def restrict(self, pool):
        return pool


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, OSError, ValueError):  # a wrapped or closed stream
        return False


def check_streams(input: Optional[TextIO], output: Optional[TextIO]) -> None:
    """Refuses a person's oracle whose standard input or output is closed
    (``<&-``, ``>&-``; Python then has no stream at all), or whose input is
    at its end already (``< /dev/null``, an empty file): found in the run's
    checks, before any training or file of the run, not at the first
    question."""
    for stream, role, remedy in ((input, "reads your answers from standard input",
                                  "a terminal, a pipe or a file (< answers.txt)"),
                                 (output, "shows its questions on standard output",
                                  "a terminal or a file (> transcript.txt)")):
        if stream is None or getattr(stream, "closed", False):
            raise GraphseqError(f"the human oracle (--oracle human) {role}, which is closed; give it {remedy}")
    if _at_its_end(input):
        raise GraphseqError("the human oracle (--oracle human) reads your answers from standard input, which holds "
                            "nothing to read (/dev/null or an empty file); give it a terminal, a pipe or a file of "
                            "answers (< answers.txt)")


def _at_its_end(stream: TextIO) -> bool:
    """Whether ``stream`` is /dev/null, or a file read to its end: nothing a
    person could answer will come. A pipe or a terminal may bring more later."""
    try:
        descriptor = stream.fileno()
        found = os.fstat(descriptor)
        if stat.S_ISREG(found.st_mode):
            return os.lseek(descriptor, 0, os.SEEK_CUR) >= found.st_size
        return stat.S_ISCHR(found.st_mode) and found.st_rdev == os.stat(os.devnull).st_rdev
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return False  # no descriptor (a test's StringIO), or nothing to tell


def fit(line: str, width: int) -> list[str]:
    """A line as lines of at most ``width`` columns where it has spaces to
    break at, each keeping the line's indent."""
    if len(line) <= width:
        return [line]
    # A hanging indent under a term set off by two spaces ("  s   skip: ..."), else the line's own.
    term = re.match(r" *\S+ {2,}", line)
    indent = " " * (term.end() if term else len(line) - len(line.lstrip(" ")))
    return textwrap.wrap(line, width=width, subsequent_indent=indent, break_long_words=False,
                         break_on_hyphens=False) or [line]


def clip(line: str, width: int) -> str:
    """``line`` cut to ``width`` columns (at least 10), ending in ``...`` where it was cut."""
    width = max(width, 10)
    return line if len(line) <= width else line[:width - 3] + "..."
