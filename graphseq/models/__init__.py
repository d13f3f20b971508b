"""Small compositions of graphseq layers: the networks the pipelines train."""
from .gat import GAT  # noqa: F401
from .gcn import GCN  # noqa: F401
