"""A request header decoded straight from the values of a learned extFields layout: what the send and pull
decoders (``remoting.send_header``, ``remoting.pull_header``) share.

Each of them compiles one straight-line function per layout's keys (the keys tuple a learned layout holds, so one
object per layout) and keeps it here; a request whose layout was seen gets its header from one dict lookup and
one call. The generated code checks the digits of every number field at once; ``number_lines`` writes that part.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

H = TypeVar("H")

#: as many as the layouts (remoting.command._LAYOUTS_MAX)
DECODERS_MAX = 256


class LayoutDecoders(Generic[H]):
    """The decoders compiled by ``compile`` for the layouts seen so far, by the identity of their keys tuple."""

    __slots__ = ("_compile", "_decoders", "_last_keys", "_last")

    def __init__(self, compile_fn: Callable[[tuple[str, ...]], Callable[[tuple[str, ...]], H | None] | None]) -> None:
        self._compile = compile_fn
        # id(keys) → (keys, decoder or None: the keys are not this header's); the keys are kept in the entry, so
        # their id cannot be reused while it is here
        self._decoders: dict[int, tuple[tuple[str, ...], Callable[[tuple[str, ...]], H | None] | None]] = {}
        # the last keys decoded and their decoder: a client sends one layout request after request (one identity
        # test instead of the table's lookup and checks); None until a decoder is found for them
        self._last_keys: tuple[str, ...] | None = None
        self._last: Callable[[tuple[str, ...]], H | None] | None = None

    def decode(self, keys: tuple[str, ...], values: tuple[str, ...]) -> H | None:
        """The header whose extFields are ``keys`` → ``values``, or None when the fast decode does not apply."""
        if keys is self._last_keys:
            return self._last(values)  # type: ignore[misc]
        entry = self._decoders.get(id(keys))
        if entry is None or entry[0] is not keys:
            if len(self._decoders) >= DECODERS_MAX:
                self._decoders.clear()
            entry = self._decoders[id(keys)] = (keys, self._compile(keys))
        decoder = entry[1]
        if decoder is None:
            return None
        self._last_keys = keys  # (kept alive by its entry above, or by being the last, so never a reused id)
        self._last = decoder
        return decoder(values)


def number_lines(numbers: Sequence[str]) -> list[str]:
    """Generated lines that turn the locals ``numbers`` (str values) into ints, or return None when one is not
    plain ASCII digits: one ``isdigit`` over all of them, then the conversion (an empty value adds no digit and
    fails ``int()``)."""
    names = ", ".join(numbers)
    return [
        f"    digits = {' + '.join(numbers)}",
        "    if not (digits.isdigit() and digits.isascii()): return None",  # (a layout's values are ASCII: cheap)
        "    try:",
        f"        {names}, = map(int, ({names},))",  # (one call: fewer bytecodes than one int() a field)
        "    except ValueError:",
        "        return None",
    ]


def compile_decoder(lines: list[str], namespace: dict[str, object]) -> Callable[[tuple[str, ...]], H | None]:
    """The function ``decode`` defined by ``lines`` (generated from fixed header names and a layout's checked
    keys, never from a peer's text), with ``namespace`` as its globals."""
    exec("\n".join(lines), namespace)  # noqa: S102 - see the docstring
    return namespace["decode"]  # type: ignore[return-value]
