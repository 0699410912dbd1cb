"""A batch damaged on disk while the server was stopped (finding 7 of the
hardening issue): after a clean restart nothing rescans it, so before this
a fetch served it and librdkafka stalled on the bad CRC. Now the fetch
that meets it has the worker repair the partition at once, and Kafka's
own consumer reads every other record without a stall."""
from __future__ import annotations

import os
import time

import confluent_kafka as ck

from harness import ServerProcess, create
from kafkalite.client import Producer
from kafkalite.record import RecordBatch


def test_a_damaged_batch_costs_only_its_records_and_stalls_no_consumer(tmp_path):
    srv = ServerProcess(str(tmp_path / "data"), workers=1).start()
    try:
        create(srv, "d", 1)
        p = Producer(srv.config(**{"batch.num.messages": 10, "linger.ms": 0}))
        for i in range(400):
            p.produce("d", b"record-%05d" % i, partition=0)
            if i % 10 == 9:
                p.flush(10)
        assert p.flush(10) == 0
        p.close()
        assert srv.stop() == 0
        path = os.path.join(srv.data_dir, "d-0", "%020d.log" % 0)
        data = open(path, "rb").read()
        pos, batches = 0, []
        while pos < len(data):
            b = RecordBatch(data, pos)
            batches.append((pos, b.size_in_bytes, b.base_offset, b.last_offset))
            pos += b.size_in_bytes
        bpos, bsize, base, last = batches[len(batches) // 2]
        with open(path, "r+b") as f:              # one byte of a middle batch's records
            f.seek(bpos + bsize - 2)
            byte = f.read(1)[0]
            f.seek(bpos + bsize - 2)
            f.write(bytes([byte ^ 0x20]))
        srv.start()
        c = ck.Consumer({"bootstrap.servers": srv.kafka_bootstrap, "group.id": "damage",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        c.assign([ck.TopicPartition("d", 0, ck.OFFSET_BEGINNING)])
        got, deadline = [], time.monotonic() + 30
        while time.monotonic() < deadline and len(got) < 400 - (last - base + 1):
            for m in c.consume(500, 0.5):
                if m.error() is None:
                    got.append((m.offset(), m.value()))
        c.close()
        lost = set(range(base, last + 1))
        assert got == [(o, b"record-%05d" % o) for o in range(400) if o not in lost]
        assert "repaired" in srv.output()
    finally:
        srv.stop()
