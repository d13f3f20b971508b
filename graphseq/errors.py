"""The one exception graphseq raises for problems in what a user asked for
(an unknown pipeline, a bad override, a missing data file, a bad tensor
shape). The CLI prints its message and exits with code 2, without a traceback.

Also how the word on Ctrl-C starts a line of its own, which the runner and
the CLI share (this module imports nothing, as the CLI's top must not).
"""


class GraphseqError(Exception):
    """A problem with the user's input, with a message that says how to fix it."""


def end_interrupted_line(interrupt: KeyboardInterrupt, stream) -> None:
    """Ends the line on which a terminal echoed Ctrl-C's "^C", where the
    cursor was and with no line end, so that what is said of the interrupt
    next starts a line of its own rather than "^Cinterrupted"; once an
    interrupt, which remembers it (``interrupt.line_ended``) for whoever
    speaks after (the command's "graphseq: interrupted"). A stream that is
    no terminal (a file, a pipe) saw no ^C and gets nothing."""
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
