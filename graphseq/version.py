"""graphseq's version: the one place it is written (the package's metadata and
every run's ``config.toml`` read it here)."""
__version__ = "0.1.0"
