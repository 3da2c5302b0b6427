"""Old addresses only: ``mqadmin`` moved to ``mqclient.mqadmin``, the test brokers to ``broker.testing``."""
