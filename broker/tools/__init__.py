"""Operator tools: the ``mqadmin`` CLI, its admin client, and an embedded broker for tests."""
