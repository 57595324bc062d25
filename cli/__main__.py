"""``python -m hqflow.cli``."""
import sys

from . import main

sys.exit(main())
