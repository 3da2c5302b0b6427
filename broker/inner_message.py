"""A stored message written again elsewhere: the one way the broker rebuilds a MessageExtBrokerInner.

Several services read a message back from the commit log and put it again under another topic or queue:
the schedule and timer services deliver a parked message to its real topic, a committed transaction
stores its half message for real, the check service renews or discards a half message and shows it to
the producer, and a consumer's send-back moves it to its retry or dead-letter topic. Each keeps the
body, flag, born time and born host; what changes (topic, queue, properties, and some of sys flag,
store host, reconsume count, prepared offset) is given here, and the derived fields (the properties
string and the tags code) always follow the new properties.
"""

from __future__ import annotations

from broker.message_const import MessageConst
from store.message import MessageExt, MessageExtBrokerInner, encode_properties, tags_hash


def inner_from(
    msg: MessageExt,
    topic: str,
    queue_id: int,
    properties: dict[str, str],
    *,
    sys_flag: int | None = None,
    store_host: tuple[str, int] | None = None,
    reconsume_times: int | None = None,
    prepared_transaction_offset: int = 0,
) -> MessageExtBrokerInner:
    """``msg`` as a new message for ``topic``/``queue_id`` with ``properties`` (which it then owns);
    ``None`` keeps the stored message's value."""
    return MessageExtBrokerInner(
        topic=topic,
        queue_id=queue_id,
        flag=msg.flag,
        body=msg.body,
        properties=properties,
        properties_string=encode_properties(properties),
        tags_code=tags_hash(properties.get(MessageConst.TAGS)),
        sys_flag=msg.sys_flag if sys_flag is None else sys_flag,
        born_timestamp=msg.born_timestamp,
        born_host=msg.born_host,
        store_host=msg.store_host if store_host is None else store_host,
        reconsume_times=msg.reconsume_times if reconsume_times is None else reconsume_times,
        prepared_transaction_offset=prepared_transaction_offset,
    )
