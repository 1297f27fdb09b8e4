"""``python -m attnlab``: the same command line as the ``attnlab`` script."""

import sys

from attnlab._interrupt import quiet_start

quiet_start()  # before the command line is imported: Ctrl-C from here on is one line, status 130

from attnlab.cli import main  # noqa: E402

sys.exit(main())
