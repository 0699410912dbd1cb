"""A script that ends with a client still open exits, at once.

Each case is a real child process that uses one client against the
module's server and ends without close(), as short scripts and notebooks
do. An AdminClient left open used to hang its process for ever at exit:
its ZeroMQ context's __del__, collected while the interpreter finalized,
started a thread that could never run and waited for it to start.
"""
import subprocess
import sys
import textwrap

import pytest

from harness import child_env

SCRIPTS = {
    "admin": """
        from kafkalite.client.admin import AdminClient, NewTopic
        admin = AdminClient({"bootstrap.servers": BOOT})
        for f in admin.create_topics([NewTopic(TOPIC, 1)]).values():
            f.result()
        assert TOPIC in admin.list_topics(timeout=10).topics
    """,
    "producer": """
        from kafkalite.client.producer import Producer
        producer = Producer({"bootstrap.servers": BOOT})
        producer.produce(TOPIC, b"v")
        assert producer.flush(10) == 0
    """,
    "producer-tcp": """
        from kafkalite.client.producer import Producer
        producer = Producer({"bootstrap.servers": BOOT, "kafkalite.transport": "tcp"})
        producer.produce(TOPIC, b"v")
        assert producer.flush(10) == 0
    """,
    "consumer": """
        from kafkalite.client.consumer import Consumer
        consumer = Consumer({"bootstrap.servers": BOOT, "group.id": TOPIC,
                             "auto.offset.reset": "earliest"})
        consumer.subscribe([TOPIC])
        consumer.poll(1)
    """,
    # all three at once, the admin first: the order module teardown drops them in
    "all": """
        from kafkalite.client.admin import AdminClient
        from kafkalite.client.consumer import Consumer
        from kafkalite.client.producer import Producer
        admin = AdminClient({"bootstrap.servers": BOOT})
        admin.list_topics(timeout=10)
        producer = Producer({"bootstrap.servers": BOOT})
        producer.produce(TOPIC, b"v")
        assert producer.flush(10) == 0
        consumer = Consumer({"bootstrap.servers": BOOT, "group.id": TOPIC + "-all",
                             "auto.offset.reset": "earliest"})
        consumer.subscribe([TOPIC])
        consumer.poll(1)
    """,
}


@pytest.mark.parametrize("kind", list(SCRIPTS))
def test_script_ending_with_an_open_client_exits(server, topic_name, kind):
    script = (f"BOOT = {server.bootstrap!r}\nTOPIC = {topic_name!r}\n"
              + textwrap.dedent(SCRIPTS[kind]) + "print('end of script', flush=True)\n")
    try:
        done = subprocess.run([sys.executable, "-c", script], env=child_env(), capture_output=True,
                              text=True, timeout=30)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{kind}: the process did not exit within 30 s of its script "
                    f"(stdout {e.stdout!r})")
    assert done.stdout.strip() == "end of script", done.stderr
    assert done.returncode == 0, done.stderr
    # the interpreter's own complaints at exit ("Exception ignored in ... __del__")
    assert "Exception ignored" not in done.stderr, done.stderr
