"""``python -m graphseq``: the graphseq command."""
import sys

from .cli import main

sys.exit(main())
