"""kafkalite.testing as a user's suite uses it: a real inner pytest run
(pytester, in a subprocess) with the plugin enabled in its conftest, a real
server, confluent-kafka on the Kafka listener and kafkalite's own clients."""
import pytest

from harness import processes_with

pytestmark = pytest.mark.processes      # every test runs an inner pytest in a subprocess

INNER_TESTS = '''
import time

from confluent_kafka import Consumer, Producer


def test_1_confluent_kafka_on_the_kafka_listener(kafkalite):
    kafkalite.create_topic("orders", partitions=2)
    producer = Producer(kafkalite.kafka_config())
    for i in range(4):
        producer.produce("orders", key=str(i), value=f"order-{i}")
    assert producer.flush(20) == 0
    consumer = Consumer(kafkalite.kafka_config({"group.id": "billing",
                                                "auto.offset.reset": "earliest"}))
    try:
        consumer.subscribe(["orders"])
        got, deadline = [], time.monotonic() + 30
        while len(got) < 4 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value().decode())
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    assert sorted(got) == [f"order-{i}" for i in range(4)]
    assert kafkalite.topics() == {"orders"}
    assert [g.group_id for g in kafkalite.admin().list_consumer_groups().result()] == ["billing"]


def test_2_starts_from_an_empty_broker(kafkalite):
    assert kafkalite.topics() == set()
    assert kafkalite.admin().list_consumer_groups().result() == []
    # kafkalite's own clients, by the factories (auto-creating the topic)
    producer = kafkalite.producer()
    producer.produce("orders", b"again")
    assert producer.flush(20) == 0
    assert kafkalite.topics() == {"orders"}


def test_3_the_kafka_address_works_for_kafkalite_clients_too(kafkalite):
    assert kafkalite.topics() == set()
    admin = kafkalite.admin({"bootstrap.servers": kafkalite.kafka_bootstrap})
    assert "__no_such_topic" not in admin.list_topics(timeout=10).topics
'''


def test_the_plugin_in_a_users_suite(pytester):
    pytester.makeconftest('pytest_plugins = ["kafkalite.testing"]\n')
    pytester.makepyfile(test_orders=INNER_TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-v", timeout=180)
    result.assert_outcomes(passed=3)
    # the session's server stopped with the session: no process runs in its data dir
    assert processes_with(str(pytester.path)) == []


def test_a_group_left_with_members_fails_the_teardown_by_name(pytester):
    pytester.makeconftest('pytest_plugins = ["kafkalite.testing"]\n')
    pytester.makepyfile(test_leaky='''
import time

def test_leaves_a_member(kafkalite):
    from kafkalite.client import Consumer
    kafkalite.create_topic("t")
    consumer = Consumer({"bootstrap.servers": kafkalite.bootstrap, "group.id": "leaky"})
    consumer.subscribe(["t"])
    deadline = time.monotonic() + 20
    while not consumer.assignment() and time.monotonic() < deadline:
        consumer.poll(0.2)
    assert consumer.assignment()
    test_leaves_a_member.consumer = consumer      # not closed: its member stays
''')
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=180)
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*could not be deleted: leaky*"])


def test_enabled_with_dash_p_and_server_args_overridden(pytester):
    pytester.makeconftest('''
import pytest

@pytest.fixture(scope="session")
def kafkalite_server_args():
    return ["--workers", "2", "--ingest-port", "-1", "--default-partitions", "3"]
''')
    pytester.makepyfile(test_args='''
def test_two_workers(kafkalite, kafkalite_server):
    assert len(kafkalite_server.info["workers"]) == 2
    producer = kafkalite.producer()
    producer.produce("auto", b"x")
    assert producer.flush(20) == 0
    assert len(kafkalite.admin().list_topics("auto", timeout=10).topics["auto"].partitions) == 3
''')
    result = pytester.runpytest_subprocess("-p", "kafkalite.testing", "-p", "no:cacheprovider",
                                           timeout=180)
    result.assert_outcomes(passed=1)
