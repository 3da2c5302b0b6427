"""ProxyChannel: a 5.x client as the broker's processors see it."""

from __future__ import annotations

import asyncio

import pytest

from proxy.channel import ProxyChannel
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand


async def test_call_completes_with_the_processor_answer_sent_through_the_channel():
    def dispatch(channel, request):
        asyncio.get_running_loop().call_soon(channel.send, request.response(ResponseCode.SUCCESS, "done"))

    channel = ProxyChannel("c1", "127.0.0.1:5", "127.0.0.1:8081", dispatch)
    response = await channel.call(RemotingCommand.request(RequestCode.HEART_BEAT), 1.0)
    assert (response.code, response.remark) == (ResponseCode.SUCCESS, "done")
    assert channel._pending == {}


async def test_call_times_out_and_forgets_the_request():
    channel = ProxyChannel("c1", "127.0.0.1:5", "127.0.0.1:8081", lambda ch, req: None)
    with pytest.raises(TimeoutError):
        await channel.call(RemotingCommand.request(RequestCode.HEART_BEAT), 0.05)
    assert channel._pending == {}


async def test_broker_requests_go_to_the_handler_and_answered_invokes_are_refused():
    seen = []
    channel = ProxyChannel("c1", "127.0.0.1:5", "127.0.0.1:8081", lambda ch, req: None)
    channel.on_broker_request = seen.append
    check = RemotingCommand.request(RequestCode.CHECK_TRANSACTION_STATE, oneway=True)
    channel.invoke_oneway(check)
    assert seen == [check]
    response = await channel.invoke(RemotingCommand.request(RequestCode.GET_CONSUMER_RUNNING_INFO), 1.0)
    assert response.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED and "5.x" in response.remark
