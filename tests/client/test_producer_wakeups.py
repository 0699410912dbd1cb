"""When produce() wakes the producer's sender thread.

A record that opens a batch must get the sender to start that batch's
linger.ms timer, unless the sender is already due to wake before the batch's
deadline: with records spread over many partitions each opens a batch, and
a wake-up (a pipe write, a thread switch) per record would cost more than the
record. Checked against a real server by counting the wake pipe's writes."""
import os
import threading
import time

from harness import create, read_all, wait_until
from kafkalite.client import Producer


def _counting_wakes(monkeypatch, p):
    writes = []
    real = os.write

    def write(fd, data):
        if fd == p._wake_w:
            writes.append(time.monotonic())
        return real(fd, data)
    monkeypatch.setattr(os, "write", write)
    return writes


def _idle(p):
    """Until the sender has sent everything and sleeps."""
    assert p.flush(10) == 0
    wait_until(lambda: p._sender_sleeping, 5, "the sender to sleep", interval=0.001)
    time.sleep(0.01)    # into its sleep, not on its way there


def test_records_over_many_partitions_wake_the_sender_once_per_linger(server, topic_name,
                                                                      monkeypatch):
    create(server, topic_name, 100)
    delivered = []
    p = Producer(server.config(acks=1, **{"linger.ms": 200}))
    try:
        p.produce(topic_name, b"warm-up", partition=0)
        _idle(p)
        writes = _counting_wakes(monkeypatch, p)
        for i in range(100):
            p.produce(topic_name, b"%d" % i, partition=i,
                      on_delivery=lambda err, m: delivered.append((err, m.partition())))
            time.sleep(0.001)    # the sender may run between records, as in real use
        opened = len(writes)
        assert p.flush(10) == 0
    finally:
        p.close()
    # the sender sleeps until the first batch's deadline (or its 100 ms
    # look-round) at the latest: no later batch is due before that
    assert opened <= 3, f"{opened} wake-ups for 100 records"
    assert sorted(part for _, part in delivered) == list(range(100))
    assert all(err is None for err, _ in delivered)
    assert len(read_all(server, topic_name, 100, 101)) == 101


def test_a_batch_due_before_the_sender_wakes_wakes_it(server, topic_name, monkeypatch):
    create(server, topic_name, 1)
    p = Producer(server.config(acks=1, **{"linger.ms": 5}))
    try:
        p.produce(topic_name, b"warm-up")
        _idle(p)       # asleep for up to 100 ms with nothing to do
        writes = _counting_wakes(monkeypatch, p)
        for i in range(5):
            done, before = [], len(writes)
            p.produce(topic_name, b"%d" % i, on_delivery=lambda err, m: done.append(err))
            woke = len(writes) - before
            assert p.flush(10) == 0 and done == [None]
            _idle(p)
            assert woke == 1, "a record due in 5 ms must wake a sender asleep for 100"
    finally:
        p.close()


def test_a_worker_sent_a_request_takes_every_open_batch_it_leads(server, topic_name,
                                                                  monkeypatch):
    """Kafka's drain: when one partition's batch has lingered and goes to
    its leader, the open batches of the other partitions that worker leads
    go in the same request, lingered or not; a worker no batch is due for
    is not sent anything early. Records spread over many partitions made a
    request of 1.7 batches each before (2,900 requests/s for 5,000
    records/s), whatever linger.ms."""
    from kafkalite.client import tcp_link
    create(server, topic_name, 20)
    requests = []
    real = tcp_link.TcpLink.send

    def send(self, api_key, body, **kw):
        if api_key == 0:                 # Produce
            requests.append((self.endpoint, sorted(
                pd["index"] for t in body["topic_data"] for pd in t["partition_data"])))
        return real(self, api_key, body, **kw)

    p = Producer(server.config(acks=1, **{"linger.ms": 300, "kafkalite.transport": "tcp"}))
    try:
        p.produce(topic_name, b"warm-up", partition=0)
        _idle(p)
        monkeypatch.setattr(tcp_link.TcpLink, "send", send)
        leaders = {i: p._sending.meta.leader(topic_name, i) for i in range(20)}
        first = leaders[0]
        mine = sorted(i for i in range(20) if leaders[i] == first)
        others = sorted(i for i in range(20) if leaders[i] != first)
        assert len(mine) >= 2 and others          # both workers lead some
        p.produce(topic_name, b"first", partition=0)
        time.sleep(0.15)                         # partition 0's batch is half-way through
        for i in range(1, 20):
            p.produce(topic_name, b"%d" % i, partition=i)
        time.sleep(0.2)                          # 0 is due; the others 150 ms from due
        sent_by_then = list(requests)
        assert p.flush(10) == 0
    finally:
        p.close()
    # partition 0's request carried every partition its worker leads
    assert len(sent_by_then) == 1, sent_by_then
    assert sent_by_then[0][1] == mine
    # the other worker's batches went when theirs were due, in one request
    assert [r[1] for r in requests[1:]] == [others]
    assert len(read_all(server, topic_name, 20, 21)) == 21


def test_a_requests_answers_are_announced_to_poll_once(server, topic_name, monkeypatch):
    """Records over many partitions go out as one request per worker with a
    batch per partition: the sender tells a waiting poll() / flush() of the
    request's delivery reports once, when it has taken them all, not once
    per batch (a lock, a notify and their Python calls per record)."""
    create(server, topic_name, 100)
    delivered = []
    p = Producer(server.config(acks=1, **{"linger.ms": 200}))
    try:
        p.produce(topic_name, b"warm-up", partition=0)
        _idle(p)
        notified = []
        real = p._reported.notify_all

        def notify_all():
            notified.append(threading.current_thread().name)
            real()
        monkeypatch.setattr(p._reported, "notify_all", notify_all)
        for i in range(100):
            p.produce(topic_name, b"%d" % i, partition=i,
                      on_delivery=lambda err, m: delivered.append((err, m.partition())))
        assert p.flush(10) == 0
    finally:
        p.close()
    by_sender = notified.count("kafkalite-producer")
    # the 100 batches travel in a request or two per worker (2 workers)
    assert 1 <= by_sender <= 8, f"{by_sender} notifications for 100 batches"
    assert sorted(part for _, part in delivered) == list(range(100))
    assert all(err is None for err, _ in delivered)
