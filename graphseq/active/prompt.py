"""The person at the terminal as an oracle. :class:`HumanOracle` shows
what a person needs to decide about an item and reads the answer from a
stream it is given (``sys.stdin`` at the terminal, an ``io.StringIO`` in
tests, a pipe in scripts); it never calls ``input()``.

Answers: a class name (a unique prefix is enough, any case) or number;
``?`` help, ``s`` skip, ``u`` undo the last answer, ``q`` save and quit.
Anything else is asked again and stores nothing. The end of the input
counts as ``q``.
"""
from __future__ import annotations

import sys
import textwrap
from typing import Optional, TextIO, Union

from .oracles import QUIT, SKIP, UNDO, Question, Reply, parse_class

COMMANDS = {"s": SKIP, "skip": SKIP, "u": UNDO, "undo": UNDO, "q": QUIT, "quit": QUIT}

HELP = """\
Type the class of the item shown, by name or number; a unique prefix of the
name is enough and case does not matter. Every answer is saved at once.
  s   skip: no label for this item; it is not asked again, even after --resume
  u   undo: take back your last answer (or skip) and be asked it again
  q   save and quit: continue later with 'graphseq run ... --resume --out DIR'
  ?   this help
Single letters are commands; to give a class that starts with s, u or q,
type at least two of its letters."""


def parse_reply(text: str, class_names) -> Union[Reply, str]:
    """A reply, ``"?"`` for help, or raises ValueError saying what is wrong."""
    text = text.strip()
    if not text:
        raise ValueError("type a class name or number (? for help)")
    if text == "?" or text.lower() == "help":
        return "?"
    if text.lower() in COMMANDS:
        return COMMANDS[text.lower()]
    return parse_class(text, class_names)


class HumanOracle:
    """Asks a person. Reads lines from ``input`` and writes to ``output``."""

    source = "human"

    def __init__(self, input: Optional[TextIO] = None, output: Optional[TextIO] = None):
        self.input = input if input is not None else sys.stdin
        self.output = output if output is not None else sys.stdout
        self.closed = False  # After q or the end of input, every question gets QUIT.
        self.shown_classes = False

    def _write(self, text: str = "") -> None:
        self.output.write(text + "\n")
        self.output.flush()

    def classes(self, class_names) -> str:
        return "classes: " + "  ".join(name if name == str(i) else f"{i} {name}"
                                       for i, name in enumerate(class_names))

    def ask(self, question: Question) -> Reply:
        if self.closed:
            return QUIT
        if not self.shown_classes:
            self._write(self.classes(question.class_names) + "   (? help, s skip, u undo, q quit)")
            self.shown_classes = True
        self._write()
        self._write(f"[{question.progress}] item {question.item}" if question.progress
                    else f"item {question.item}")
        for line in question.details:
            self._write(line)
        while True:
            self.output.write("label> ")
            self.output.flush()
            try:
                line = self.input.readline()
            except KeyboardInterrupt:
                self._write()  # The terminal echoed ^C without a newline.
                raise
            if not line:  # The end of the input: save and stop, like q.
                self._write()
                self._write("(end of input: your answers are saved)")
                self.closed = True
                return QUIT
            if not self.input.isatty():
                # No terminal echoes piped answers; echoing them makes the
                # transcript read like a session.
                self._write(line.rstrip("\n"))
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

    def tell(self, text: str) -> None:
        self._write(text)

    def restrict(self, pool):
        return pool


def wrap(text: str, width: int = 78, indent: str = "  ") -> list[str]:
    """A long text as indented lines a terminal shows whole."""
    return textwrap.wrap(text, width=width, initial_indent=indent, subsequent_indent=indent) or [indent]
