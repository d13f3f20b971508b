"""Seeding: one call that seeds Python's, NumPy's and torch's random number
generators, so that a run repeats from its seed. Stages that restart a model
from the run's seed call it too."""
from __future__ import annotations

import hashlib
import random

import numpy as np
import torch

# Seeds are 32-bit so that NumPy takes them as they are and ``seed + k``
# still fits a torch generator.
MAX_SEED = 2**32 - 1


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def keyed_generator(*key: object) -> torch.Generator:
    """A torch generator seeded from ``key`` (a seed and what it draws for,
    ``(seed, strategy, answers)``): the same draws for the same key, whatever
    was drawn before it, so a run interrupted and resumed draws what an
    uninterrupted one does."""
    digest = hashlib.sha256("/".join(map(str, key)).encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") >> 1)
