"""A smoke run of transformer-cora on the real Cora graph: all three
variants train for two epochs and report their figures."""
import re

import pytest

from graphseq import GraphseqError, run
from graphseq.runner.config import read_config


@pytest.mark.slow
def test_transformer_cora_runs_all_three_variants(tmp_path, data_root, mirror):
    small = {"compare.max_epochs": 2, "compare.hidden_channels": 16, "compare.heads": 2,
             "compare.layers": 1, "compare.dim_feedforward": 16, "compare.encoding_dim": 4}
    summary = run("transformer-cora", overrides=small, out=tmp_path, data_root=data_root,
                  data_mirror=mirror, quiet=True)
    figures = summary["runs"][0]
    for variant in ("neighbours", "full", "gat"):
        assert figures[f"epochs_{variant}"] == 2
        accuracy = figures[f"test_accuracy_{variant}"]  # a fraction of Cora's 1,000 test nodes
        assert accuracy * 1000 == pytest.approx(round(accuracy * 1000), abs=1e-3)
        assert (tmp_path / f"best-{variant}.pt").is_file()


def test_unknown_variant_is_named(tmp_path, data_root, mirror):
    with pytest.raises(GraphseqError, match="compare.variants = \\['everyone'\\] is not allowed"):
        run("transformer-cora", overrides={"compare.variants": ["everyone"]}, out=tmp_path,
            data_root=data_root, data_mirror=mirror, quiet=True)


def test_heads_that_do_not_divide_the_width_are_refused_before_writing(tmp_path, data_root, mirror):
    with pytest.raises(GraphseqError, match="hidden_channels = 64 must be divisible by heads = 3"):
        run("transformer-cora", overrides={"compare.heads": 3}, out=tmp_path / "run",
            data_root=data_root, data_mirror=mirror, quiet=True)
    assert not (tmp_path / "run").exists()


def test_gat_alone_lets_the_files_transformer_settings_be(tmp_path, data_root, mirror):
    summary = run("transformer-cora", overrides={"compare.variants": ["gat"], "compare.max_epochs": 1},
                  out=tmp_path, data_root=data_root, data_mirror=mirror, quiet=True)
    assert summary["runs"][0]["epochs_gat"] == 1
    recorded = read_config(tmp_path / "config.toml")["compare"]
    assert "heads" not in recorded and "dropout" not in recorded and recorded["lr"] == 0.005


@pytest.mark.parametrize("overrides, message", [
    # GAT is gat-cora's model: the Transformer's settings, valid or not, were ignored without a word.
    ({"compare.variants": ["gat"], "compare.heads": 7},
     "compare.heads has no use when compare.variants = ['gat']: it applies only when compare.variants is "
     "a list with \"neighbours\" or \"full\" in it; leave it out"),
    ({"compare.variants": ["gat"], "compare.dropout": 0.0}, "compare.dropout has no use when compare.variants"),
    ({"compare.positional_encoding": "none", "compare.encoding_dim": 16},
     "compare.encoding_dim has no use when compare.positional_encoding = 'none': it applies only with "
     "'random_walk' or 'laplacian'"),
    ({"compare.variants": ["gat", "gat"]}, "compare.variants = ['gat', 'gat'] is not allowed: it must be a "
                                           "non-empty list of distinct items"),
])
def test_a_setting_no_variant_uses_or_a_repeated_variant_is_refused(overrides, message, tmp_path, data_root,
                                                                     mirror):
    with pytest.raises(GraphseqError, match=re.escape(message)):
        run("transformer-cora", overrides=overrides, out=tmp_path / "run", data_root=data_root,
            data_mirror=mirror, quiet=True)
    assert not (tmp_path / "run").exists()


def test_a_random_walk_longer_than_the_maximum_is_refused_before_writing(tmp_path, data_root, mirror):
    with pytest.raises(GraphseqError, match="encoding_dim = 1000000000 is too long a random walk: "
                                            "it must be at most 64"):
        run("transformer-cora", overrides={"compare.encoding_dim": 1_000_000_000, "compare.max_epochs": 1},
            out=tmp_path / "run", data_root=data_root, data_mirror=mirror, quiet=True)
    assert not (tmp_path / "run").exists()


def test_more_laplacian_eigenvectors_than_the_graph_has_are_refused(tmp_path, data_root, mirror):
    laplacian = {"compare.variants": ["neighbours"], "compare.max_epochs": 1,
                 "compare.positional_encoding": "laplacian", "compare.encoding_dim": 2707}
    # Cora's 2,708 nodes give scipy's eigsh at most 2,706 non-trivial eigenvectors.
    with pytest.raises(GraphseqError, match="encoding_dim = 2707 must be at most 2706 with "
                                            "positional_encoding = \"laplacian\" on a graph of 2708 nodes"):
        run("transformer-cora", overrides=laplacian, out=tmp_path, data_root=data_root, data_mirror=mirror,
            quiet=True)
    assert not list(tmp_path.glob("best-*.pt"))
