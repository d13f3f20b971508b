"""Which device a run, a command or a model loaded for use computes on: the
one place where ``--device`` is read."""
from __future__ import annotations

import torch

from .checks import is_whole_number
from .errors import GraphseqError


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """``auto`` (CUDA if there is one), ``cpu``, ``cuda`` or ``cuda:N``."""
    name = str(device)
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cpu":
        return torch.device("cpu")
    if name == "cuda" or (name.startswith("cuda:") and is_whole_number(name[5:])):
        if not torch.cuda.is_available():
            raise GraphseqError(f"--device {name} was asked for, but this machine has no CUDA device "
                                "(or this torch build has no CUDA); use --device cpu or auto")
        index = int(name[5:]) if ":" in name else 0
        if index >= torch.cuda.device_count():
            raise GraphseqError(f"--device {name}: this machine has {torch.cuda.device_count()} CUDA "
                                f"device(s), cuda:0 to cuda:{torch.cuda.device_count() - 1}")
        return torch.device(name)
    raise GraphseqError(f"--device {name!r} is not supported; use auto, cpu, cuda or cuda:N")
