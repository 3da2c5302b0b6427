"""The header codec: ``@header`` turns a dataclass of extFields into a decoder and an encoder compiled from it.

Field names are snake_case; the wire name is ``metadata["wire"]`` or the camelCase of the field
name. Fields without a default are required (J ``@CFNotNull``). Types follow J: ``int`` is a Java
``Integer`` (32-bit), ``Long`` a Java ``Long`` (64-bit), ``bool`` a ``Boolean`` (``"true"`` in any
case is true, anything else false — so C's ``"1"`` is false), ``str`` a ``String``.

``decode_header(cls, ext)`` / ``encode_header(h)`` work for every declared header. The per-class field
plan is made when the class is declared (``@header``); the decoder/encoder compiled from it on first
use, and stored on the class. The declarations themselves live in ``remoting.headers``.
"""

from __future__ import annotations

import dataclasses
import operator
import re
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, TypeVar

from remoting.errors import HeaderError

H = TypeVar("H")

Long = Annotated[int, "java.lang.Long"]
"""A Java ``Long`` field (64-bit); a plain ``int`` annotation is a Java ``Integer``."""

_INT_RANGE = (-(2**31), 2**31 - 1)
_LONG_RANGE = (-(2**63), 2**63 - 1)
_SIGNED_DIGITS = re.compile(r"[+-]?[0-9]+")

_KIND_STR = 0
_KIND_INT = 1
_KIND_LONG = 2
_KIND_BOOL = 3
_KIND_NAMES = {_KIND_INT: "an integer", _KIND_LONG: "a long"}

_PLAN_ATTR = "__header_plan__"
_DECODE_ATTR = "__header_decode__"
_ENCODE_ATTR = "__header_encode__"


def wire(name: str, **kwargs: Any) -> Any:
    """A field whose wire name is not the camelCase of its Python name."""
    return field(metadata={"wire": name}, **kwargs)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _kind_of(tp: Any) -> int:
    """Map a resolved annotation to a wire kind; Optional[...] unwraps to its inner type."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(inner) != 1:
            raise TypeError(f"unsupported header field type {tp!r}")
        return _kind_of(inner[0])
    if origin is Annotated:
        base, *extra = typing.get_args(tp)
        if base is int and "java.lang.Long" in extra:
            return _KIND_LONG
        return _kind_of(base)
    if tp is str:
        return _KIND_STR
    if tp is bool:
        return _KIND_BOOL
    if tp is int:
        return _KIND_INT
    raise TypeError(f"unsupported header field type {tp!r}")


@dataclass(frozen=True, slots=True)
class _FieldPlan:
    attr: str
    wire: str
    kind: int
    required: bool


def _build_plan(cls: type) -> tuple[_FieldPlan, ...]:
    hints = typing.get_type_hints(cls, include_extras=True)
    plan = []
    for f in dataclasses.fields(cls):
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if not required and f.default is dataclasses.MISSING:  # checked here: the decoder compiles later
            raise TypeError(f"{cls.__name__}.{f.name}: optional header fields need a plain default")
        plan.append(_FieldPlan(f.name, f.metadata.get("wire", _camel(f.name)), _kind_of(hints[f.name]), required))
    return tuple(plan)


def header(cls: type[H]) -> type[H]:
    """Declare a header: a slotted dataclass plus its decoder and encoder, compiled once, on first use (a
    broker uses a few dozen of the declared headers; compiling all of them cost a boot ~20 ms, issue 15)."""
    if not cls.__doc__:  # else dataclass makes one from inspect.signature, ~0.1 ms a class
        cls.__doc__ = f"{cls.__name__}: a RocketMQ custom header (extFields)"
    # __repr__ and __eq__ shared by all headers instead of compiled per class: of the ~0.5 ms a header class
    # cost at import (50 classes, all imported by a broker's start), the three compiled methods were most
    dc = dataclass(slots=True, repr=False, eq=False)(cls)
    dc.__repr__ = _header_repr
    dc.__eq__ = _header_eq
    dc.__hash__ = None  # as a dataclass with eq: mutable, so not hashable
    plan = _build_plan(dc)
    setattr(dc, _PLAN_ATTR, plan)
    setattr(dc, _DECODE_ATTR, _first_use(dc, _DECODE_ATTR, _compile_fast_decoder))
    setattr(dc, _ENCODE_ATTR, _first_use(dc, _ENCODE_ATTR, _compile_encoder))
    return dc


def _header_repr(self: Any) -> str:
    """What dataclass's generated ``__repr__`` returns: ``Name(field=value, ...)``."""
    cls = type(self)
    return f"{cls.__qualname__}({', '.join(f'{name}={getattr(self, name)!r}' for name in cls.__match_args__)})"


def _header_eq(self: Any, other: Any) -> Any:
    """What dataclass's generated ``__eq__`` does: equal when of the same class with equal fields."""
    if other.__class__ is not self.__class__:
        return NotImplemented
    return all(getattr(self, name) == getattr(other, name) for name in self.__match_args__)


def _first_use(cls: type, attr: str, compile_fn: Any) -> Any:
    """A stand-in that compiles the real function, puts it on the class in its place, and calls it."""

    def compile_and_call(arg: Any) -> Any:
        fn = compile_fn(cls, getattr(cls, _PLAN_ATTR))
        setattr(cls, attr, fn)
        return fn(arg)

    return compile_and_call


def _missing(cls_name: str, wire_name: str) -> None:
    raise HeaderError(f"{cls_name}: the header field '{wire_name}' is missing")


def _as_str(value: Any) -> str:
    # RemotingCommand.decode already normalises extFields; this covers dicts built by hand.
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _parse_int(cls_name: str, wire_name: str, value: str, kind: int) -> int:
    # Java parseInt/parseLong: optional sign, ASCII digits, nothing else (no spaces, no '_').
    if not (value.isascii() and _SIGNED_DIGITS.fullmatch(value)):
        raise HeaderError(f"{cls_name}: the header field '{wire_name}' is not {_KIND_NAMES[kind]}: {value!r}")
    # Java accepts any number of leading zeros; strip them first (and bound the length) so a
    # hostile 5000-digit value is "out of range", not Python's int-string limit ValueError.
    magnitude = value.lstrip("+-").lstrip("0") or "0"
    lo, hi = _INT_RANGE if kind == _KIND_INT else _LONG_RANGE
    number = int(magnitude) if len(magnitude) <= 20 else hi + 1
    if value[0] == "-":
        number = -number
    if not lo <= number <= hi:
        raise HeaderError(
            f"{cls_name}: the header field '{wire_name}' is out of range for {_KIND_NAMES[kind]}: {value!r}"
        )
    return number


# Digit strings shorter than this cannot overflow the Java type, so int() alone is exact.
_SAFE_DIGITS = {_KIND_INT: 10, _KIND_LONG: 19}


def _compile_decoder(cls: type, plan: tuple[_FieldPlan, ...], name: str | None = None) -> Any:
    """Straight-line code per class (like dataclasses' own __init__): decode is the hot path of
    every request, and a generic loop over the plan costs several times more. ``name`` is the header
    named in error messages (default: the class's)."""
    name = name or cls.__name__
    ns: dict[str, Any] = {"_cls": cls, "_missing": _missing, "_as_str": _as_str, "_parse_int": _parse_int}
    lines = ["def decode(ext):", "    get = ext.get"]
    for i, fp in enumerate(plan):
        v = f"v{i}"
        lines.append(f"    {v} = get({fp.wire!r})")
        if fp.required:
            lines.append(f"    if {v} is None: _missing({name!r}, {fp.wire!r})")
            ind = "    "
        else:
            f = next(f for f in dataclasses.fields(cls) if f.name == fp.attr)
            if f.default is dataclasses.MISSING:
                raise TypeError(f"{name}.{fp.attr}: optional header fields need a plain default")
            ns[f"d{i}"] = f.default
            lines.append(f"    if {v} is None: {v} = d{i}")
            lines.append("    else:")
            ind = "        "
        lines.append(f"{ind}if type({v}) is not str: {v} = _as_str({v})")
        if fp.kind == _KIND_BOOL:
            lines.append(f"{ind}{v} = {v}.lower() == 'true'")
        elif fp.kind in (_KIND_INT, _KIND_LONG):
            lines.append(
                f"{ind}{v} = int({v}) if {v}.isdigit() and {v}.isascii() and len({v}) < "
                f"{_SAFE_DIGITS[fp.kind]} else _parse_int({name!r}, {fp.wire!r}, {v}, {fp.kind})"
            )
    lines.append(f"    return _cls({', '.join(f'v{i}' for i in range(len(plan)))})")
    exec("\n".join(lines), ns)  # noqa: S102 - generated from our own declarations only
    return ns["decode"]


_INT_MAX = _INT_RANGE[1]
_LONG_MAX = _LONG_RANGE[1]


def _compile_fast_decoder(cls: type, plan: tuple[_FieldPlan, ...], name: str | None = None) -> Any:
    """The decoder of ``_compile_decoder`` behind a fast path for the common request (every field read a str, the
    required fields present, the numbers plain non-negative ASCII digits within range): the required fields
    fetched with one ``itemgetter`` call, each field that is not a number checked ``type(v) is str``, the digits
    of all number fields checked with one ``isdigit`` on their concatenation (which fails for a value that is not
    a str), their range with one ``max``. (Only the fields read are checked, not every value of the map: the
    checked decoder ignores the others too, and a C pass over the map's 14 values of a send cost 0.5 µs.) Anything else takes the field-by-field decoder, which gives
    the same header or raises the same error: the fast path only ever returns what that one would."""
    slow = _compile_decoder(cls, plan, name)
    defaults = {f.name: f.default for f in dataclasses.fields(cls)}
    if any(
        fp.kind in (_KIND_INT, _KIND_LONG)
        and not fp.required
        and defaults[fp.attr] is not None
        and type(defaults[fp.attr]) is not int
        for fp in plan
    ):
        return slow
    required = [(i, fp) for i, fp in enumerate(plan) if fp.required]
    ns: dict[str, Any] = {"_cls": cls, "_slow": slow, "max": max, "int": int}
    lines = ["def decode(ext):"]
    if required:
        ns["_required"] = operator.itemgetter(*(fp.wire for _, fp in required))
        targets = ", ".join(f"v{i}" for i, _ in required)  # (one name: itemgetter returns the value itself)
        lines += [
            "    try:",
            f"        {targets} = _required(ext)",
            "    except KeyError:",
            "        return _slow(ext)",
        ]
    if len(required) < len(plan):
        lines.append("    get = ext.get")
    digits: list[str] = []
    ints: list[str] = []
    longs: list[str] = []
    converts: list[str] = []
    bools: list[str] = []
    texts: list[str] = []  # the str checks of the fields that are not numbers (numbers: the digits' concatenation)
    for i, fp in enumerate(plan):
        v = f"v{i}"
        number = fp.kind in (_KIND_INT, _KIND_LONG)
        if not fp.required:
            ns[f"d{i}"] = defaults[fp.attr]
            lines.append(
                f"    {v} = get({fp.wire!r})"
                if number or fp.kind == _KIND_BOOL
                else f"    {v} = get({fp.wire!r}, d{i})"
            )
        if not number:
            texts.append(
                f"type({v}) is str"
                if fp.required
                else (
                    f"({v} is None or type({v}) is str)"
                    if fp.kind == _KIND_BOOL
                    else f"({v} is d{i} or type({v}) is str)"
                )
            )
        if number:
            digits.append(v if fp.required else f"('' if {v} is None else {v})")
            (ints if fp.kind == _KIND_INT else longs).append(v if fp.required else f"({v} or 0)")
            converts.append(
                f"        {v} = int({v})" if fp.required else f"        {v} = d{i} if {v} is None else int({v})"
            )
        elif fp.kind == _KIND_BOOL:
            bools.append(
                f"    {v} = {v}.lower() == 'true'"
                if fp.required
                else f"    {v} = d{i} if {v} is None else {v}.lower() == 'true'"
            )
    if texts:
        lines.append(f"    if not ({' and '.join(texts)}): return _slow(ext)")
    if digits:
        # (a value that is not a str fails the concatenation, or, all of them ints, the type check)
        lines += [
            "    try:",
            f"        digits = {' + '.join(digits)}",
            "    except TypeError:",
            "        return _slow(ext)",
        ]
        lines.append("    if not (type(digits) is str and digits.isdigit() and digits.isascii()): return _slow(ext)")
        lines += ["    try:", *converts, "    except ValueError:", "        return _slow(ext)"]
        # (an empty value adds no digit and fails int(); a huge one converts and fails the range)
        checks = []
        if ints:
            checks.append(f"max({', '.join(ints)}, 0) > {_INT_MAX}")
        if longs:
            checks.append(f"max({', '.join(longs)}, 0) > {_LONG_MAX}")
        lines.append(f"    if {' or '.join(checks)}: return _slow(ext)")
    lines += bools
    lines.append(f"    return _cls({', '.join(f'v{i}' for i in range(len(plan)))})")
    exec("\n".join(lines), ns)  # noqa: S102 - generated from our own declarations only
    return ns["decode"]


def _compile_encoder(cls: type, plan: tuple[_FieldPlan, ...]) -> Any:
    ns: dict[str, Any] = {"_as_str": _as_str}
    lines = ["def encode(h):", "    out = {}"]
    for fp in plan:
        lines.append(f"    v = h.{fp.attr}")
        lines.append("    if v is not None:")
        if fp.kind == _KIND_BOOL:
            lines.append(f"        out[{fp.wire!r}] = 'true' if v is True else ('false' if v is False else _as_str(v))")
        elif fp.kind == _KIND_STR:
            lines.append(f"        out[{fp.wire!r}] = v if type(v) is str else _as_str(v)")
        else:
            lines.append(f"        out[{fp.wire!r}] = str(v) if type(v) is int else _as_str(v)")
    lines.append("    return out")
    exec("\n".join(lines), ns)  # noqa: S102 - generated from our own declarations only
    return ns["encode"]


def decode_header(cls: type[H], ext_fields: Mapping[str, str]) -> H:
    """Build ``cls`` from a request's extFields with J's parsing rules; HeaderError on bad input."""
    return getattr(cls, _DECODE_ATTR)(ext_fields)  # type: ignore[no-any-return]


def encode_header(hdr: Any) -> dict[str, str]:
    """The extFields of a header: strings only (C and G need that), None fields omitted."""
    return getattr(type(hdr), _ENCODE_ATTR)(hdr)  # type: ignore[no-any-return]


def header_wire_names(cls: type) -> tuple[str, ...]:
    """Wire names of a header class, in declaration order (tests, ACL signing)."""
    return tuple(fp.wire for fp in getattr(cls, _PLAN_ATTR))


def decoder_with_wire_names(
    cls: type[H], wire_names: Mapping[str, str], *, name: str
) -> Callable[[Mapping[str, str]], H]:
    """A decoder of ``cls`` that reads each field under another wire name (``{attr: wire}``), with the same
    parsing rules, compiled on first use; errors name header ``name``. SEND_MESSAGE_V2's one-letter header
    is decoded this way straight into the V1 header: one object per request instead of two."""
    compiled: Callable[[Mapping[str, str]], H] | None = None

    def decode(ext: Mapping[str, str]) -> H:
        nonlocal compiled
        if compiled is None:
            plan = tuple(
                dataclasses.replace(fp, wire=wire_names.get(fp.attr, fp.wire)) for fp in getattr(cls, _PLAN_ATTR)
            )
            compiled = _compile_fast_decoder(cls, plan, name)
        return compiled(ext)  # type: ignore[misc]

    return decode
