"""A batch damaged on disk while the server was stopped (finding 7 of the
first hardening round, item 4 of the second): after a clean restart nothing
rescans it. Its records were acknowledged, so they are never cut out behind
the readers' backs: a fetch stops in front of it, a fetch starting at it is
answered CORRUPT_MESSAGE (Kafka's error for a batch that fails its CRC),
and every reader hears of it -- librdkafka's consumer as an error event,
kafkalite's as a CorruptRecordError -- until it seeks past; `kafkalite
verify` names the batch, its offsets and where intact batches resume; the
segment file is left as it was."""
from __future__ import annotations

import os
import time

import confluent_kafka as ck
import pytest

from harness import ServerProcess, create, run_cli
from kafkalite import errors
from kafkalite.client import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from kafkalite.record import RecordBatch


@pytest.mark.processes
def test_a_damaged_batch_reaches_every_reader_as_an_error_and_stays_on_disk(tmp_path):
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
        size = os.path.getsize(path)
        srv.start()

        # librdkafka: every record before the batch, then errors at its offset
        c = ck.Consumer({"bootstrap.servers": srv.kafka_bootstrap, "group.id": "damage",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        c.assign([ck.TopicPartition("d", 0, ck.OFFSET_BEGINNING)])
        got, errs, deadline = [], [], time.monotonic() + 30
        while time.monotonic() < deadline and not (len(got) >= base and errs):
            for m in c.consume(500, 0.5):
                (errs if m.error() is not None else got).append(m)
        c.close()
        assert [(m.offset(), m.value()) for m in got] == [
            (o, b"record-%05d" % o) for o in range(base)]
        assert errs and errs[0].error().code() == ck.KafkaError.INVALID_MSG, errs[:1]
        assert f"offset {base}" in errs[0].error().str()

        # kafkalite's consumer: the records before it, then CorruptRecordError
        nc = Consumer(srv.config())
        try:
            nc.assign([TopicPartition("d", 0, OFFSET_BEGINNING)])
            got, deadline = [], time.monotonic() + 30
            with pytest.raises(errors.CorruptRecordError, match=f"d-0 at offset {base}"):
                while time.monotonic() < deadline:
                    got += nc.consume(1000, 0.5)
            assert [m.offset() for m in got] == list(range(base))
            # ...until it seeks past: the records after it are all there
            nc.seek(TopicPartition("d", 0, last + 1))
            after, deadline = [], time.monotonic() + 30
            while len(after) < 399 - last and time.monotonic() < deadline:
                after += nc.consume(1000, 0.5)
            assert [m.offset() for m in after] == list(range(last + 1, 400))
        finally:
            nc.close()
        assert "damaged batch" in srv.output()
    finally:
        srv.stop()
    # nothing was cut out: the file is as the damage left it, and verify
    # names the batch, its offsets and where intact batches resume
    assert os.path.getsize(path) == size
    out = run_cli("verify", srv.data_dir)
    assert out.returncode == 1
    report = out.stdout.decode()
    held = f"offset {base} is" if base == last else f"offsets {base} to {last} are"
    assert (f"damaged batch at position {bpos}" in report and held in report
            and f"resume at position {bpos + bsize}, offset {last + 1}" in report), report
