"""The CLI pointed at the wrong port, as a first-time user points it (issue
42): at the ingest gateway the README names after the tour, at a worker's
port seen in `ss` or a log, and a server started on a port that is taken.
Each must end within the command's timeout with one line that names what
is wrong: the ingest gateway's ZeroMQ PULL socket made ZeroMQ drop the
client's handshake and block its send for ever (6 of 7 tries hung, up to
200 s), a worker answered UNSUPPORTED_VERSION, a taken port came back as
KAFKA_STORAGE_ERROR."""
import time

from harness import free_port
from test_cli import _one_line_error, cli, cli_process

from kafkalite import errors
from kafkalite.client.connection import Connection
from kafkalite.protocol import ApiKey


def test_the_ingest_port_is_refused_at_once_with_its_reason(server):
    ingest = server.info["ingest"].removeprefix("tcp://")
    for _ in range(5):      # the hang came in most tries, not all: the drop races the send
        started = time.monotonic()
        line = _one_line_error(cli("topics", "list", "--bootstrap-server", ingest,
                                   "--timeout", "30"))
        took = time.monotonic() - started
        assert "not a kafkalite native port" in line, line
        assert "NETWORK_EXCEPTION" in line
        assert took < 10, f"{took:.1f} s"


def test_a_connection_to_the_ingest_port_never_blocks_a_send(server):
    """The link itself: whatever the handshake's timing, a request to a
    socket a DEALER cannot talk to ends in NetworkError, never in a send that
    blocks (the CLI above is one caller; the producer and consumer are
    others)."""
    for _ in range(5):
        started, conn = time.monotonic(), None
        try:
            # refused as it is made, or at the request's send
            conn = Connection(server.info["ingest"])
            conn.request(ApiKey.METADATA, {"topics": None, "allow_auto_topic_creation": False,
                                           "include_topic_authorized_operations": False},
                         timeout=30)
        except errors.NetworkError as exc:
            assert "not a kafkalite native port" in str(exc)
        else:
            raise AssertionError("the ingest gateway answered Metadata")
        finally:
            if conn is not None:
                conn.close()
        assert time.monotonic() - started < 5


def test_a_workers_port_names_the_servers_port(server):
    worker = server.info["workers"][0]["endpoint"].removeprefix("tcp://")
    line = _one_line_error(cli("topics", "list", "--bootstrap-server", worker))
    assert "a worker's port serves its partitions only" in line, line
    assert server.bootstrap in line


def test_a_taken_port_is_named_without_a_kafka_error_code(server):
    native_port = server.bootstrap.rsplit(":", 1)[1]
    out = cli_process("server", "--data-dir", "/nonexistent-not-used", "--port", native_port,
                      "--kafka-port", str(free_port()), "--ingest-port", "-1",
                      "--metrics-port", "-1", "--worker-base-port", "0",
                      "--kafka-worker-base-port", "0")
    line = _one_line_error(out)
    assert f"cannot listen on 127.0.0.1:{native_port}" in line, line
    assert "choose another port" in line and "KAFKA_STORAGE_ERROR" not in line
    # the process holding it is named: the running server's supervisor
    assert f"held by pid {server.info['pid']} (" in line and "kafkalite" in line, line


def test_a_taken_kafka_port_names_its_holder(server):
    kafka_port = server.kafka_bootstrap.rsplit(":", 1)[1]
    started = time.monotonic()
    out = cli_process("server", "--data-dir", "/nonexistent-not-used", "--port", str(free_port()),
                      "--kafka-port", kafka_port, "--ingest-port", "-1",
                      "--metrics-port", "-1", "--worker-base-port", "0",
                      "--kafka-worker-base-port", "0")
    line = _one_line_error(out)
    assert f"cannot listen for Kafka clients on 127.0.0.1:{kafka_port}" in line, line
    assert f"held by pid {server.info['pid']} (" in line, line
    print(f"refused in {time.monotonic() - started:.2f} s")


def test_every_command_ends_with_one_line_at_a_silent_server_and_at_the_http_port(server):
    """No command waits past its timeout at a port that accepts and never
    answers (a silent TCP server), nor at the HTTP port; each says what it
    met in one line. (The bootstrap tries the native protocol, then Kafka's:
    two waits of --timeout at most.)"""
    import socket
    import threading
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(64)
    accepted = []
    stop = threading.Event()

    def accept():
        silent.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(silent.accept()[0])
            except OSError:
                pass
    threading.Thread(target=accept, daemon=True).start()
    http = server.info["metrics"].split("//")[1].split("/")[0]
    try:
        for where in (f"127.0.0.1:{silent.getsockname()[1]}", http):
            for args, stdin in ((("topics", "list"), b""), (("consume", "t", "-e"), b""),
                                (("groups", "list"), b""), (("cluster", "info"), b""),
                                (("produce", "t"), b"x\n")):
                started = time.monotonic()
                # a second's --timeout: the wait is what is checked, not its length
                line = _one_line_error(cli(*args, "--bootstrap-server", where,
                                           "--timeout", "1", stdin=stdin))
                took = time.monotonic() - started
                assert took < 2 * 1 + 3, (args, where, f"{took:.1f} s", line)
                assert where in line, line
    finally:
        stop.set()
        silent.close()
        for c in accepted:
            c.close()
