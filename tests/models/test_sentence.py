"""The sentence classifier: one row of logits per sentence whatever the pool,
empty sentences included."""
import pytest
import torch

from graphseq import graphs
from graphseq.errors import GraphseqError
from graphseq.models.sentence import POOLS, SentenceClassifier

TOKENS = torch.tensor([1, 2, 3, 4, 5])


def classifier(pool):
    torch.manual_seed(0)
    return SentenceClassifier(10, num_classes=2, embedding_dim=4, hidden_size=3, pool=pool).eval()


@pytest.mark.parametrize("pool", POOLS)
def test_every_pool_gives_num_graphs_rows_and_an_empty_sentence_the_bias(pool):
    model = classifier(pool)
    alone = model(TOKENS[3:], graphs.chain([2]), graphs.lengths_to_batch([2]))
    for lengths in ([3, 0, 2], [3, 2, 0]):
        out = model(TOKENS, graphs.chain(lengths), graphs.lengths_to_batch(lengths), num_graphs=3)
        assert out.shape == (3, 2)
        empty = lengths.index(0)
        torch.testing.assert_close(out[empty], model.classifier.bias.detach())
        torch.testing.assert_close(out[[i for i in range(3) if lengths[i] == 2][0]], alone[0])
    empty_batch = model(torch.zeros(0, dtype=torch.long), torch.zeros(2, 0, dtype=torch.long),
                        torch.zeros(0, dtype=torch.long))
    assert empty_batch.shape == (0, 2)


def test_final_pool_refuses_fewer_graphs_than_the_batch_holds():
    model = classifier("final")
    with pytest.raises(GraphseqError, match="batch holds 2 sentences, but num_graphs is 1"):
        model(TOKENS, graphs.chain([3, 2]), graphs.lengths_to_batch([3, 2]), num_graphs=1)
