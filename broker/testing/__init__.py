"""Brokers for tests: in-process (``embedded``), as a subprocess (``process``), and the pytest plugin over both.

- ``broker.testing.embedded.EmbeddedBroker``: broker + name server on a thread of this process, in ~0.1 s.
- ``broker.testing.process.BrokerProcess``: ``python -m broker.main`` as a child, for what only a process
  shows (exit codes, SIGTERM, restarts on the same store, stdout, real clients in other processes).
- ``broker.testing.pytest_plugin``: the ``rocketmq_broker`` fixtures (entry point ``pytest11``).
- ``broker.testing.ports.free_port``: the one way tests and benchmarks pick a loopback port.

Nothing is imported here, so that loading the plugin costs a test run nothing until a broker is asked for.
"""
