"""The fuzz frame generator itself: deterministic per seed, covering every request code, every family."""

from __future__ import annotations

from collections import Counter

from bench.fuzz_frames import CORPUS_DIR, FrameMutator, load_corpus
from remoting.codes import RequestCode
from remoting.command import RemotingCommand


def test_the_same_seed_gives_the_same_frames_and_another_seed_others():
    corpus = load_corpus()
    first = [f.data for f in FrameMutator(42, corpus).frames(500)]
    assert first == [f.data for f in FrameMutator(42, corpus).frames(500)]
    assert first != [f.data for f in FrameMutator(43, corpus).frames(500)]


def test_every_request_code_and_unknown_codes_are_sent_with_every_family():
    frames = list(FrameMutator(1, load_corpus()).frames(20_000))
    assert Counter(f.family for f in frames).keys() == {"framing", "header", "body", "corpus", "valid"}
    codes = {f.code for f in frames}
    assert {int(c) for c in RequestCode} <= codes
    assert codes - {int(c) for c in RequestCode} - {None}, "no unknown request code was generated"


def test_the_recorded_corpus_holds_real_client_requests_for_both_ports():
    assert {p.name for p in CORPUS_DIR.glob("*.frames")} >= {
        "cpp_broker.frames",
        "cpp_namesrv.frames",
        "ons_broker.frames",
        "ons_namesrv.frames",
    }
    broker = [RemotingCommand.decode(f[4:]) for f in load_corpus(target="broker")]
    namesrv = [RemotingCommand.decode(f[4:]) for f in load_corpus(target="namesrv")]
    assert {
        RequestCode.SEND_MESSAGE,
        RequestCode.SEND_MESSAGE_V2,
        RequestCode.PULL_MESSAGE,
        RequestCode.HEART_BEAT,
        RequestCode.LOCK_BATCH_MQ,
    } <= {c.code for c in broker}
    assert {c.code for c in namesrv} == {RequestCode.GET_ROUTEINFO_BY_TOPIC}
    assert {c.language for c in broker} == {"CPP", "JAVA"}  # the C++ wheel, and ali-ons (it says JAVA)
