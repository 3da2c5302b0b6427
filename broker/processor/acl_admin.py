"""The ACL admin codes 50-54 (J ``AdminBrokerProcessor``'s ACL part): what ``mqadmin updateAclConfig``,
``deleteAccessConfig``, ``updateGlobalWhiteAddr``, ``clusterAclConfigVersion`` and ``getAccessConfigSubCommand``
send. Answers and failure codes as 4.9.7; with ``aclEnable=false`` every one of them fails with a remark that
says so (upstream dereferences a missing validator there).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson
import structlog

from broker.acl.errors import AclError
from remoting.codes import ResponseCode
from remoting.command import RemotingCommand
from remoting.headers import (
    CreateAccessConfigRequestHeader,
    DeleteAccessConfigRequestHeader,
    GetBrokerAclConfigResponseHeader,
    UpdateGlobalWhiteAddrsConfigRequestHeader,
    decode_header,
    encode_header,
)

if TYPE_CHECKING:
    from broker.acl.permission_manager import PlainPermissionManager
    from broker.config import BrokerConfig

log = structlog.get_logger(__name__)

ACL_DISABLED = "The broker does not enable acl"


def java_split(text: str | None) -> list[str] | None:
    """J ``UtilAll.split(str, ",")`` (``String.split``: trailing empty pieces dropped)."""
    if text is None:
        return None
    if text == "":
        return [""]
    parts = text.split(",")
    while parts and parts[-1] == "":
        parts.pop()
    return parts


class AclAdminProcessor:
    def __init__(self, acl: PlainPermissionManager | None, config: BrokerConfig) -> None:
        self.acl = acl  # None with aclEnable=false
        self.config = config

    def update_and_create_access_config(self, channel, request: RemotingCommand) -> RemotingCommand:
        hdr = decode_header(CreateAccessConfigRequestHeader, request.ext_fields)
        failed = ResponseCode.UPDATE_AND_CREATE_ACL_CONFIG_FAILED
        if self.acl is None:
            return request.response(failed, ACL_DISABLED)
        config = {
            "accessKey": hdr.access_key,
            "secretKey": hdr.secret_key,
            "whiteRemoteAddress": hdr.white_remote_address,
            "admin": hdr.admin,
            "defaultTopicPerm": hdr.default_topic_perm,
            "defaultGroupPerm": hdr.default_group_perm,
            "topicPerms": java_split(hdr.topic_perms),
            "groupPerms": java_split(hdr.group_perms),
        }
        try:
            if self.acl.update_access_config(config):
                log.info("acl account updated", access_key=hdr.access_key, remote=channel.remote_addr)
                return request.response(ResponseCode.SUCCESS)
        except (AclError, OSError) as exc:
            log.warning("acl account update refused", access_key=hdr.access_key, error=str(exc))
            return request.response(failed, str(exc))
        return request.response(
            failed, f"The accesskey[{hdr.access_key}] corresponding to accessConfig has been updated failed."
        )

    def delete_access_config(self, channel, request: RemotingCommand) -> RemotingCommand:
        hdr = decode_header(DeleteAccessConfigRequestHeader, request.ext_fields)
        failed = ResponseCode.DELETE_ACL_CONFIG_FAILED
        if self.acl is None:
            return request.response(failed, ACL_DISABLED)
        try:
            if self.acl.delete_access_config(hdr.access_key):
                log.info("acl account deleted", access_key=hdr.access_key, remote=channel.remote_addr)
                return request.response(ResponseCode.SUCCESS)
        except (AclError, OSError) as exc:
            log.warning("acl account delete refused", access_key=hdr.access_key, error=str(exc))
            return request.response(failed, str(exc))
        log.warning("acl account delete refused", access_key=hdr.access_key, error="no such account")
        return request.response(
            failed, f"The accesskey[{hdr.access_key}] corresponding to accessConfig has been deleted failed."
        )

    def update_global_white_addrs_config(self, channel, request: RemotingCommand) -> RemotingCommand:
        hdr = decode_header(UpdateGlobalWhiteAddrsConfigRequestHeader, request.ext_fields)
        if self.acl is None:
            return request.response(ResponseCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED, ACL_DISABLED)
        try:
            if self.acl.update_global_white_addrs(java_split(hdr.global_white_addrs), hdr.acl_file_full_path):
                log.info("acl global white list updated", remote=channel.remote_addr)
                return request.response(ResponseCode.SUCCESS)
        except (AclError, OSError) as exc:
            return request.response(ResponseCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED, str(exc))
        return request.response(
            ResponseCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED,
            f"The globalWhiteAddresses[{hdr.global_white_addrs}] has been updated failed.",
        )

    def get_broker_acl_config_version(self, channel, request: RemotingCommand) -> RemotingCommand:
        if self.acl is None:
            return request.response(ResponseCode.SYSTEM_ERROR, ACL_DISABLED)
        version, all_versions = self.acl.version_info()
        cfg = self.config
        hdr = GetBrokerAclConfigResponseHeader(
            version=orjson.dumps(version).decode(),
            broker_name=cfg.broker_name,
            broker_addr=cfg.broker_addr,
            cluster_name=cfg.broker_cluster_name,
            all_acl_file_version=orjson.dumps(all_versions).decode(),
        )
        return request.response(ResponseCode.SUCCESS, ext_fields=encode_header(hdr))

    def get_broker_cluster_acl_config(self, channel, request: RemotingCommand) -> RemotingCommand:
        if self.acl is None:
            return request.response(ResponseCode.SYSTEM_ERROR, ACL_DISABLED)
        return request.response(ResponseCode.SUCCESS, body=orjson.dumps(self.acl.all_config()))
