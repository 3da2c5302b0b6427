"""The ``mqadmin`` console script's old address, kept for installs made before it moved to ``mqclient.mqadmin``.

An install writes its console scripts once (``mqadmin`` imports ``broker.tools.mqadmin:main``); until it is
reinstalled, that script runs this. New installs run ``mqclient.mqadmin:main``.
"""

import sys

from mqclient.mqadmin import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
