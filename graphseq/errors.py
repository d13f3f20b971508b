"""The one exception graphseq raises for problems in what a user asked for
(an unknown pipeline, a bad override, a missing data file, a bad tensor
shape). The CLI prints its message and exits with code 2, without a traceback.

Also how graphseq's last words reach a person, which the runner, the
launcher of several processes and the CLI share: on standard error
(:func:`tell`), on a line of its own after Ctrl-C's "^C"
(:func:`end_interrupted_line`), with counts spelled as said
(:func:`plural`). This module imports no torch, as the CLI's top must not.
"""
import sys


class GraphseqError(Exception):
    """A problem with the user's input, with a message that says how to fix it."""


def end_interrupted_line(interrupt: BaseException, stream) -> None:
    """Ends the line on which a terminal echoed Ctrl-C's "^C", where the
    cursor was and with no line end, so that what is said of the interrupt
    next starts a line of its own rather than "^Cinterrupted"; once an
    interrupt, which remembers it (``interrupt.line_ended``) for whoever
    speaks after (the command's "graphseq: interrupted"). The interrupt is a
    KeyboardInterrupt, or in the launcher of several processes the
    exception torch's launcher raises for SIGINT. A stream that is no
    terminal (a file, a pipe) saw no ^C and gets nothing."""
    if getattr(interrupt, "line_ended", False):
        return
    try:
        if not stream.isatty():
            return
        stream.write("\n")
        stream.flush()
    except (AttributeError, OSError, ValueError):  # no terminal after all, or a closed one
        return
    interrupt.line_ended = True


def tell(line: str) -> None:
    """Writes ``line`` on standard error, or nowhere where there is none
    (``2>&-``: Python's ``sys.stderr`` is None, and ``print`` would write to
    standard output, which may be a pipe of results such as the labels'
    CSV) or it cannot be written: the exit code still tells."""
    if sys.stderr is None:
        return
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):  # a closed descriptor or stream
        pass


def plural(count: int, noun: str) -> str:
    """``"0 labels"``, ``"1 label"``, ``"2 labels"``: a count as a person says it."""
    return f"{count} {noun}{'s' * (count != 1)}"
