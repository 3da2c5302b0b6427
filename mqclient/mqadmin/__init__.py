"""``mqadmin``: upstream's admin commands (same names and option letters) plus fault injection.

``mqadmin <command> -n host:port[;host:port] [options] [--json] [--ak KEY --sk SECRET]``; the name server
also comes from ``NAMESRV_ADDR``. Each command sends the requests upstream's tool sends (see ``AdminClient``)
and prints a readable table, or with ``--json`` the data as JSON. With ``--ak``/``--sk`` (or
``ROCKETMQ_ACCESS_KEY``/``ROCKETMQ_SECRET_KEY``) every request is signed for a broker with ``aclEnable=true``;
admin commands then need an admin account. Exit status: 0 done, 1 a request failed or was
refused (the reason goes to stderr), 2 bad usage. ``python -m mqclient.mqadmin`` is the same command.
"""

from mqclient.mqadmin.cli import main

__all__ = ["main"]
