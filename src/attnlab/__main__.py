"""``python -m attnlab``: the same command line as the ``attnlab`` script."""

import sys

from attnlab.cli import main

sys.exit(main())
