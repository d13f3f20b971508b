"""gat-cora-neighbor: the gat-cora model trained on sampled neighbourhoods
of the real Cora, evaluated layer by layer (the same numbers as a full pass)."""
import pytest
import torch

from graphseq import GraphseqError, run
from graphseq.data.planetoid import load_planetoid
from graphseq.models import GAT
from graphseq.stages.node_training import Sampling, accuracy, fit_node_classifier


def test_gat_cora_neighbor_runs_a_few_epochs(tmp_path, data_root, mirror):
    figures = run("gat-cora-neighbor", overrides={"train.max_epochs": 3}, out=tmp_path,
                  data_root=data_root, data_mirror=mirror, quiet=True)["runs"][0]
    assert figures["epochs"] == 3 and 0.0 <= figures["test_accuracy"] <= 1.0
    assert (tmp_path / "best.pt").is_file()


@pytest.mark.slow
def test_every_inference_scores_a_trained_model_alike(data_root, mirror):
    data = load_planetoid("Cora", data_root, mirror)
    torch.manual_seed(0)
    model = GAT(data.num_features, 7)
    sampling = Sampling("neighbor", (10, 10), batch_size=64, inference="layerwise")
    fit_node_classifier(model, data, lr=0.005, weight_decay=5e-4, max_epochs=20, sampling=sampling)
    full = accuracy(model, data, data.val_mask)
    assert accuracy(model, data, data.val_mask, sampling) == full  # Layer-wise is exact.
    everyone = Sampling("neighbor", (-1, -1), inference="sampled")
    assert accuracy(model, data, data.val_mask, everyone) == pytest.approx(full, abs=1e-9)
    sampled = accuracy(model, data, data.val_mask, Sampling("neighbor", (10, 10), inference="sampled"))
    assert abs(sampled - full) < 0.05
    assert full > 0.6  # Twenty epochs of sampled mini-batches learn Cora.


@pytest.mark.parametrize("fanouts", [[1.5, 2], [True, 2], [10, -2]])
def test_a_fanout_that_is_no_whole_number_from_minus_one_is_refused_before_writing(tmp_path, data_root, mirror,
                                                                                  fanouts):
    with pytest.raises(GraphseqError, match=r"train.num_neighbors = .* each item a whole number >= -1"):
        run("gat-cora-neighbor", overrides={"train.num_neighbors": fanouts, "train.max_epochs": 1},
            out=tmp_path / "run", data_root=data_root, data_mirror=mirror, quiet=True)
    assert not (tmp_path / "run").exists()
