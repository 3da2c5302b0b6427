"""Bookkeeping of connected clients: consumer groups, producer groups and orderly-consumption locks."""
