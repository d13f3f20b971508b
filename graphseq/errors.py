"""The one exception graphseq raises for problems in what a user asked for
(an unknown pipeline, a bad override, a missing data file, a bad tensor
shape). The CLI prints its message and exits with code 2, without a traceback.
"""


class GraphseqError(Exception):
    """A problem with the user's input, with a message that says how to fix it."""
