"""The refusal of an ACL check, worded and answered as upstream's broker answers it.

Upstream's RPC hook throws ``AclException`` before the processor runs; Netty's request loop turns any exception
into SYSTEM_ERROR (1) whose remark is ``exception.toString()`` plus the top stack frame. 4.9.7 therefore answers
a refused request with code 1, not NO_PERMISSION (16), and a remark such as
``org.apache.rocketmq.acl.common.AclException: No accessKey is configured,
org.apache.rocketmq.acl.plain.PlainPermissionManager.validate(PlainPermissionManager.java:663)``.
We answer byte for byte the same so that clients and scripts matching on the text see no difference.
"""

from __future__ import annotations

ACL_EXCEPTION = "org.apache.rocketmq.acl.common.AclException"
_MANAGER = "org.apache.rocketmq.acl.plain.PlainPermissionManager"
_VALIDATOR = "org.apache.rocketmq.acl.plain.PlainAccessValidator"

#: Where 4.9.7 throws each refusal (the stack frame its remark ends with).
FRAME_VALIDATE_NO_ACCESS_KEY = f"{_MANAGER}.validate(PlainPermissionManager.java:663)"
FRAME_VALIDATE_UNKNOWN_KEY = f"{_MANAGER}.validate(PlainPermissionManager.java:667)"
FRAME_VALIDATE_NO_RESOURCE = f"{_MANAGER}.validate(PlainPermissionManager.java:674)"
FRAME_VALIDATE_SIGNATURE = f"{_MANAGER}.validate(PlainPermissionManager.java:683)"
FRAME_CHECK_ADMIN = f"{_MANAGER}.checkPerm(PlainPermissionManager.java:580)"
FRAME_CHECK_DEFAULT = f"{_MANAGER}.checkPerm(PlainPermissionManager.java:605)"
FRAME_CHECK_RESOURCE = f"{_MANAGER}.checkPerm(PlainPermissionManager.java:610)"
FRAME_PARSE = f"{_VALIDATOR}.parse(PlainAccessValidator.java:134)"


class AclError(Exception):
    """An access refusal or a bad ACL configuration; ``str()`` is the bare message."""

    def __init__(self, message: str, frame: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.frame = frame

    @property
    def remark(self) -> str:
        """The remark of the SYSTEM_ERROR answer, as 4.9.7 writes it."""
        head = f"{ACL_EXCEPTION}: {self.message}"
        return f"{head}, {self.frame}" if self.frame else head
