"""broker/request_table.py: every listed code reaches its handler; an unlisted code is answered 3 by name."""

from __future__ import annotations

import asyncio

from broker.request_table import HandlerProcessor, NotSupportedProcessor, broker_routes, namesrv_routes
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand


def test_no_code_is_listed_twice(broker):
    for routes in (broker_routes(broker), namesrv_routes(broker.namesrv_processor)):
        codes = [route.code for route in routes]
        assert len(codes) == len(set(codes))


async def test_every_listed_code_reaches_a_handler(broker, client):
    """An empty request to each code gets its handler's answer (often a missing-header error), never 3."""
    addr = broker.config.broker_addr
    for route in broker_routes(broker):
        if route.code == RequestCode.PULL_MESSAGE:
            continue  # an empty pull has no header to say "do not suspend"; test_processors covers it
        resp = await asyncio.wait_for(client.invoke(addr, RemotingCommand.request(route.code, {}), 5), 6)
        assert resp.code != ResponseCode.REQUEST_CODE_NOT_SUPPORTED, route
    ns_addr = f"127.0.0.1:{broker.config.namesrv_listen_port}"
    for route in namesrv_routes(broker.namesrv_processor):
        resp = await client.invoke(ns_addr, RemotingCommand.request(route.code, {}), 5)
        assert resp.code != ResponseCode.REQUEST_CODE_NOT_SUPPORTED, route


async def test_an_unlisted_code_is_not_supported_on_both_ports(broker, client):
    for addr in (broker.config.broker_addr, f"127.0.0.1:{broker.config.namesrv_listen_port}"):
        resp = await client.invoke(
            addr,
            RemotingCommand.request(
                RequestCode.GET_ROUTEINFO_BY_TOPIC
                if addr == broker.config.broker_addr
                else RequestCode.SEND_MESSAGE_V2,
                {},
            ),
            5,
        )
        assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        assert resp.remark.endswith(" not supported")


async def test_handler_processor_answers_3_for_a_code_it_does_not_hold():
    request = RemotingCommand.request(4321, {})
    resp = await HandlerProcessor({}).process_request(None, request)
    assert (resp.code, resp.remark) == (ResponseCode.REQUEST_CODE_NOT_SUPPORTED, " request type 4321 not supported")
    resp = await NotSupportedProcessor().process_request(None, request)
    assert (resp.code, resp.remark) == (ResponseCode.REQUEST_CODE_NOT_SUPPORTED, " request type 4321 not supported")
