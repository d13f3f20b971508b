"""The stage registry: a stage is a plain function ``fn(ctx, *, key=default,
...)`` registered under a name. Its keyword parameters are the keys a
pipeline's TOML section may set, so the function's signature is the schema.
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, Dict

from ..errors import GraphseqError

STAGES: Dict[str, Callable[..., Any]] = {}


def stage(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Registers ``fn`` as the stage ``name``; a second stage of the same name is refused."""

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        if name in STAGES:
            raise ValueError(f"stage {name!r} is registered twice "
                             f"({STAGES[name].__module__} and {fn.__module__})")
        STAGES[name] = fn
        return fn

    return register


def get_stage(name: str) -> Callable[..., Any]:
    if name not in STAGES:
        raise GraphseqError(f"unknown stage {name!r}; known stages: {', '.join(sorted(STAGES))}")
    return STAGES[name]


def stage_params(fn: Callable[..., Any]) -> Dict[str, Any]:
    """The keys a stage accepts and their defaults (``inspect.Parameter.empty`` if required)."""
    params = list(inspect.signature(fn).parameters.values())[1:]  # the first is ctx
    return {p.name: p.default for p in params
            if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)}
