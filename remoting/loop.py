"""Choose the event loop: uvloop when importable, asyncio's default otherwise."""

from __future__ import annotations

import asyncio


def uvloop_available() -> bool:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return False
    return True


def install() -> bool:
    """Make uvloop the loop policy if it is installed; True if it was."""
    try:
        import uvloop
    except ImportError:
        return False
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return True


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A fresh loop of the best available kind, without touching the global policy."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()
