"""``python -m mqclient.mqadmin``: the ``mqadmin`` console script."""

import sys

from mqclient.mqadmin.cli import main

sys.exit(main())
