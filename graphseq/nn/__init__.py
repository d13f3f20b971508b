"""The MessagePassing layers users import."""
from .attention import AttentionConv, GATConv, SelfAttentionConv
from .metric_attention import MetricAttentionConv
from .recurrent import (ChainGRU, ChainLSTM, ChainONLSTM, ChainRecurrence, ChainRNN, ChainSchedule,
                        chain_schedule)
from .transformer import TransformerEncoderLayer

__all__ = ["AttentionConv", "GATConv", "SelfAttentionConv", "MetricAttentionConv", "ChainRecurrence", "ChainRNN", "ChainLSTM", "ChainGRU", "ChainONLSTM",
           "ChainSchedule", "chain_schedule", "TransformerEncoderLayer"]
