"""Small compositions of graphseq layers: the networks the pipelines train."""
import contextlib
from typing import Iterator

import torch

from .gat import GAT  # noqa: F401
from .gcn import GCN  # noqa: F401


@contextlib.contextmanager
def evaluating(model: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """``model`` in eval mode inside the block, and back in the mode it had
    after it, whatever happens there (sampling, scoring, filling a mask)."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)
