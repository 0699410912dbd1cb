"""kafkalite with the producer on the shared-memory ring
(``kafkalite.transport: shm``): batches go through a ring in /dev/shm to the
partition worker instead of a ZeroMQ socket. A ring carries produce only;
consumers fetch on direct TCP links (kafkalite_tcp.py), the fastest
same-host fetch path, with the calls of kafkalite_zmq.py, whose server half
this reuses.
"""
from __future__ import annotations

import os

from kafkalite.bench.drivers.kafkalite_zmq import KafkaliteZmqDriver


class KafkaliteShmDriver(KafkaliteZmqDriver):
    name = "kafkalite-shm"
    label = "kafkalite, producer on the shared-memory ring, consumer on a direct TCP link"
    transport = "shm"
    consumer_transport = "tcp"

    def unavailable(self):
        if not os.path.isdir("/dev/shm"):
            return "no /dev/shm on this machine"
        return None
