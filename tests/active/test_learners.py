import pytest
import torch
from torch_geometric.data import Data

from graphseq.active.learners import GCNLearner
from graphseq.errors import GraphseqError


def test_an_empty_test_set_is_refused_when_the_learner_is_made():
    data = Data(x=torch.rand(6, 3), edge_index=torch.tensor([[0, 1], [1, 0]]), y=torch.arange(6) % 2,
                test_mask=torch.zeros(6, dtype=torch.bool), num_nodes=6)
    with pytest.raises(GraphseqError, match="GCNLearner: the test_mask selects no nodes"):
        GCNLearner(data, 2, torch.device("cpu"))
