"""``kafkalite connect standalone WORKER.properties [CONNECTOR.properties|.json ...]``:
a standalone Connect worker, like Kafka's connect-standalone.sh;
``kafkalite connect distributed WORKER.properties``: a worker of a Connect
cluster (``group.id``, ``config.storage.topic``, ``status.storage.topic``,
``offset.storage.topic``), like connect-distributed.sh (connect/distributed/).

The worker properties use Kafka's keys (``bootstrap.servers``,
``key.converter``, ``value.converter``, ``offset.storage.file.filename``,
``offset.flush.interval.ms``, ``listeners`` or ``rest.host.name`` /
``rest.port``); without ``offset.storage.file.filename`` source offsets go
to the compacted ``offset.storage.topic`` (default ``connect-offsets``).
``kafkalite.client.protocol=kafka`` makes every client of the worker (the
offsets topic's here too) speak Kafka's protocol (connect/clients.py).
With a SASL ``security.protocol`` the REST API asks for HTTP Basic
credentials of the cluster's users (``rest.authentication``, rest_login.py).
Each connector file is Java properties or JSON (a config object, or
``{"name": ..., "config": {...}}``). The REST API then serves on
``rest.host.name:rest.port`` (default 127.0.0.1:8083) until SIGTERM or
Ctrl-C, when connectors stop and their offsets are committed.

Who calls: the ``kafkalite`` process (cli/__init__.py). This module stays light to
import (Flask only when run).
"""
from __future__ import annotations

import json
import signal
import threading
import urllib.parse

from kafkalite.cli.arguments import client_args

DESCRIPTION = ("Run a Kafka Connect worker: standalone (like connect-standalone.sh, connectors "
               "from properties/JSON files) or distributed (like connect-distributed.sh, a "
               "worker of the group.id cluster); Kafka Connect's REST API on rest.port. "
               "Worker setting rest.authentication: sasl (the default when the worker's "
               "security.protocol is SASL_PLAINTEXT or SASL_SSL) asks every REST call but GET / "
               "for HTTP Basic credentials (curl -u USER), checked by a SASL login to the "
               "brokers, and connectors act as the user who created them; none (the default "
               "otherwise) asks for none.")
HELP = "run a Kafka Connect worker (standalone or distributed)"


def add_arguments(sub) -> None:
    csub = sub.add_subparsers(dest="mode", required=True)
    s = csub.add_parser("standalone", help="one worker, offsets in a local file")
    s.add_argument("worker_config", metavar="WORKER.properties")
    s.add_argument("connectors", nargs="*", metavar="CONNECTOR.properties|.json")
    client_args(s)
    d = csub.add_parser("distributed", help="a worker of a Connect cluster (group.id): "
                                            "connectors, offsets and status in topics")
    d.add_argument("worker_config", metavar="WORKER.properties")
    client_args(d)


def read_config(path: str) -> dict:
    """A properties or JSON file as a dict of strings."""
    with open(path, "rb") as f:
        raw = f.read()
    text = raw.decode("utf-8")
    if text.lstrip().startswith("{"):
        doc = json.loads(text)
        if "config" in doc and isinstance(doc["config"], dict):
            doc = {**doc["config"], "name": doc.get("name", doc["config"].get("name"))}
        return {k: str(v) for k, v in doc.items() if v is not None}
    import javaproperties
    return dict(javaproperties.loads(text))


def rest_address(cfg: dict) -> tuple[str, int]:
    if cfg.get("listeners"):
        u = urllib.parse.urlsplit(cfg["listeners"].split(",")[0].strip())
        # port 0 asks for a free port (the REST API prints the one it got)
        return u.hostname or "127.0.0.1", 8083 if u.port is None else u.port
    return cfg.get("rest.host.name", "127.0.0.1"), int(cfg.get("rest.port", 8083))


def run(args) -> int:
    import faulthandler
    # SIGUSR1 prints every thread's stack to stderr (the worker's log), as
    # jstack does for Kafka's Connect worker: what a worker that will not
    # stop is waiting on can be read without stopping it
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    from kafkalite.connect import Herder, Worker
    from kafkalite.connect.errors import ConnectException
    from kafkalite.connect.offsets import FileOffsetStore, KafkaOffsetStore
    from kafkalite.connect.rest import RestServer
    from kafkalite.cli.client_config import default_bootstrap
    cfg = read_config(args.worker_config)
    if args.bootstrap_server or "bootstrap.servers" not in cfg:
        cfg["bootstrap.servers"] = args.bootstrap_server or default_bootstrap()
    from kafkalite.connect.clients import worker_client_config
    client = worker_client_config(cfg)      # the offsets topic's clients: the worker's own
    distributed = args.mode == "distributed"
    store = FileOffsetStore(cfg["offset.storage.file.filename"]) \
        if cfg.get("offset.storage.file.filename") and not distributed else \
        KafkaOffsetStore(client, cfg.get("offset.storage.topic", "connect-offsets"),
                         int(cfg.get("offset.storage.partitions", 25)))
    host, port = rest_address(cfg)
    worker = Worker(cfg, store)
    worker.start()
    if distributed:
        from kafkalite.connect.distributed import DistributedHerder
        herder = DistributedHerder(
            worker, cfg.get("group.id", "connect-cluster"),
            cfg.get("config.storage.topic", "connect-configs"),
            cfg.get("status.storage.topic", "connect-status"),
            int(cfg.get("session.timeout.ms", 10_000)),
            int(cfg.get("heartbeat.interval.ms", 1_000)))
    else:
        herder = Herder(worker)
    rest = RestServer(herder, host, port)
    worker.worker_id = f"{host}:{rest.port}"
    rest.start()
    if distributed:
        herder.start()
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    try:
        for path in getattr(args, "connectors", ()):
            conn = read_config(path)
            if not conn.get("name"):
                raise ValueError(f"{path}: the connector config has no name")
            try:
                herder.put_connector_config(conn["name"], conn, True)
            except ConnectException as e:
                # one line, as every command's refusals (BadConfig lists each bad key)
                errors = getattr(e, "errors", None)
                raise ValueError(f"{path}: " + ("; ".join(m for ms in errors.values()
                                                          for m in ms)
                                                if errors else str(e))) from None
            print(f"connector {conn['name']} created", flush=True)
        print(f"Kafka Connect REST API on {rest.url}", flush=True)
        done.wait()
    finally:
        rest.stop()
        herder.stop()
        worker.stop()
    return 0
