"""``python -m healthd``: the same entry point as the ``healthd`` script."""

import sys

from healthd.cli.main import main

sys.exit(main())
