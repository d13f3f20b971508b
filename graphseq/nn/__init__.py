"""The MessagePassing layers users import."""
from .attention import AttentionConv
from .chain_schedule import ChainSchedule, chain_schedule
from .gat_conv import GATConv
from .metric_attention import MetricAttentionConv
from .recurrent import ChainRecurrence
from .recurrent_cells import ChainGRU, ChainLSTM, ChainONLSTM, ChainRNN
from .self_attention import SelfAttentionConv
from .transformer import TransformerEncoderLayer

__all__ = ["AttentionConv", "GATConv", "SelfAttentionConv", "MetricAttentionConv", "ChainRecurrence", "ChainRNN", "ChainLSTM", "ChainGRU", "ChainONLSTM",
           "ChainSchedule", "chain_schedule", "TransformerEncoderLayer"]
