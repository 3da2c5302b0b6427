"""The store's last line of defence for names that become folders: a consume queue's topic.

The broker checks topic and group names against upstream's rules before it stores anything; the store does not
know those rules, but it never creates a path that is not a plain folder name inside its root (no ``/``, no NUL,
not ``.`` or ``..``, at most NAME_MAX bytes, not leaving the root through a symlink). A message whose topic
could not be such a folder is refused at put time, so the writer and the reput never meet one.
"""

from __future__ import annotations

import os

NAME_MAX = 255  # bytes in one path component (Linux)


class UnsafeStorePath(ValueError):
    """A name that would put a file outside its folder, or cannot name a file at all."""


def unsafe_dir_name_reason(name: str) -> str | None:
    """Why `name` cannot be one folder name inside the store, or None."""
    if not name:
        return "empty name"
    if name in (".", ".."):
        return f"{name!r} is not a folder name"
    if "/" in name or "\x00" in name:
        return "a '/' or NUL in the name"
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        return "the name is not encodable as UTF-8"
    if size > NAME_MAX:
        return f"the name is {size} bytes, more than {NAME_MAX}"
    return None


def queue_dir(root: str, topic: str, queue_id: int) -> str:
    """``root/topic/queue_id`` after checking that it is a folder inside `root`; UnsafeStorePath otherwise."""
    reason = unsafe_dir_name_reason(topic)
    if reason is not None:
        raise UnsafeStorePath(f"topic {topic[:100]!r} cannot be a consume queue folder: {reason}")
    path = os.path.join(root, topic, str(queue_id))
    real_root = os.path.realpath(root)
    if os.path.commonpath((real_root, os.path.realpath(path))) != real_root:
        raise UnsafeStorePath(f"{path!r} resolves outside the store folder {real_root!r}")
    return path
