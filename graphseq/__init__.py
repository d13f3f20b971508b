"""graphseq: everything is message passing. Attention, recurrent networks and
few-shot learning as PyTorch Geometric layers, named pipelines that train
them, and an active-learning loop with a person in it.

``import graphseq.nn`` loads the layers alone; the runner and its stages
load when ``graphseq.run`` is first used.
"""
from .errors import GraphseqError
from .version import __version__

__all__ = ["GraphseqError", "run", "__version__"]


def __getattr__(name: str):
    if name == "run":
        from .runner import run

        return run
    raise AttributeError(f"module 'graphseq' has no attribute {name!r}")
