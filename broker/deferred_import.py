"""Import a heavy library at its first use instead of at start (issue 15: start <= 0.5 s, idle memory <= 30 MB).

``defer("numpy")`` puts an empty module for ``numpy`` in ``sys.modules``: every later ``import numpy as np`` binds
that object without running numpy, and the first attribute looked up on it (``np.frombuffer``, a submodule's
import, ``from numpy import x``) runs numpy's ``__init__`` into that same object, which then becomes a plain
module (no cost per lookup afterwards). A broker whose start reads no consume queue and whose store is empty
never needs numpy before its ports open; the first message (or pull, or recovery of a non-empty store) pays
the import (~0.1 s of CPU) once.

Unlike ``importlib.util.LazyLoader`` in Python 3.11, the first use is safe from several threads: one thread runs
the import under the module's lock while the others wait for it, and the loading thread's own lookups during the
import (numpy's submodules import numpy) see the partly built module, as a normal import would. Only the boot
code (``broker.main``) calls ``defer``; modules that use the library still ``import`` it normally, and tests
that import them directly get the real module.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
import types
from dataclasses import dataclass, field

# looked up by the import system itself (``import numpy`` of a deferred module): answering them must not load it
_PLAIN = frozenset({"__spec__", "__name__", "__class__", "__dict__"})


@dataclass
class _Pending:
    """What a deferred module still needs to load itself: the real loader and who is running it."""

    spec: importlib.machinery.ModuleSpec
    lock: threading.RLock = field(default_factory=threading.RLock)
    loading: bool = False


class DeferredModule(types.ModuleType):
    """A module whose code has not run yet; the first lookup that needs its contents runs it (see the module)."""

    def __getattribute__(self, attr: str):
        if attr in _PLAIN:
            return types.ModuleType.__getattribute__(self, attr)
        pending: _Pending = types.ModuleType.__getattribute__(self, "__dict__")["__deferred__"]
        with pending.lock:
            if type(self) is DeferredModule and not pending.loading:
                pending.loading = True
                try:
                    pending.spec.loader.exec_module(self)
                finally:
                    pending.loading = False
                self.__class__ = types.ModuleType
                del self.__dict__["__deferred__"]
        return types.ModuleType.__getattribute__(self, attr)


def defer(name: str) -> bool:
    """Make the first use of top-level module ``name`` import it, not ``import name``. True if deferred; False if
    it is already imported or not installed (then nothing changes and a later ``import`` behaves as ever)."""
    if name in sys.modules or "." in name:
        return False
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        return False
    module = importlib.util.module_from_spec(spec)
    module.__dict__["__deferred__"] = _Pending(spec)
    module.__class__ = DeferredModule
    sys.modules[name] = module
    return True


def is_deferred(name: str) -> bool:
    """True while ``name`` is a deferred module whose code has not run (for tests and boot checks)."""
    return type(sys.modules.get(name)) is DeferredModule


def load(name: str) -> None:
    """Run deferred module ``name``'s code now, if it has not run (a warm-up thread's call: see ``broker.warmup``).
    Safe against a first use on another thread at the same time: both go through the module's lock."""
    module = sys.modules.get(name)
    if type(module) is DeferredModule:
        getattr(module, "__file__", None)


def deferred_names() -> list[str]:
    """The modules deferred and not loaded yet."""
    return [name for name, module in list(sys.modules.items()) if type(module) is DeferredModule]
