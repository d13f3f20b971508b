"""The one exception graphseq raises for problems in what a user asked for
(an unknown pipeline, a bad override, a missing data file, a bad tensor
shape). The CLI prints its message and exits with code 2, without a traceback.

Also how graphseq's last words reach a person, which the runner, the
launcher of several processes and the CLI share: on standard error
(:func:`tell`), on a line of its own after Ctrl-C's "^C"
(:func:`end_interrupted_line`), with counts spelled as said
(:func:`plural`), and with progress bars only where a person watches
(:func:`draw_bars`, which every bar of graphseq asks). This module imports
no torch, as the CLI's top must not.
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
    """``"0 labels"``, ``"1 label"``, ``"1,000 labels"``: a count as a person
    says it, its thousands apart as a person reads them."""
    return f"{count:,} {noun}{'s' * (count != 1)}"


def draw_bars(quiet: bool = False) -> bool:
    """Whether a progress bar is drawn on standard error now: not in a
    ``quiet`` run, and only where a person watches it, a terminal or a
    Jupyter notebook. Anywhere else (``2> run.log``, nohup, Slurm, a pipe)
    each of a bar's carriage-return redraws would stay in the file as a line
    of its own; the log lines that a drawn bar routes around reach it as
    they are. A notebook's standard error is no terminal, yet it shows a bar
    in place. Where there is no standard error (``2>&-``) nothing is drawn.
    In several processes the caller asks for rank 0 alone."""
    stream = sys.stderr
    if quiet or stream is None:
        return False
    try:
        if stream.isatty():
            return True
    except (AttributeError, OSError, ValueError):  # no stream after all, or a closed one
        return False
    return _in_a_notebook(stream)


def _in_a_notebook(stream) -> bool:
    """Whether ``stream`` is the output of a Jupyter kernel (ipykernel's ZMQ
    shell, Colab's among them), not one a notebook redirected (to a file, or
    to the log of a quiet run). IPython is asked only when it is imported
    already: a plain command has no kernel, and importing IPython to be told
    so would cost a second of start-up."""
    ipython = sys.modules.get("IPython")
    shell = getattr(ipython, "get_ipython", lambda: None)()
    return (any(kind.__name__ == "ZMQInteractiveShell" for kind in type(shell).__mro__)
            and type(stream).__module__.startswith("ipykernel."))
