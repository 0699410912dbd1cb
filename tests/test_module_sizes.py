"""Size limits on kafkalite/ and spark/kafkalite_spark/ (issues 41, 73): no
module over 900 lines, no class over 40 methods, no function over 80
lines. A long module, class or function is where several jobs hide.

There is no waiver in a docstring: a file, class or function over its
limit is listed below, in the exception table of its kind, with its size
today and the reason it is not split yet (as tests/test_layers.py lists
its debts). The tables only shrink: a listed one that grew past its
listed size fails, and so does one back under the limit (or gone) that is
still listed. Splitting one means deleting its line here.

How things are measured: a module's lines are its newline characters; a
class's methods are the ``def``s right in its body (what it inherits from
its bases, mixins included, is counted where it is written); a function's
lines run from its ``def`` to its last line, decorators left out, and a
function nested in another is measured on its own too (named
``outer.inner``; a method ``Class.method``).

Each check was shown to fail on a planted violation; the checker itself is
tested below on a small tree of its own (test_the_checker_*).
"""
from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOPS = ("kafkalite", "spark/kafkalite_spark")
MODULE_LINES = 900
CLASS_METHODS = 40
FUNCTION_LINES = 80

# path: (lines today, why it is one module yet)
MODULE_EXCEPTIONS: dict[str, tuple[int, str]] = {
    "kafkalite/server/replica/replica_manager.py": (
        1235, "ReplicaManager is Kafka's class of that name, where a worker's data APIs meet "
              "its partitions, purgatory and fetchers; its class is listed below too"),
    "kafkalite/server/network/kafka_listener.py": (
        1015, "a connection's states (reading, TLS, SASL, ordered answers, throttling, "
              "closing) act on the same socket and buffers"),
    "kafkalite/client/admin.py": (
        1020, "AdminClient is one class a user imports, one method per admin call, and the "
              "result types those calls return"),
    "kafkalite/streams/runtime.py": (
        945, "KafkaStreams and its threaded variant share one life cycle (states, rebalance "
              "callbacks, tasks, exactly-once commits)"),
    "kafkalite/storage/log.py": (
        994, "append, read, retention, truncation, DeleteRecords and tiering change one "
             "segment list, offsets and producer state under one owner"),
    "kafkalite/server/auth/request_authorization.py": (
        939, "the authorization rules of every API, one table of Kafka's per-request checks"),
}

# "path::Class": (methods today, why it is one class yet)
CLASS_EXCEPTIONS: dict[str, tuple[int, str]] = {
    "kafkalite/storage/log.py::PartitionLog": (
        60, "Kafka's UnifiedLog: one owner of the segment list and the offsets' invariants"),
    "kafkalite/client/consumer.py::Consumer": (
        53, "confluent-kafka's Consumer API, which users call method by method"),
    "kafkalite/server/replica/replica_manager.py::ReplicaManager": (
        49, "Kafka's ReplicaManager: a worker's data APIs over its partitions"),
}

# "path::qualified name": (lines today, why it is one function yet)
FUNCTION_EXCEPTIONS: dict[str, tuple[int, str]] = {
    "kafkalite/bench/runner.py::_produce": (
        144, "a benchmark producer's timed loop; not split yet"),
    "kafkalite/server/node/worker.py::Worker.__init__": (
        130, "a partition worker's state, set up in one place; not split yet"),
    "kafkalite/bench/runner.py::run_driver": (
        116, "a benchmark run from start to report; not split yet"),
    "kafkalite/connect/worker.py::WorkerSinkTask.execute": (
        111, "a sink task's poll-put-commit loop; not split yet"),
    "kafkalite/server/replica/fetch_handler.py::FetchHandler.read_partitions": (
        110, "the Fetch API's per-partition read in Python; not split yet"),
    "kafkalite/server/node/roles.py::serve": (
        105, "the process's role changes (supervisor, broker node) and their retries in one "
             "loop; not split yet"),
    "kafkalite/server/config.py::ServerConfig.__post_init__": (
        103, "the settings' checks and derived values; not split yet"),
    "kafkalite/connect/worker.py::ExactlyOnceWorkerSourceTask.execute": (
        99, "an exactly-once source task's transaction loop; not split yet"),
    "kafkalite/streams/runtime.py::KafkaStreams._run": (
        98, "a Streams thread's life, start to close; not split yet"),
    "spark/kafkalite_spark/iceberg_topic.py::read_topic": (
        89, "a batch read over the Iceberg and the Kafka parts of a topic; not split yet"),
    "kafkalite/connect/avro_data.py::avro_schema_to_connect": (
        86, "one branch per Avro type, as Kafka's AvroData; not split yet"),
    "kafkalite/client/producer/api.py::Producer.__init__": (
        85, "the producer's settings read in one place; not split yet"),
    "kafkalite/connect/protobuf_data.py::connect_schema_to_proto": (
        81, "one branch per Connect type, as Confluent's ProtobufData; not split yet"),
}


def measure(root: Path = ROOT, tops=TOPS) -> tuple[dict, dict, dict]:
    """({module: lines}, {module::Class: methods}, {module::qualname: lines})
    of every .py file under ``tops``."""
    modules, classes, functions = {}, {}, {}
    for top in tops:
        for path in sorted((root / top).rglob("*.py")):
            source = path.read_text()
            rel = path.relative_to(root).as_posix()
            modules[rel] = source.count("\n")
            _walk(ast.parse(source), rel, "", classes, functions)
    return modules, classes, functions


def _walk(node, rel: str, prefix: str, classes: dict, functions: dict) -> None:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.ClassDef):
            name = prefix + child.name
            classes[f"{rel}::{name}"] = sum(
                isinstance(b, (ast.FunctionDef, ast.AsyncFunctionDef)) for b in child.body)
            _walk(child, rel, name + ".", classes, functions)
        elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            name = prefix + child.name
            # two defs of one name (a property's setter): the longer counts
            functions[f"{rel}::{name}"] = max(functions.get(f"{rel}::{name}", 0),
                                              child.end_lineno - child.lineno + 1)
            _walk(child, rel, name + ".", classes, functions)
        else:
            _walk(child, rel, prefix, classes, functions)


def problems(sizes: dict, limit: int, exceptions: dict, what: str) -> list[str]:
    """Over ``limit`` and not listed, grown past the listed size, or listed
    and no longer needed (under the limit, or gone)."""
    out = []
    for name, size in sorted(sizes.items()):
        listed = exceptions.get(name)
        if size > limit and listed is None:
            out.append(f"{name}: {size} {what}, over {limit} (split it)")
        elif listed is not None and size > listed[0]:
            out.append(f"{name}: {size} {what}, grown past its listed {listed[0]} "
                       f"(split it; the exception lists today's size, it is no allowance)")
        elif listed is not None and size <= limit:
            out.append(f"{name}: {size} {what}, within {limit}: remove its exception")
    out += [f"{name}: listed, but there is no such thing any more: remove its exception"
            for name in sorted(set(exceptions) - set(sizes))]
    return out


@functools.cache
def _measured() -> tuple[dict, dict, dict]:
    """The checkout's sizes, read once, when a test first asks: not at
    import, which every pytest-xdist worker does at collection (1.5 CPU-s
    each) whether or not it runs these tests."""
    return measure()


def test_no_module_over_900_lines():
    wrong = problems(_measured()[0], MODULE_LINES, MODULE_EXCEPTIONS, "lines")
    assert not wrong, ("modules over the limit (an unavoidable one goes in MODULE_EXCEPTIONS "
                       "in tests/test_module_sizes.py, with its reason):\n" + "\n".join(wrong))


def test_no_class_over_40_methods():
    wrong = problems(_measured()[1], CLASS_METHODS, CLASS_EXCEPTIONS, "methods")
    assert not wrong, ("classes over the limit (an unavoidable one goes in CLASS_EXCEPTIONS "
                       "in tests/test_module_sizes.py, with its reason):\n" + "\n".join(wrong))


def test_no_function_over_80_lines():
    wrong = problems(_measured()[2], FUNCTION_LINES, FUNCTION_EXCEPTIONS, "lines")
    assert not wrong, ("functions over the limit (an unavoidable one goes in "
                       "FUNCTION_EXCEPTIONS in tests/test_module_sizes.py, with its reason):\n"
                       + "\n".join(wrong))


def test_every_exception_gives_a_reason():
    for table in (MODULE_EXCEPTIONS, CLASS_EXCEPTIONS, FUNCTION_EXCEPTIONS):
        for name, (size, why) in table.items():
            assert size > 0 and len(why.split()) >= 3, f"{name}: give its size and a reason"


# ---- the checker on a tree of its own ----------------------------------------------------------

def _plant(tmp_path: Path, module_lines: int, methods: int, function_lines: int) -> Path:
    pkg = tmp_path / "kafkalite"
    pkg.mkdir()
    body = "".join(f"    def m{i}(self):\n        pass\n" for i in range(methods))
    long_function = "def long():\n" + "    x = 1\n" * (function_lines - 1)
    source = f"class Big:\n{body}\n\n{long_function}"
    source += "\n" * max(0, module_lines - source.count("\n"))
    (pkg / "planted.py").write_text(source)
    return tmp_path


def test_the_checker_finds_what_is_over_and_not_listed(tmp_path):
    modules, classes, functions = measure(_plant(tmp_path, 901, 41, 81), ("kafkalite",))
    assert problems(modules, MODULE_LINES, {}, "lines") == [
        "kafkalite/planted.py: 901 lines, over 900 (split it)"]
    assert problems(classes, CLASS_METHODS, {}, "methods") == [
        "kafkalite/planted.py::Big: 41 methods, over 40 (split it)"]
    assert problems(functions, FUNCTION_LINES, {}, "lines") == [
        "kafkalite/planted.py::long: 81 lines, over 80 (split it)"]


def test_the_checker_holds_a_listed_one_to_its_size_and_drops_it_when_split(tmp_path):
    modules, _, functions = measure(_plant(tmp_path, 950, 1, 10), ("kafkalite",))
    grown = problems(modules, MODULE_LINES, {"kafkalite/planted.py": (940, "why")}, "lines")
    assert grown and "grown past its listed 940" in grown[0]
    assert problems(modules, MODULE_LINES, {"kafkalite/planted.py": (950, "why")}, "lines") == []
    split = problems(functions, FUNCTION_LINES, {"kafkalite/planted.py::long": (90, "why")},
                     "lines")
    assert split == ["kafkalite/planted.py::long: 10 lines, within 80: remove its exception"]
    gone = problems(functions, FUNCTION_LINES, {"kafkalite/gone.py::f": (90, "why")}, "lines")
    assert gone == ["kafkalite/gone.py::f: listed, but there is no such thing any more: "
                    "remove its exception"]
