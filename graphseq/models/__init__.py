"""Small compositions of graphseq layers: the networks the pipelines train."""
from .gat import GAT, sparse_dropout  # noqa: F401
