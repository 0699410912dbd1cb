"""v3's consumer groups' consumers, their assignments and the group's lags
(kafkalite/rest_proxy/v3_groups.py) over real HTTP against the session's
server, with a real consumer in the group, in Confluent's shapes. Before,
each of these paths was 404 (only the group and its lag summary were
served).
"""
from __future__ import annotations

from kafkalite.client import Consumer, Producer
from proxy_client import call


def test_a_groups_consumers_assignments_and_lags(server):
    url = server.info["rest_proxy"]
    cluster = call(f"{url}/v3/clusters")[1]["data"][0]["cluster_id"]
    c = f"{url}/v3/clusters/{cluster}"
    assert call(f"{c}/topics", "POST", {"topic_name": "crewed", "partitions_count": 2})[0] == 201
    producer = Producer({"bootstrap.servers": server.bootstrap})
    for i in range(10):
        producer.produce("crewed", b"v", partition=i % 2)
    producer.flush(10)
    producer.close()
    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "crew",
                         "client.id": "crew-1", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe(["crewed"])
    got = []
    for _ in range(150):
        m = consumer.poll(0.2)
        if m is not None and m.error() is None:
            got.append(m)
            if (m.partition(), m.offset()) in ((0, 1), (1, 4)):
                consumer.commit(m, asynchronous=False)    # partition 0 at 2 of 5, 1 at 5 of 5
        if len(got) == 10:
            break
    assert len(got) == 10
    group = f"{c}/consumer-groups/crew"
    try:
        consumers = call(f"{group}/consumers")[1]
        assert consumers["kind"] == "KafkaConsumerList" and len(consumers["data"]) == 1
        member = consumers["data"][0]
        assert (member["kind"], member["consumer_group_id"], member["client_id"]) == (
            "KafkaConsumer", "crew", "crew-1")
        mid = member["consumer_id"]
        assert member["assignments"]["related"] == f"{group}/consumers/{mid}/assignments"
        assert call(f"{group}/consumers/{mid}")[1] == member
        assert call(f"{group}/consumers/nobody")[0] == 404
        assignments = call(f"{group}/consumers/{mid}/assignments")[1]["data"]
        assert [(a["topic_name"], a["partition_id"]) for a in assignments] == [
            ("crewed", 0), ("crewed", 1)]
        assert assignments[0]["lag"]["related"] == f"{group}/lags/crewed/partitions/0"
        one = call(f"{group}/consumers/{mid}/assignments/crewed/partitions/1")[1]
        assert one["kind"] == "KafkaConsumerAssignment" and one["partition_id"] == 1
        lags = call(f"{group}/lags")[1]
        assert lags["kind"] == "KafkaConsumerLagList"
        assert [(x["partition_id"], x["current_offset"], x["log_end_offset"], x["lag"],
                 x["consumer_id"], x["client_id"]) for x in lags["data"]] == [
            (0, 2, 5, 3, mid, "crew-1"), (1, 5, 5, 0, mid, "crew-1")]   # the largest first
        assert call(f"{group}/lags/crewed/partitions/0")[1] == lags["data"][0]
        assert call(f"{group}/lags/crewed/partitions/7")[0] == 404
    finally:
        consumer.close()
    assert call(f"{c}/consumer-groups/nobody/consumers")[1]["error_code"] == 404


def test_a_partitions_replicas(server):
    url = server.info["rest_proxy"]
    cluster = call(f"{url}/v3/clusters")[1]["data"][0]["cluster_id"]
    c = f"{url}/v3/clusters/{cluster}"
    assert call(f"{c}/topics", "POST", {"topic_name": "replicated", "partitions_count": 2})[0] \
        == 201
    partition = call(f"{c}/topics/replicated/partitions/1")[1]
    replicas = call(partition["replicas"]["related"])[1]
    assert replicas["kind"] == "KafkaReplicaList" and len(replicas["data"]) == 1
    leader = replicas["data"][0]
    assert (leader["is_leader"], leader["is_in_sync"], leader["partition_id"]) == (True, True, 1)
    assert partition["leader"]["related"] == leader["metadata"]["self"]
    assert call(leader["metadata"]["self"])[1] == leader
    assert leader["broker"]["related"] == f"{c}/brokers/{leader['broker_id']}"
    held = call(f"{c}/brokers/{leader['broker_id']}/partition-replicas")[1]["data"]
    assert ("replicated", 1) in [(r["topic_name"], r["partition_id"]) for r in held]
    assert call(f"{c}/topics/replicated/partitions/1/replicas/99")[0] == 404
