"""The MessagePassing layers users import."""
from .attention import AttentionConv, GATConv
from .recurrent import ChainGRU, ChainLSTM, ChainONLSTM, ChainRecurrence, ChainRNN

__all__ = ["AttentionConv", "GATConv", "ChainRecurrence", "ChainRNN", "ChainLSTM", "ChainGRU", "ChainONLSTM"]
