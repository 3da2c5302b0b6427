"""Operator tools: the ``mqadmin`` CLI."""
