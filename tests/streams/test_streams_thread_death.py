"""A Streams application whose stream threads all died does not carry on
doing nothing (issue 42: with rocksdict missing the README's example printed
tracebacks from its threads and exited 0): the process exits with status 1
and one line saying why, unless the application set an uncaught exception
handler, which is told instead.

Each application runs as a process of its own, as a user's would; its one
record that fails processing (the default handler, log_and_fail, stops the
thread) is on every partition, so every thread meets one.
"""
import subprocess
import sys
import textwrap

import pytest

from harness import child_env, create

APP = textwrap.dedent("""
    import sys, time
    from kafkalite.client import Producer
    from kafkalite.streams import KafkaStreams, StreamsBuilder

    bootstrap, topic, app_id, threads, handler, state_dir = sys.argv[1:]
    p = Producer({"bootstrap.servers": bootstrap})
    for part in range(2):
        p.produce(topic, b"0", partition=part)       # 1 // 0 fails the thread
    p.flush(10)
    b = StreamsBuilder()
    b.stream(topic).map_values(lambda v: str(1 // int(v)).encode()).to(topic + "-out")
    streams = KafkaStreams(b.build(), {"application.id": app_id, "bootstrap.servers": bootstrap,
                                       "num.stream.threads": int(threads),
                                       "state.dir": state_dir})
    if handler == "handler":
        streams.set_uncaught_exception_handler(lambda exc: print("handled", repr(exc),
                                                                 flush=True))
    streams.start()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and streams.state != KafkaStreams.ERROR:
        time.sleep(0.05)
    print("state", streams.state, flush=True)
    while handler != "handler":
        time.sleep(0.1)         # a user's main thread, waiting for ever
    time.sleep(0.5)             # the handler runs once the thread is gone
    streams.close()
""")


def _run(server, tmp_path, topic, threads, handler):
    create(server, topic, partitions=2)
    script = tmp_path / "app.py"
    script.write_text(APP)
    return subprocess.run([sys.executable, str(script), server.bootstrap, topic, topic,
                           str(threads), handler, str(tmp_path / "state")],
                          env=child_env(), capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("threads", [1, 2])
def test_every_thread_dead_exits_1_with_one_line(server, tmp_path, topic_name, threads):
    """On the old code the process printed a traceback per thread and its
    main thread waited for ever (the run timed out)."""
    run = _run(server, tmp_path, f"{topic_name}-{threads}", threads, "none")
    assert run.returncode == 1, (run.stdout, run.stderr)
    assert "Traceback" not in run.stderr, run.stderr
    last = run.stderr.strip().splitlines()[-1]
    assert "every stream thread died: StreamsException: processing error" in last, run.stderr
    assert "ZeroDivisionError" in last and last.endswith("exiting with status 1")


def test_a_handler_is_told_and_the_process_carries_on(server, tmp_path, topic_name):
    run = _run(server, tmp_path, topic_name, 2, "handler")
    assert run.returncode == 0, run.stderr
    assert "state ERROR" in run.stdout
    assert run.stdout.count("handled StreamsException") == 1, run.stdout
