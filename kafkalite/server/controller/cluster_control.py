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


def _bracket(host: str) -> str:
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

    # ---- brokers -----------------------------------------------------------------------------

    def add_broker(self, broker_id: int) -> BrokerRegistration:
        """A broker of another node of the cluster, known from its first
        hello: the broker list grows to hold it (fenced until it registers)."""
        while len(self.brokers) <= broker_id:
            self.brokers.append(BrokerRegistration(len(self.brokers)))
        return self.brokers[broker_id]

    def register_broker(self, broker_id: int, port: int, kafka_port: int,
                        host: str | None = None, rack: str | None = None,
                        kafka_listeners: dict | None = None, adopted: bool = False) -> list[dict]:
        """A broker's process is up: it starts a new leadership of every
        partition it hosts. Returns the partitions to send it.

        ``adopted``: the process is not new but a running one that a
        restarted supervisor adopted (processes.take_workers). It holds
        its partitions as the metadata says (or learns the newer epochs
        from this answer), its followers follow it: its leaderships go on
        at their epochs, as a Kafka broker's survive a controller
        failover. A new epoch would make every follower truncate and
        fetch again and every client refresh its metadata, for nothing."""
        b = self.add_broker(broker_id)
        b.port, b.kafka_port, b.fenced = port, kafka_port, True
        b.kafka_listeners = dict(kafka_listeners or {})
        b.host, b.rack = host, rack
        if rack is not None:
            self.racks[broker_id] = rack
        started = [] if adopted else self.metadata.start_leadership(broker_id)
        log.info("broker %d registered on port %d; leading %d partitions", broker_id, port,
                 len(started))
        # The other live replicas of what it leads again follow its new epoch.
        by_broker: dict = {}
        for name, i, _ in started:
            topic = self.metadata.topics[name]
            if len(topic.partitions[i].replicas) > 1:
                self._assign(by_broker, topic, [i], skip=broker_id, fenced_too=True)
        self._notify(by_broker)
        return [self.partition_spec(t, i, broker_id)
                for t, i, _ in self.metadata.hosted_by(broker_id)]

    def unfence_broker(self, broker_id: int) -> None:
        self.brokers[broker_id].fenced = self.brokers[broker_id].restarting = False
        self.gone.discard(broker_id)

    def broker_endpoints(self) -> dict:
        """The brokers' native endpoints, for followers to fetch from (a
        registering broker's too: it is fenced until it confirms, and its
        followers are told of it before)."""
        host = self.config.host
        host = "127.0.0.1" if host in ("", "0.0.0.0", "*") else host
        return {str(b.broker_id): f"tcp://{_bracket(b.host or host)}:{b.port}"
                for b in self.brokers if b.port}

    def native_endpoint(self, broker_id: int) -> str | None:
        b = self.brokers[broker_id] if 0 <= broker_id < len(self.brokers) else None
        if b is None or b.fenced or not b.port:
            return None
        return f"tcp://{_bracket(b.host or self.config.public_host)}:{b.port}"

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

    def _kafka_endpoint(self, b: BrokerRegistration, listener_name: str | None):
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
                        else self._kafka_endpoint(b, listener_name))
            if endpoint is not None:
                nodes.append({"node_id": b.broker_id, "host": endpoint[0], "port": endpoint[1],
                              "rack": b.rack})
                serving = serving or not b.fenced
        if not serving:
            nodes.append({**self.controller_node(listener, listener_name), "rack": None})
        return nodes
