"""Dataset loaders. Each reads its raw files from the data root, fills gaps
from a read-only mirror of the same layout (offline clusters keep one), and
downloads only what neither has."""
from .files import locate_raw_files  # noqa: F401
