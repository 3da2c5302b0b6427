"""EmbeddedBroker: a whole mini-rocketmq (broker + name server) on a background thread, for tests.

It binds free loopback ports, keeps its store in a temporary directory with small files, enables fault
injection, and starts in about a tenth of a second. The broker runs on its own event loop on a daemon
thread, so the owner may be synchronous or asyncio code alike: every helper here goes over the wire
(the real remoting protocol) from the broker's loop and blocks the caller until answered.

    with EmbeddedBroker() as broker:
        broker.create_topic("orders", queues=4)
        producer = Producer(broker.namesrv_addr)  # any RocketMQ client
        broker.inject_fault("stall_append", duration_ms=2000)
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Self, TypeVar

from broker.testing.in_loop import loopback_settings
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand

T = TypeVar("T")

#: Small files so a test store costs a few hundred kilobytes of sparse files.
SMALL_STORE = {
    "mappedFileSizeCommitLog": 8 * 1024 * 1024,
    "mappedFileSizeConsumeQueue": 20 * 10_000,
    "maxIndexNum": 10_000,
    "maxHashSlotNum": 2_000,
}
START_ATTEMPTS = 5  # a free port can be taken by someone else between probing and binding


class EmbeddedBrokerError(RuntimeError):
    """The broker did not start, or a helper request was refused (the broker's remark is in the text)."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class EmbeddedBroker:
    """One in-process broker with its embedded name server; ``start()`` / ``stop()`` or a ``with`` block.

    ``config``: broker.conf keys (``{"autoCreateTopicEnable": False}``) over the test defaults.
    ``store_dir``: where the store lives; a temporary directory (removed at ``stop``) when None.
    """

    def __init__(
        self,
        *,
        config: Mapping[str, Any] | None = None,
        store_dir: str | Path | None = None,
        broker_name: str = "broker-a",
        cluster_name: str = "DefaultCluster",
        start_timeout_s: float = 30.0,
        request_timeout_s: float = 10.0,
    ) -> None:
        self.overrides = {k: _conf_value(v) for k, v in (config or {}).items()}
        self.broker_name = str(self.overrides.pop("brokerName", broker_name))
        self.cluster_name = str(self.overrides.pop("brokerClusterName", cluster_name))
        self._store_dir_arg = Path(store_dir) if store_dir is not None else None
        self._own_store = store_dir is None
        self.store_dir: Path | None = None
        self.start_timeout_s = start_timeout_s
        self.request_timeout_s = request_timeout_s
        self.controller: Any = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.start_seconds: float | None = None  # build + start of the broker, ports bound, routes served
        self.import_seconds: float | None = None  # importing the broker's modules (once per process)
        self._thread: threading.Thread | None = None
        self._client: Any = None

    # -- addresses ------------------------------------------------------------------------
    @property
    def broker_addr(self) -> str:
        return self._running().config.broker_addr

    @property
    def namesrv_addr(self) -> str:
        c = self._running().config
        return f"{c.broker_ip1}:{c.namesrv_listen_port}"

    @property
    def metrics_url(self) -> str | None:
        """``http://127.0.0.1:PORT/metrics`` when started with ``metricsExporterType=PROM``."""
        port = self._running().metrics.port
        return None if port is None else f"http://127.0.0.1:{port}/metrics"

    @property
    def running(self) -> bool:
        return self.controller is not None

    def _running(self) -> Any:
        if self.controller is None:
            raise EmbeddedBrokerError("the embedded broker is not running; call start() first")
        return self.controller

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> EmbeddedBroker:
        if self.controller is not None:
            return self
        t_import = time.perf_counter()
        import broker.controller  # noqa: F401 - the first import (numpy, uvloop, …) is not the broker's start

        self.import_seconds = time.perf_counter() - t_import
        t0 = time.perf_counter()
        self.store_dir = self._store_dir_arg or Path(tempfile.mkdtemp(prefix="mini-rocketmq-"))
        last_error: BaseException | None = None
        for _ in range(START_ATTEMPTS):
            try:
                self._start_once()
                break
            except OSError as exc:  # port taken in between: new ports, new loop
                last_error = exc
        else:
            self._remove_store()
            raise EmbeddedBrokerError(f"the embedded broker could not bind its ports: {last_error}") from last_error
        self.start_seconds = time.perf_counter() - t0
        return self

    def _start_once(self) -> None:
        from broker.config import build_config
        from broker.controller import BrokerController
        from remoting import loop as loop_choice

        items: dict[str, str] = {
            **loopback_settings(self.store_dir),
            "brokerName": self.broker_name,
            "brokerClusterName": self.cluster_name,
            "metricsPromExporterHost": "127.0.0.1",
            "metricsPromExporterPort": "0",
            "faultInjectionEnable": "true",
            "namesrvAddr": "",
            **{k: str(v) for k, v in SMALL_STORE.items()},
        }
        items.update(self.overrides)
        try:
            config, _ = build_config(items.items())
            config.to_store_config().validate()
        except Exception as exc:  # ConfigError / StoreConfigError: the caller's keys are wrong
            raise EmbeddedBrokerError(f"bad embedded broker configuration: {exc}") from exc
        loop = loop_choice.new_event_loop()
        ready = threading.Event()
        thread = threading.Thread(
            target=self._run_loop, args=(loop, ready), name=f"rocketmq-{self.broker_name}", daemon=True
        )
        thread.start()
        ready.wait()
        built: list[Any] = []

        async def boot() -> Any:
            # Built on its own loop: nothing of the broker ever touches the caller's thread.
            built.append(BrokerController(config))
            await built[0].start()
            return built[0]

        try:
            controller = asyncio.run_coroutine_threadsafe(boot(), loop).result(self.start_timeout_s)
        except BaseException:
            if built:  # a half-started broker: stop what can be stopped, report the first failure
                with contextlib.suppress(Exception):
                    asyncio.run_coroutine_threadsafe(built[0].shutdown(), loop).result(self.start_timeout_s)
            self._stop_loop(loop, thread)
            raise
        self.loop, self._thread, self.controller = loop, thread, controller

    @staticmethod
    def _run_loop(loop: asyncio.AbstractEventLoop, ready: threading.Event) -> None:
        asyncio.set_event_loop(loop)
        loop.call_soon(ready.set)
        loop.run_forever()

    @staticmethod
    def _stop_loop(loop: asyncio.AbstractEventLoop, thread: threading.Thread) -> None:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10.0)
        if not thread.is_alive():
            loop.close()

    def stop(self) -> None:
        """Shut the broker down (flush, persist) and remove a temporary store."""
        controller, loop, thread = self.controller, self.loop, self._thread
        if controller is None or loop is None or thread is None:
            return
        self.controller = None

        async def shutdown() -> None:
            if self._client is not None:
                await self._client.close()
                self._client = None
            await controller.shutdown()

        try:
            asyncio.run_coroutine_threadsafe(shutdown(), loop).result(self.start_timeout_s)
        finally:
            self._stop_loop(loop, thread)
            self.loop = self._thread = None
            self._remove_store()

    def _remove_store(self) -> None:
        if self._own_store and self.store_dir is not None:
            shutil.rmtree(self.store_dir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- running code on the broker's loop ---------------------------------------------------
    def call(self, fn: Callable[[], Awaitable[T]], timeout_s: float | None = None) -> T:
        """Run ``fn()`` (a coroutine function) on the broker's loop and return its result."""
        self._running()
        if self.loop is None:
            raise EmbeddedBrokerError("the embedded broker is not running")
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            raise EmbeddedBrokerError("call() from the broker's own loop would deadlock")
        return asyncio.run_coroutine_threadsafe(fn(), self.loop).result(timeout_s or self.request_timeout_s)

    def request(
        self,
        code: int,
        ext_fields: Mapping[str, Any] | None = None,
        body: bytes | None = None,
        *,
        namesrv: bool = False,
        timeout_s: float | None = None,
    ) -> RemotingCommand:
        """Send one request to the broker (or its name server) over TCP; returns the raw answer."""
        addr = self.namesrv_addr if namesrv else self.broker_addr
        ext = {k: _conf_value(v) for k, v in (ext_fields or {}).items() if v is not None}
        timeout = timeout_s or self.request_timeout_s

        async def send() -> RemotingCommand:
            from remoting.client import RemotingClient

            if self._client is None:
                self._client = RemotingClient()
            return await self._client.invoke(addr, RemotingCommand.request(code, ext, body), timeout)

        return self.call(send, timeout + 1.0)

    def _expect_ok(self, what: str, resp: RemotingCommand) -> RemotingCommand:
        if resp.code != ResponseCode.SUCCESS:
            raise EmbeddedBrokerError(f"{what} refused: {resp.remark} (code {resp.code})", resp.code)
        return resp

    # -- helpers ------------------------------------------------------------------------------
    def create_topic(
        self, name: str, queues: int = 4, *, read_queues: int | None = None, perm: int = 6, order: bool = False
    ) -> None:
        """UPDATE_AND_CREATE_TOPIC; the embedded name server serves the route as soon as this returns."""
        ext = {
            "topic": name,
            "defaultTopic": "TBW102",
            "readQueueNums": read_queues or queues,
            "writeQueueNums": queues,
            "perm": perm,
            "topicFilterType": "SINGLE_TAG",
            "topicSysFlag": 0,
            "order": order,
        }
        self._expect_ok(f"create topic {name}", self.request(RequestCode.UPDATE_AND_CREATE_TOPIC, ext))

    def delete_topic(self, name: str) -> None:
        self._expect_ok(f"delete topic {name}", self.request(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": name}))
        self._expect_ok(
            f"delete topic {name} route",
            self.request(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": name}, namesrv=True),
        )

    def inject_fault(
        self, kind: str, duration_ms: int = 0, *, target: str | None = None, value: str | int | None = None
    ) -> None:
        """FAULT_INJECT: ``stall_queue`` (target = send/pull/…), ``stall_append``, ``drain_transient_pool``,
        ``slow_fsync`` (value = ms per fsync) or ``clear``; see broker.fault_injection."""
        from mqclient.fault import fault_inject_request

        request = fault_inject_request(
            kind, target=target, duration_ms=duration_ms, value=None if value is None else str(value)
        )
        self._expect_ok(f"fault {kind}", self.request(request.code, request.ext_fields))

    def clear_faults(self) -> None:
        self.inject_fault("clear")

    def update_config(self, **keys: Any) -> None:
        """updateBrokerConfig with broker.conf keys (and ``logLevel`` / ``requestLogEnable``)."""
        body = "".join(f"{k}={_conf_value(v)}\n" for k, v in keys.items()).encode()
        self._expect_ok("updateBrokerConfig", self.request(RequestCode.UPDATE_BROKER_CONFIG, body=body))

    def runtime_info(self) -> dict[str, str]:
        import json

        resp = self._expect_ok("runtime info", self.request(RequestCode.GET_BROKER_RUNTIME_INFO))
        return dict(json.loads(bytes(resp.body or b"{}")).get("table") or {})

    def max_offset(self, topic: str, queue_id: int) -> int:
        resp = self._expect_ok(
            "max offset", self.request(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": queue_id})
        )
        return int(resp.ext_fields.get("offset", "0"))

    def __repr__(self) -> str:
        if self.controller is None:
            return f"<EmbeddedBroker {self.broker_name} stopped>"
        return f"<EmbeddedBroker {self.broker_name} broker={self.broker_addr} namesrv={self.namesrv_addr}>"


def _conf_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
