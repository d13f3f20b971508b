"""A smoke run of transformer-cora on the real Cora graph: all three
variants train for two epochs and report their figures."""
import pytest

from graphseq import GraphseqError, run


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
    # GAT alone has its own widths: nothing to divide.
    run("transformer-cora", overrides={"compare.heads": 3, "compare.variants": ["gat"], "compare.max_epochs": 1},
        out=tmp_path / "gat", data_root=data_root, data_mirror=mirror, quiet=True)


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
