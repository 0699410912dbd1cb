"""The brokers of the cluster: their registrations, fencing, and where
clients and followers reach them (Kafka's ClusterControlManager).

A broker (a partition worker) is registered when its process is up
(``register_broker``) and fenced until it confirms its first assign
(``unfence_broker``); a broker whose process died is fenced
(``fence_broker``) and, unless its whole node is stopping, counted as gone
(``gone``) until it serves again, so that the partitions it left offline
come back with it (replication_control.py ``elect_offline``). Only
unfenced brokers are named to clients (``live_brokers``).

Node ids: on the native protocol the brokers are 0..n-1 and this process
is node -1 (``NATIVE_CONTROLLER_ID``); on Kafka's protocol the brokers keep
their ids, each with its Kafka listener's port, and this process
(controller and coordinators) is node 1000 (``KAFKA_CONTROLLER_ID``) at the
bootstrap address only: Metadata, DescribeCluster and FindCoordinator name
brokers, which relay to it.

Which process runs it: the supervisor holding the controller (lease), on
its single thread, through controller.py's ``Controller``. It imports
network/ (the listener kinds) and nothing else of the controller: the
other managers read it, it reads none of them.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

from kafkalite.server.network.requests import Listener

log = logging.getLogger("kafkalite.controller")

NATIVE_CONTROLLER_ID = -1
# The supervisor's node id on the Kafka wire, where its own listener (the
# bootstrap address) names itself; Metadata, DescribeCluster and
# FindCoordinator name brokers only (workers 0..n-1, and n never reaches
# 1000), which relay what they do not serve to it.
KAFKA_CONTROLLER_ID = 1000


def bracket(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


@dataclass
class BrokerRegistration:
    broker_id: int
    port: int = 0                 # native ZeroMQ ROUTER
    kafka_port: int = 0           # Kafka TCP listener
    fenced: bool = True
    # fenced because its process died, and its supervisor is starting it
    # again at the same endpoints, until it serves: Metadata still lists it
    # (live_brokers)
    restarting: bool = False
    host: str | None = None       # another node's (advertised) host; None: this node's
    rack: str | None = None       # its node, as Kafka's broker.rack
    # {listener name: (advertised host or None, port)} of each of its Kafka
    # listeners (listeners.py); empty: only ``kafka_port``, the primary's
    kafka_listeners: dict = field(default_factory=dict)


class ClusterControl:
    """The broker registrations (``brokers``, by id) and this process's own
    endpoints (``native_port``, ``kafka_port``, ``kafka_listeners``: set by
    the supervisor once bound)."""

    def __init__(self, config, broker_count: int):
        self.config = config
        self.brokers = [BrokerRegistration(i) for i in range(broker_count)]
        # broker id -> rack (its node, in a cluster); replicas go to distinct
        # racks where there are several
        self.racks: dict[int, str] = {}
        # this process's own endpoints, set by the supervisor once bound
        self.native_port = 0
        self.kafka_port = 0
        self.kafka_listeners: dict = {}   # {name: (advertised host or None, port)}
        # brokers fenced as gone (dead, silent, absent), until they serve again
        self.gone: set[int] = set()

    def add_broker(self, broker_id: int) -> BrokerRegistration:
        """A broker of another node of the cluster, known from its first
        hello: the broker list grows to hold it (fenced until it registers)."""
        while len(self.brokers) <= broker_id:
            self.brokers.append(BrokerRegistration(len(self.brokers)))
        return self.brokers[broker_id]

    def register_broker(self, broker_id: int, port: int, kafka_port: int,
                        host: str | None = None, rack: str | None = None,
                        kafka_listeners: dict | None = None) -> BrokerRegistration:
        """A broker's process is up, at these endpoints: registered, and
        fenced until it confirms its partitions."""
        b = self.add_broker(broker_id)
        b.port, b.kafka_port, b.fenced = port, kafka_port, True
        b.kafka_listeners = dict(kafka_listeners or {})
        b.host, b.rack = host, rack
        if rack is not None:
            self.racks[broker_id] = rack
        return b

    def unfence_broker(self, broker_id: int) -> None:
        self.brokers[broker_id].fenced = self.brokers[broker_id].restarting = False
        self.gone.discard(broker_id)

    def fence_broker(self, broker_id: int, gone: bool, restarting: bool = False) -> None:
        """``broker_id``'s process is gone; ``gone`` False: its whole node
        is stopping, so it is not counted among the brokers gone.
        ``restarting``: it died and its supervisor is starting it again
        (``live_brokers`` says why that matters)."""
        self.brokers[broker_id].fenced = True
        self.brokers[broker_id].restarting = restarting
        if gone:
            self.gone.add(broker_id)

    def broker_endpoints(self) -> dict:
        """The brokers' native endpoints, for followers to fetch from (a
        registering broker's too: it is fenced until it confirms, and its
        followers are told of it before)."""
        host = self.config.host
        host = "127.0.0.1" if host in ("", "0.0.0.0", "*") else host
        return {str(b.broker_id): f"tcp://{bracket(b.host or host)}:{b.port}"
                for b in self.brokers if b.port}

    def native_endpoint(self, broker_id: int) -> str | None:
        b = self.brokers[broker_id] if 0 <= broker_id < len(self.brokers) else None
        if b is None or b.fenced or not b.port:
            return None
        return f"tcp://{bracket(b.host or self.config.public_host)}:{b.port}"

    def controller_id(self, listener: Listener, listener_name: str | None = None) -> int:
        """The controller id Metadata and DescribeCluster give. Kafka's
        clients are told of brokers only (``live_brokers``), so on Kafka's
        protocol it is a live broker's id, as a KRaft cluster names a
        random broker: that broker relays what it does not serve (admin,
        group and transaction requests) to this process (relay.py), as
        Kafka's brokers forward to their controller. -1 while no broker is
        up."""
        if listener is not Listener.KAFKA:
            return NATIVE_CONTROLLER_ID
        live = self.live_brokers(listener, listener_name)
        return live[0]["node_id"] if live else -1

    def controller_node(self, listener: Listener, listener_name: str | None = None) -> dict:
        """This process as a node of ``listener``'s protocol: the native
        protocol's controller and coordinator; on Kafka's, the bootstrap
        address of the Kafka listener ``listener_name`` (None: the primary),
        which answers every request but is not among Metadata's brokers."""
        if listener is not Listener.KAFKA:
            return {"node_id": NATIVE_CONTROLLER_ID, "host": self.config.public_host,
                    "port": self.native_port}
        host, port = self.kafka_listeners.get(listener_name, (None, self.kafka_port))
        return {"node_id": KAFKA_CONTROLLER_ID, "host": host or self.config.public_host,
                "port": port}

    def kafka_endpoint(self, b: BrokerRegistration, listener_name: str | None):
        """(host, port) of broker ``b`` on the Kafka listener
        ``listener_name``; None when it has no listener of that name (a node
        of a cluster configured with other listeners): clients of that
        listener are not told of it."""
        if listener_name is None or not b.kafka_listeners:
            return b.host or self.config.public_host, b.kafka_port
        entry = b.kafka_listeners.get(listener_name)
        if entry is None:
            return None
        # a worker of this node leaves the host to the node's listener setting
        host = entry[0] or b.host or self.kafka_listeners.get(listener_name, (None, 0))[0]
        return host or self.config.public_host, entry[1]

    def live_brokers(self, listener: Listener, listener_name: str | None = None,
                     restarting: bool = False) -> list[dict]:
        """The nodes a client of ``listener`` may talk to: every unfenced
        broker, at its endpoint of the Kafka listener ``listener_name``; on
        Kafka's protocol, not this process (it holds no replica: a tool that
        places replicas on every broker Metadata lists would fail on it),
        though its listener still answers the clients bootstrapping there.
        While no broker is up (the server starting, every worker restarting)
        it is the one listed: a Metadata answer naming no broker at all made
        librdkafka drop every broker handle, the bootstrap one too, and its
        producers never asked again (compat/test_restarts.py, 2 runs in 6).

        A broker whose process died and is being started again at the
        same endpoints stays in Metadata's brokers (``restarting``), leading
        nothing, until it registers; it is never named controller or
        coordinator (those take the unfenced only). A Metadata answer that
        dropped it made librdkafka decommission its broker handle, and that
        handle, terminating, took back the partitions the same answer had
        just moved to their new leaders and parked them on no broker until
        the client's next leader query, 0.5-1 s later (the restart
        matrix's slowest worker kills). Kafka fences a dead broker only
        after its session timeout, so its clients meet this only when a
        broker leaves for good.
        """
        if listener is not Listener.KAFKA:
            host = self.config.public_host
            return [{"node_id": b.broker_id, "host": b.host or host, "port": b.port,
                     "rack": b.rack} for b in self.brokers if not b.fenced]
        nodes, serving = [], False
        for b in self.brokers:
            endpoint = (None if b.fenced and not (restarting and b.restarting)
                        else self.kafka_endpoint(b, listener_name))
            if endpoint is not None:
                nodes.append({"node_id": b.broker_id, "host": endpoint[0], "port": endpoint[1],
                              "rack": b.rack})
                serving = serving or not b.fenced
        if not serving:
            nodes.append({**self.controller_node(listener, listener_name), "rack": None})
        return nodes
