"""The MessagePassing layers users import."""
from .attention import AttentionConv, GATConv, SelfAttentionConv
from .recurrent import (ChainGRU, ChainLSTM, ChainONLSTM, ChainRecurrence, ChainRNN, ChainSchedule,
                        chain_schedule)
from .transformer import TransformerEncoderLayer

__all__ = ["AttentionConv", "GATConv", "SelfAttentionConv", "ChainRecurrence", "ChainRNN", "ChainLSTM", "ChainGRU", "ChainONLSTM",
           "ChainSchedule", "chain_schedule", "TransformerEncoderLayer"]
