"""kafkalite.testing: a pytest plugin giving your own test suite a real broker.

Enable it in a ``conftest.py`` (or with ``pytest -p kafkalite.testing``)::

    pytest_plugins = ["kafkalite.testing"]

    def test_orders_are_counted(kafkalite):
        kafkalite.create_topic("orders", partitions=3)
        producer = confluent_kafka.Producer({"bootstrap.servers": kafkalite.kafka_bootstrap})
        ...

It is not registered as an entry point: it loads only where it is asked for.

Fixtures
    ``kafkalite_server`` (session): one embedded server for the whole run,
    started once on free loopback ports (native protocol, Kafka listener,
    metrics) in a temporary data dir, stopped at the end of the session.
    It is ``kafkalite.launcher.ServerProcess``: ``bootstrap``,
    ``kafka_bootstrap``, ``info`` (server.json), ``output()`` (its log).
    Its arguments come from the ``kafkalite_server_args`` fixture (override
    it in your conftest to change them; the default is one partition
    worker, no ingest gateway), after a config file giving each internal
    topic one partition (``SERVER_CONFIG``). ``server_process()`` builds
    the same server outside pytest (benchmarks/bench_startup.py uses it).

    ``kafkalite`` (function): a ``KafkaliteFixture`` for one test:
    ``bootstrap`` (host:port for kafkalite's own clients; they accept the
    Kafka address too), ``kafka_bootstrap`` (host:port for Kafka's clients:
    confluent-kafka, kafka-python, the Java tools), ``producer()`` /
    ``consumer()`` / ``admin()`` factories for kafkalite's clients (closed
    when the test ends), ``create_topic()``, and ``kafka_config()`` for a
    Kafka client's config dict. When the test ends, the topics and consumer
    groups it created are deleted, so the next test starts from an empty
    broker; a group whose consumer the test left open cannot be deleted and
    fails the test's teardown, naming it (close your consumers).

Start-up cost: a server is a supervisor process and its worker processes,
each importing what it needs of kafkalite; the supervisor starts its
workers first, so their start-ups overlap, and one worker keeps the server
to two processes on the machine's cores (figures in docs/testing.md, "Testing your
application"). It is paid once per session.

Who may call: pytest, through the fixtures; one ``KafkaliteFixture`` per test.
"""
from __future__ import annotations

import os

import pytest

from kafkalite.launcher import ServerProcess

# What ``kafkalite_server`` passes to ``kafkalite server`` besides the free
# ports: one worker (each worker is a process to start), no ingest gateway
# (another).
DEFAULT_SERVER_ARGS = ("--workers", "1", "--ingest-port", "-1")
# Written to a TOML file given before those arguments (a --config among them
# wins): the internal topics with one partition each, as Kafka test
# containers set offsets.topic.num.partitions=1. A fresh server opens every
# internal partition, fsyncing its checkpoint, before it is ready: 20
# partitions by default, about 0.15 s.
SERVER_CONFIG = {"offsets_topic_num_partitions": 1, "transaction_state_num_partitions": 1,
                 "share_coordinator_state_topic_num_partitions": 1}
# Internal topics (__consumer_offsets, __transaction_state) belong to the
# broker, which refuses to delete them.
_INTERNAL_PREFIX = "__"


class KafkaliteFixture:
    """One test's handle on the session's server: addresses, client
    factories, and the clean-up of what the test created."""

    def __init__(self, server: ServerProcess):
        self.server = server
        self.bootstrap: str = server.bootstrap
        self.kafka_bootstrap: str = server.kafka_bootstrap
        self._clients: list = []
        self._admin = None
        self._topics_before = self._topics()
        self._groups_before = self._groups()

    # ---- what a test uses --------------------------------------------------------------------

    def kafka_config(self, config: dict | None = None) -> dict:
        """A Kafka client's config: ``{"bootstrap.servers": kafka_bootstrap}``
        and ``config``."""
        return {"bootstrap.servers": self.kafka_bootstrap, **(config or {})}

    def producer(self, config: dict | None = None):
        """A kafkalite Producer on this server, closed when the test ends."""
        from kafkalite.client import Producer
        return self._track(Producer({"bootstrap.servers": self.bootstrap, **(config or {})}))

    def consumer(self, config: dict | None = None):
        """A kafkalite Consumer on this server, closed when the test ends."""
        from kafkalite.client import Consumer
        return self._track(Consumer({"bootstrap.servers": self.bootstrap, **(config or {})}))

    def admin(self, config: dict | None = None):
        """A kafkalite AdminClient on this server, closed when the test ends."""
        from kafkalite.client import AdminClient
        return self._track(AdminClient({"bootstrap.servers": self.bootstrap, **(config or {})}))

    def create_topic(self, name: str, partitions: int = 1, config: dict | None = None) -> None:
        """Create topic ``name`` with topic configs ``config``."""
        from kafkalite.client import NewTopic
        topic = NewTopic(name, partitions, config={k: str(v) for k, v in (config or {}).items()})
        self._admin_client().create_topics([topic])[name].result()

    def topics(self) -> set[str]:
        """The names of the topics on the server (internal ones left out)."""
        return self._topics()

    # ---- clean-up ----------------------------------------------------------------------------

    def _track(self, client):
        self._clients.append(client)
        return client

    def _admin_client(self):
        if self._admin is None:
            from kafkalite.client import AdminClient
            self._admin = AdminClient({"bootstrap.servers": self.bootstrap})
        return self._admin

    def _topics(self) -> set[str]:
        return {t for t in self._admin_client().list_topics(timeout=30).topics
                if not t.startswith(_INTERNAL_PREFIX)}

    def _groups(self) -> set[str]:
        return {g.group_id for g in self._admin_client().list_consumer_groups().result()}

    def close(self) -> None:
        """Close the clients the factories made, then delete the topics and
        groups that were not there when the test began."""
        for client in reversed(self._clients):
            try:
                client.close()
            except Exception:       # a client the test closed already, or broke on purpose
                pass
        self._clients.clear()
        try:
            admin = self._admin_client()
            groups = sorted(self._groups() - self._groups_before)
            busy = []
            if groups:
                for group, future in admin.delete_consumer_groups(groups).items():
                    try:
                        future.result()
                    except Exception as exc:
                        busy.append(f"{group} ({exc})")
            topics = sorted(self._topics() - self._topics_before)
            if topics:
                for future in admin.delete_topics(topics).values():
                    future.result()
        finally:
            if self._admin is not None:
                self._admin.close()
                self._admin = None
        if busy:
            raise RuntimeError(f"kafkalite.testing: consumer groups the test left members in "
                               f"could not be deleted: {', '.join(busy)}")


@pytest.fixture(scope="session")
def kafkalite_server_args() -> list[str]:
    """Arguments for ``kafkalite server`` (the ports are always free ones)."""
    return list(DEFAULT_SERVER_ARGS)


def server_process(directory: str, args=DEFAULT_SERVER_ARGS) -> ServerProcess:
    """The (unstarted) server ``kafkalite_server`` runs: data in
    ``directory``/data, ``SERVER_CONFIG`` in ``directory``/server.toml, then
    ``args`` (``kafkalite server`` flags)."""
    config = os.path.join(directory, "server.toml")
    with open(config, "w") as f:
        f.writelines(f"{key} = {value}\n" for key, value in SERVER_CONFIG.items())
    args = list(args)
    workers = 1
    if "--workers" in args:
        i = args.index("--workers")
        workers = int(args[i + 1])
        del args[i:i + 2]
    return ServerProcess(os.path.join(directory, "data"), workers=workers,
                         extra_args=["--config", config, *args])


@pytest.fixture(scope="session")
def kafkalite_server(tmp_path_factory, kafkalite_server_args):
    """An embedded kafkalite server for the test session."""
    server = server_process(str(tmp_path_factory.mktemp("kafkalite")), kafkalite_server_args)
    server.start()
    try:
        yield server
    finally:
        server.stop()
        server.kill()


@pytest.fixture
def kafkalite(kafkalite_server):
    """The session's server for one test; what the test created is deleted after it."""
    fixture = KafkaliteFixture(kafkalite_server)
    try:
        yield fixture
    finally:
        fixture.close()
