"""Transactional messages: half messages, END_TRANSACTION, and check-backs to producers."""
