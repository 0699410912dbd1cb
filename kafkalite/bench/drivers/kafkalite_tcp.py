"""kafkalite with the producer and the consumer on direct TCP links, the clients' default
(``kafkalite.transport: tcp``, kafkalite/client/tcp_link.py): the same
client calls as kafkalite_zmq.py (whose server half this reuses), with each
request written to the worker's PLAINTEXT Kafka listener from the client's
own thread instead of through ZeroMQ's I/O threads.
"""
from __future__ import annotations

from kafkalite.bench.drivers.kafkalite_zmq import KafkaliteZmqDriver


class KafkaliteTcpDriver(KafkaliteZmqDriver):
    name = "kafkalite-tcp"
    label = "kafkalite, producer and consumer on direct TCP links to the worker"
    transport = "tcp"
    consumer_transport = "tcp"
