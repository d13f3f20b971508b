"""graphseq: everything is message passing. Attention, recurrent networks and
few-shot learning as PyTorch Geometric layers, named pipelines that train
them, and an active-learning loop with a person in it.
"""
from .errors import GraphseqError
from .pipeline import run

__version__ = "0.1.0"
__all__ = ["GraphseqError", "run", "__version__"]
