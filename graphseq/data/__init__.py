"""Dataset loaders. Each reads its raw files from the data root, fills gaps
from a read-only mirror of the same layout (offline clusters keep one), and
downloads only what neither has; files whose checksums are known are checked
wherever they were found before anything reads them (:mod:`.files`). The
sentence-polarity data also gives the cross-validation folds every polarity
model shares (:func:`.polarity.cv_folds`)."""
from .files import locate_raw_files  # noqa: F401
