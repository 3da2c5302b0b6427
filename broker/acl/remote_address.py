"""White-list address patterns of ACL 1.0 (J ``RemoteAddressStrategyFactory``), the same forms and outcomes.

Forms: blank (matches nothing), ``*`` / ``*.*.*.*`` / ``*:*:*:*:*:*:*:*`` (matches everything), one address,
a comma list (``192.168.0.1,192.168.0.2``), a brace list on the last part (``192.168.0.{1,2}``), and ranges with
``*`` or ``a-b`` in one part (``192.168.*.*``, ``192.168.0.1-100``; the IPv6 forms likewise in hex).
A malformed pattern raises :class:`AclError` with upstream's message when the file is loaded.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from broker.acl.errors import AclError


def is_ipv4(text: str | None) -> bool:
    """Dotted quad, each part 0-255 without leading zeros (commons-validator's rule); no ``ipaddress`` on the
    request path, it costs more than the rest of the address check."""
    if not text:
        return False
    parts = text.split(".")
    if len(parts) != 4:
        return False
    for part in parts:
        if (
            not part.isdigit()
            or not part.isascii()
            or len(part) > 3
            or (len(part) > 1 and part[0] == "0")
            or int(part) > 255
        ):
            return False
    return True


def is_ipv6(text: str | None) -> bool:
    if not text or ":" not in text:
        return False
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


def expand_ip(address: str, part: int) -> str:
    """J ``AclUtils.expandIP``: fill ``::`` and pad every colon-separated group to four upper-case digits."""
    address = address.upper()
    pad = part - address.count(":")
    if pad > 0:
        address = address.replace("::", ":" * (pad + 1))
    return ":".join(group.rjust(4, "0") for group in address.split(":"))


def _split(text: str, sep: str) -> list[str]:
    """commons-lang ``StringUtils.split``: separators collapse, no empty pieces."""
    return [piece for piece in text.split(sep) if piece]


class AddressStrategy:
    def match(self, address: str | None) -> bool:  # pragma: no cover - interface
        raise NotImplementedError


class _Nothing(AddressStrategy):
    def match(self, address: str | None) -> bool:
        return False


class _Everything(AddressStrategy):
    def match(self, address: str | None) -> bool:
        return True


BLANK = _Nothing()
ANY_ADDRESS = _Everything()


class _Multiple(AddressStrategy):
    def __init__(self, addresses: list[str]) -> None:
        self.addresses: set[str] = set()
        for address in addresses:
            if is_ipv4(address):
                self.addresses.add(address)
            elif is_ipv6(address):
                self.addresses.add(expand_ip(address, 8))
            else:
                raise AclError(f"Netaddress examine Exception netaddress is {address}")

    def match(self, address: str | None) -> bool:
        if address is None:
            return False
        if is_ipv6(address):
            address = expand_ip(address, 8)
        return address in self.addresses


class _One(AddressStrategy):
    def __init__(self, address: str) -> None:
        if not (is_ipv4(address) or is_ipv6(address)):
            raise AclError(f"Netaddress examine Exception netaddress is {address}")
        self.expanded = expand_ip(address, 8).upper()

    def match(self, address: str | None) -> bool:
        return address is not None and expand_ip(address, 8).upper() == self.expanded


def _int(text: str, base: int = 10) -> int:
    try:
        return int(text.strip(), base)
    except ValueError:
        raise AclError(f'For input string: "{text}"') from None


def _in_scope(address: str, index: int) -> bool:
    """J ``AclUtils.isScope(netaddress, index)``: the parts before ``index`` are numbers in range."""
    if ":" in address:
        parts = expand_ip(address, 8).split(":")
        try:
            return all(0 <= int(p, 16) <= 0xFFFF for p in parts[:index])
        except ValueError:
            return False
    parts = _split(address, ".")
    if len(parts) != 4:
        return False
    return all(0 <= _int(p) <= 255 for p in parts[:index])


def _v6_head(address: str) -> str:
    """J ``AclUtils.v6ipProcess``: the fixed groups in front of the range, expanded."""
    star, minus = "*" in address, "-" in address
    if star and minus:
        last = address.rfind(":")
        return expand_ip(address[: address[:last].rfind(":")], 6)
    if not star and not minus:
        return expand_ip(address, 8)
    return expand_ip(address[: address.rfind(":")], 7)


@dataclass(slots=True)
class _Range(AddressStrategy):
    head: str | None = None
    start: int = 0
    end: int = 0
    index: int = 0

    @classmethod
    def parse(cls, pattern: str) -> _Range:
        strategy = cls()
        if ":" in pattern:
            _check_v6_range(pattern)
            parts = _split(pattern, ":")
            for i in range(1, len(parts)):
                if strategy._analyse(parts, i, 16, 0xFFFF):
                    if not _in_scope(pattern, strategy.index - 1):
                        raise AclError(f"Netaddress examine scope Exception netaddress is {pattern}")
                    head = _v6_head(pattern)
                    strategy.index = len(_split(head, ":"))
                    strategy.head = head
                    break
        else:
            parts = _split(pattern, ".")
            if any(strategy._analyse(parts, i, 10, 255) for i in (1, 2, 3)):
                if not _in_scope(pattern, strategy.index - 1):
                    raise AclError(f"Netaddress examine scope Exception netaddress is {pattern}")
                strategy.head = "".join(part.strip() + "." for part in parts[: strategy.index])
        return strategy

    def _analyse(self, parts: list[str], index: int, base: int, top: int) -> bool:
        if index >= len(parts):
            raise AclError(f"Netaddress examine scope Exception netaddress is {'.'.join(parts)}")
        value = parts[index].strip()
        self.index = index
        if value == "*":
            self.start, self.end = 0, top
        elif "-" in value:
            if value.startswith("-"):
                raise AclError(f"RangeRemoteAddressStrategy netaddress examine scope Exception value {value} ")
            bounds = _split(value, "-")
            if len(bounds) != 2:
                raise AclError(f"RangeRemoteAddressStrategy netaddress examine scope Exception value {value} ")
            self.start, self.end = _int(bounds[0], base), _int(bounds[1], base)
            if not (0 <= self.start <= self.end <= top):
                raise AclError(
                    "RangeRemoteAddressStrategy netaddress examine scope Exception "
                    f"start is {self.start} , end is {self.end}"
                )
        return self.end > 0

    def match(self, address: str | None) -> bool:
        if self.head is None or address is None:
            return False
        if is_ipv4(address):
            if not address.startswith(self.head):
                return False
            last = address.rfind(".")
            if self.index == 3:
                value = address[len(self.head) :]
            elif self.index == 2:
                value = address[len(self.head) : last]
            else:
                value = address[len(self.head) : address.rfind(".", 0, last)]
            try:
                return self.start <= int(value) <= self.end
            except ValueError:
                return False
        if is_ipv6(address):
            address = expand_ip(address, 8).upper()
            if address.startswith(self.head):
                return self.start <= int(address[5 * self.index : 5 * self.index + 4], 16) <= self.end
        return False


def _check_v6_range(pattern: str) -> None:
    """J ``AclUtils.IPv6AddressCheck``: ``*`` only at the end, ``-`` only in the last (or the one before a
    trailing ``*``) group."""
    star, minus = pattern.find("*"), pattern.find("-")
    if star > -1 and star != len(pattern) - 1:
        raise AclError(f"Netaddress examine scope Exception netaddress is {pattern}")
    if minus > -1:
        last = pattern.rfind(":")
        limit = last if star == -1 else pattern.rfind(":", 0, last)
        if minus <= limit:
            raise AclError(f"Netaddress examine scope Exception netaddress is {pattern}")


def _brace_addresses(pattern: str, last: str) -> list[str]:
    prefix = pattern[: pattern.find("{")]
    return [prefix + piece for piece in _split(last[1:-1], ",")]


def address_strategy(pattern: str | None) -> AddressStrategy:
    """The matcher for one white-list entry (``whiteRemoteAddress`` or a ``globalWhiteRemoteAddresses`` item)."""
    if pattern is None or not str(pattern).strip():
        return BLANK
    pattern = str(pattern)
    if pattern in ("*", "*.*.*.*", "*:*:*:*:*:*:*:*"):
        return ANY_ADDRESS
    if pattern.endswith("}"):
        if ":" in pattern:
            last = _split(pattern, ":")[-1]
        else:
            parts = _split(pattern, ".")
            if len(parts) < 4:
                raise AclError("MultipleRemoteAddressStrategy has got a/some wrong format IP(s) ")
            last = parts[-1]
        if not last.startswith("{"):
            raise AclError("MultipleRemoteAddressStrategy netaddress examine scope Exception netaddress")
        return _Multiple(_brace_addresses(pattern, last))
    if "," in pattern:
        return _Multiple(_split(pattern, ","))
    if "*" in pattern or "-" in pattern:
        return _Range.parse(pattern)
    return _One(pattern)


def host_of(remote_addr: str | None) -> str | None:
    """``ip:port`` → ``ip`` (everything before the last colon), as the validator's parse does."""
    if remote_addr is not None and ":" in remote_addr:
        host = remote_addr[: remote_addr.rfind(":")]
        return host[1:-1] if host.startswith("[") and host.endswith("]") else host
    return remote_addr
