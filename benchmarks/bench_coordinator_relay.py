"""What a worker's relay costs a Kafka client's group requests.

    python benchmarks/bench_coordinator_relay.py [--commits 2000] [--rounds 3] [--quick]

Kafka's clients find a group's coordinator with FindCoordinator, which
names a worker (Metadata lists the workers only); the worker relays the
group's requests to the supervisor, which coordinates every group. This
measures synchronous OffsetCommit requests (v8, one partition, one in
flight, as a consumer's commit(asynchronous=False) makes them) over a
plain socket, in the same run and against the same server:

- relayed: to the worker FindCoordinator names;
- direct: to the supervisor's own listener (the bootstrap address), the
  ceiling: the same request without the relay hop.

Rounds alternate between the two, taking turns going first; the first
round counts. Prints commits/s per round, the medians and the
relayed/direct ratio. Nothing fails on timing.
"""
from __future__ import annotations

import os
import socket
import struct
import sys
import tempfile
import time

from kafkalite.protocol import ApiKey, decode_response, encode_request
from kafkalite.launcher import ServerProcess

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from report import machine_info  # noqa: E402


class Wire:
    """One blocking Kafka connection."""

    def __init__(self, address: str):
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.correlation = 0

    def request(self, api_key: int, version: int, body: dict) -> dict:
        self.correlation += 1
        frame = encode_request(api_key, version, self.correlation, "bench", body)
        self.sock.sendall(struct.pack(">i", len(frame)) + frame)
        size, = struct.unpack(">i", self._exact(4))
        _, response = decode_response(api_key, version, self._exact(size))
        return response

    def _exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            buf += chunk
        return bytes(buf)


def commits_per_second(address: str, group: str, topic: str, n: int) -> float:
    wire = Wire(address)
    try:
        def commit(offset: int) -> None:
            r = wire.request(ApiKey.OFFSET_COMMIT, 8, {
                "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                "group_instance_id": None, "topics": [{"name": topic, "partitions": [
                    {"partition_index": 0, "committed_offset": offset,
                     "committed_leader_epoch": -1, "committed_metadata": None}]}]})
            code = r["topics"][0]["partitions"][0]["error_code"]
            if code:
                raise RuntimeError(f"OffsetCommit answered error {code}")
        commit(0)                                   # connection and group warm
        start = time.perf_counter()
        for i in range(1, n + 1):
            commit(i)
        return n / (time.perf_counter() - start)
    finally:
        wire.sock.close()


def main() -> None:
    ap = common.parser(__doc__)
    ap.add_argument("--commits", type=int, default=2000)
    common.add_rounds(ap, 3)
    common.add_quick(ap, "200 commits, 1 round")
    args = common.parse(ap, quick={"commits": 200, "rounds": 1})
    with tempfile.TemporaryDirectory() as work:
        info = machine_info(work)
        print(f"{info['logical_cores']} cores, load average at start "
              f"{info['load_average_at_start']}")
        srv = ServerProcess(os.path.join(work, "data"), workers=2).start()
        try:
            boot = Wire(srv.kafka_bootstrap)
            topic, group = "relay-bench", "relay-bench-group"
            boot.request(ApiKey.CREATE_TOPICS, 7, {"topics": [
                {"name": topic, "num_partitions": 1, "replication_factor": 1,
                 "assignments": [], "configs": []}], "timeout_ms": 30000,
                "validate_only": False})
            [found] = boot.request(ApiKey.FIND_COORDINATOR, 4, {
                "key_type": 0, "coordinator_keys": [group]})["coordinators"]
            boot.sock.close()
            relayed_at = f"{found['host']}:{found['port']}"
            address = {"relayed": relayed_at, "direct": srv.kafka_bootstrap}
            rounds = common.alternating(("relayed", "direct"), args.rounds, lambda side:
                                        commits_per_second(address[side], group, topic,
                                                           args.commits))
        finally:
            srv.stop()
    print(f"coordinator: worker {found['node_id']} (relays to the supervisor)")
    for name, values in rounds.values.items():
        print(f"{name:8} commits/s per round: {', '.join(f'{v:,.0f}' for v in values)}")
    ratio = [r / d for r, d in zip(rounds.values["relayed"], rounds.values["direct"])]
    print(f"relayed/direct per round: {', '.join(f'{x:.2f}' for x in ratio)}")
    common.say_table([common.Row("OffsetCommit, median", rounds.median("relayed"), "commits/s",
                                 rounds.median("direct"), "direct: the supervisor")])
    common.say_load(rounds)


if __name__ == "__main__":
    main()
