"""The pull processor takes its header from a learned extFields layout's values (``remoting.pull_header``) when a
ROCKETMQ request has one, answers exactly as with the map's header, and falls back to the map decoder (its precise
error) when the values do not decode fast."""

from __future__ import annotations

import pytest
from broker_helpers import pull_request, send_request

import broker.processor.pull as pullmod
from remoting import command as cmdmod
from remoting.codes import ResponseCode
from remoting.command import RemotingCommand
from remoting.errors import HeaderError
from remoting.offline_channel import OfflineChannel

ROCKETMQ = 1


def _wire(request: RemotingCommand) -> RemotingCommand:
    """The request as the server gets it from a consumer sending ROCKETMQ headers."""
    request.serialize_type = ROCKETMQ
    return RemotingCommand.decode(memoryview(request.to_bytes())[4:])


@pytest.fixture
def map_decodes(monkeypatch) -> list[object]:
    """Every header the processor decodes from the map (the general decoder) is recorded."""
    seen: list[object] = []
    general = pullmod.decode_header

    def counting(cls, ext):
        seen.append(ext)
        return general(cls, ext)

    monkeypatch.setattr(pullmod, "decode_header", counting)
    cmdmod._LAYOUTS.clear()
    cmdmod._LAYOUT_MISSES.clear()
    return seen


async def test_layout_read_pulls_are_answered_from_the_values_header_as_from_the_map(broker, map_decodes) -> None:
    topic = "PullLayoutTopic"
    sink = OfflineChannel()
    for _ in range(6):
        await broker.send_processor.process_request(sink, send_request(topic, b"body"))
    pull = broker.pull_processor
    answers = []
    for offset in range(6):  # one digit throughout: one layout, learned at the second pull
        request = _wire(pull_request("GL", topic, 0, offset, sys_flag=0x4, max_nums=1))
        response = await pull.process_request(sink, request)
        assert response is not None and response.code == ResponseCode.SUCCESS, response
        answers.append(int(response.ext_fields["nextBeginOffset"]))
    assert answers == [1, 2, 3, 4, 5, 6]
    assert len(map_decodes) == 2  # the two pulls before the layout was learned; the other four from its values


async def test_values_that_do_not_decode_fast_get_the_map_decoder_s_answer(broker, map_decodes) -> None:
    sink = OfflineChannel()
    pull = broker.pull_processor
    for _ in range(2):  # learn the layout of a pull whose queue id has one character
        await pull.process_request(sink, _wire(pull_request("GL", "PullLayoutTopic2", 0, 0, sys_flag=0x4)))
    learned = len(map_decodes)
    request = _wire(pull_request("GL", "PullLayoutTopic2", "-", 0, sys_flag=0x4))  # same lengths, not a number
    assert request.ext_layout is not None
    with pytest.raises(HeaderError, match="queueId"):
        await pull.process_request(sink, request)
    assert len(map_decodes) == learned + 1
