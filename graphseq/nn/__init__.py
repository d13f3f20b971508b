"""The MessagePassing layers users import."""
from .attention import AttentionConv, GATConv

__all__ = ["AttentionConv", "GATConv"]
