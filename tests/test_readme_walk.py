"""Every snippet of the README and of the docs/ pages runs as pasted and
does what its text says (issue 42): each page's walk (tests/readme_walk.py)
in a network namespace and a directory of its own, top to bottom as its
reader pastes it (issue 74: a block meets what the blocks above it made),
with the README's own server on its default ports for a page whose first
blocks need one; a page that needs a server of other settings stops the
running one (``kafkalite server-stop``) and starts its own. A section
that a reader arriving from a link reads alone names the section it
follows (``after``), for that reader.
The pages the code generates (``GENERATED``) hold usage text and tables, no
session: they are left out, and the list is checked against the generator.

The walk's checks are first shown to catch what they are for: a snippet
that fails, one whose thread dies while the process exits 0, one that does
not print what it promises, one that never ends and a background process
that dies after its block (``test_the_walk_catches_a_planted_fault``), and
the Streams example (docs/streams.md) without rocksdict. Sections that need what
this machine may lack (Spark and Java; PostgreSQL's server and psql) are
passed over by their page's walk and skipped by name, saying why
(``test_readme_section_left_out_here``); the CI installs everything.
"""
import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

import pytest

import postgres
import readme_walk
from harness import child_env

pytestmark = [pytest.mark.xdist_group("readme_walk"), pytest.mark.processes,
              pytest.mark.skipif(readme_walk.unusable() is not None,
                                 reason=str(readme_walk.unusable()))]

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
# written by `python -m kafkalite.tools.gen_docs` from the code: every command's
# usage and every setting, nothing to run (test_generated_pages_are_the_generators)
GENERATED = {"docs/cli.md", "docs/configuration.md"}
PAGES = ["README.md"] + sorted(
    str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")
    if str(p.relative_to(ROOT)) not in GENERATED)
WALKS = [w for page in PAGES for w in readme_walk.walks((ROOT / page).read_text(), page)]
# each page as its reader runs it: top to bottom, in one directory (issue 74)
PAGE_WALKS = [readme_walk.page_walk((ROOT / page).read_text(), page) for page in PAGES]
SERVER = readme_walk.server_command(README.read_text())

# What a block says it prints, per page: a piece of its code -> regexes its
# output must match (multi-line mode). Each key must name exactly one block
# of its page.
EXPECT = {"docs/tiered-storage.md": {
    'print("offsets", low': [r"^offsets 0 to 3000 - first record: 0 b'event 0'$"],
}, "README.md": {
    "kafkalite consume orders --from-beginning --print-key --max-messages 3":
        [r"^alice\tpizza$", r"^bob\tsushi$", r"^alice\tsalad$", r"Partition: 3"],
    'p.produce("orders", b"pizza", key=b"alice"': [r"^None \d+$"],
}, "docs/quickstart.md": {
    "kafkalite consume orders --from-beginning --print-key --max-messages 3":
        [r"^alice\tpizza$", r"^bob\tsushi$", r"^alice\tsalad$", r"Partition: 3"],
    'p.produce("orders", b"pizza", key=b"alice"': [r"^None \d+$"],
    'print("got", tps)': [r"^got \[TopicPartition\('orders', 0"],
    "kafkalite groups describe billing ": [r"^orders +\d +[1-9]\d* +[1-9]\d* +0 ",
                                           r"Reset the offsets of 4 partition"],
    # the server's workers: one per two cores, so broker 0 on any machine
    "kafkalite cluster info": [r"^0 +127\.0\.0\.1 +7100$", r"^billing +- +- +Empty +0$",
                               r"^orders +3 +Successful$"],
    '"group.protocol": "consumer"': [r"^orders \d b'(pizza|sushi|salad|v\d+)'$"],
}, "docs/security.md": {
    "print(p.flush(10))\"": [r"^0$"],
    "kcat -b 127.0.0.1:9092 -X security.protocol=SASL_SSL": [r"^ \d+ brokers:$",
                                                            r"^  broker 0 at 127\.0\.0\.1:9100"],
    "from confluent_kafka import Producer\n": [r"^0$"],
    '"curve.secret.key": "keys/clients/alice.key_secret"})': [r"^0$"],
    "kafkalite acls list --topic orders --command-config": [r"GROUP:LITERAL:billing\tUser:alice"],
    "kafkalite client-quotas describe": [r"client-id 'etl' are producer_byte_rate"],
}, "docs/transactions.md": {
    "transactional.id\": \"copier-1\"": [r"^copied 10$"],
    "kafkalite transactions describe copier-1": [r"^copier-1 +\d+ +\d+ +CompleteCommit"],
}, "docs/share-groups.md": {
    "worker.acknowledge(msg, AcknowledgeType.REJECT)": [r"^b'job 9' delivery 1$"],
    "kafkalite share-groups describe workers": [r"^workers +jobs +0 +\d+ +0$",
                                                r"Deleted share group workers"],
}, "docs/replication.md": {
    "kafkalite topics describe payments": [r"Partition: 5\tLeader: 2\tReplicas: 2,0,1\tIsr: 2,0,1",
                                           r"Reassigning payments-0 to 2,0,1"],
}, "docs/operations.md": {
    "curl -s 127.0.0.1:9404/metrics": [r"^# TYPE kafka_server_brokertopicmetrics_bytesin_total",
                                       r'"status": "ok"', r"kafkalite health: ok"],
}, "docs/schema-registry.md": {
    "curl -s http://127.0.0.1:8081/subjects/users-value/versions/latest; echo":
        [r'^\{"id": 1\}', r'"subject": ?"users-value"', r"^users-value$"],
    "kafkalite schemas check users-value --schema '": [r'^\{"id": 1\}', r"^incompatible with users-value: "],
    'print("dish:", deserialize(': [r"^dish: pizza$", r"^dish: sushi$"],
    'print("person:", msg.value())': [r"^person: \{'name': 'ada'\}$"],
    'df.select("value.item", "value.count").show()': [r"\|pizza\| +2\|", r"\|sushi\| +5\|"],
    'print("big click:", msg.value())': [r"^big click: \{'user': 'bob', 'count': 5\}$"],
    "subjects/payments-value/versions; echo": [r'^\{"id": \d+\}$', r'^\{"error_code": 40301, '
                                               r'"message": "User:alice is denied operation '
                                               r'Write on Subject: payments-value"\}$'],
}, "docs/rest-proxy.md": {
    'topics/payroll/records"; echo': [r'"topic_name": "orders", "partition_id": 0, "offset": 0',
                                      r'^\{"error_code": 40301, "message": "Not authorized to '
                                      r'access topics: \[payroll\]"\}$'],
    "instances/p1/records?timeout=1000'": [r'^\{"key_schema_id": null, "value_schema_id": 1, ',
                                           r'"value": \{"type": "AVRO", "size": 13, '
                                           r'"subject": null, "schema_id": 1\}',
                                           r'"value": \{"amount": 9\.5\}.*'
                                           r'"value": \{"amount": 12\.0\}'],
}, "docs/streams.md": {
    "while streams.state != KafkaStreams.RUNNING": [r"^RUNNING$"],
}, "docs/connect.md": {
    "kafkalite connect standalone worker.properties": [r"^pizza$", r"^sushi$",
                                                        r'"tasks":\[\{"id":0,"state":"RUNNING"'],
    "kafkalite consume pg-orders": [r"pizza", r"sushi"],
}, "docs/spark.md": {
    "kafkalite_spark.register(spark)": [r"\|alice\| home\| +0\|"],
}, "docs/iceberg-topics.md": {
    'print(rows.num_rows, "rows;"': [r"^1000 rows; \[\s*1000: redpanda_timestamp_hour: hour\(5\)"],
    "FROM read_parquet($files) GROUP BY ALL": [r"user-\d+ +│ +20 │"],
    "print(catalog.list_namespaces(), catalog.list_tables": [
        # orders too after the page's Redpanda example, whose topic is an Iceberg topic
        r"^\[\('kafkalite',\)\] \[\('kafkalite', 'clicks'\)(, \('kafkalite', 'orders'\))?\]$",
        r"^1000 rows at file://"],
    "SELECT count(*) AS records FROM read_parquet": [r"│ +1000 │"],
    "curl -s http://127.0.0.1:8181/v1/namespaces/kafkalite/tables/no-such-topic": [
        r'"type": "NoSuchTableException", "code": 404'],
    "kafkalite_spark.read_topic(spark": [
        r"^1000 records; the table's part read by Spark's Parquet reader$"],
}, "docs/sql.md": {
    "kafkalite sql --format json": [r"^customer +orders$", r"^alice +2$", r"^bob +1$",
                                    r"^\(2 rows\)$",
                                    r'^\{"partition":\d,"offset":0,"dish":"pizza"\}$',
                                    r'^\{"partition":\d,"offset":1,"dish":"salad"\}$'],
    "SELECT max(\"offset\") AS last FROM orders": [r"^records$", r"^3$", r"^\(1 row\)$"],
    "SELECT customer, sum(amount) AS total FROM payments": [r"^alice +39\.75$",
                                                           r"^bob +12\.0$"],
    "kill -INT $follower": [r"^stopped with status 130$", r"^dish$", r"^ramen$"],
    '"SELECT * FROM ordrs"': [r'^\{"row":\{"columns":\["alice",2\]\}\},$',
                              r'"unknown topic ordrs \(did you mean \'orders\'\?\)'],
    'kafkalite sql "SELECT nope FROM orders"': [r'^kafkalite sql: unknown column "nope"'],
    'kafkalite sql "TERMINATE CTAS_ORDERS_PER_DAY_0"': [
        r"^CTAS_ORDERS_PER_DAY_0 +Created query with ID CTAS_ORDERS_PER_DAY_0: orders -> "
        r"orders_per_day$",
        # (the page's walk: the orders of its sections above; a section's: 2 and 1)
        r'^\{"customer":"alice","orders":\d,"last_dish":"\w+","WINDOWSTART":\d+,'
        r'"WINDOWEND":\d+\}$',
        r'^\{"customer":"bob","orders":\d,"last_dish":"\w+","WINDOWSTART":\d+,'
        r'"WINDOWEND":\d+\}$',
        r"^CTAS_ORDERS_PER_DAY_0 +Query CTAS_ORDERS_PER_DAY_0 terminated$"],
    'kafkalite sql "TERMINATE CSAS_ALICE_ORDERS_0"': [
        r"^CSAS_ALICE_ORDERS_0 +Created query with ID CSAS_ALICE_ORDERS_0: orders -> "
        r"alice_orders$", r'^alice\t\{"dish":"pizza","offset":0\}$',
        r'^alice\t\{"dish":"salad","offset":1\}$',
        r"^CSAS_ALICE_ORDERS_0 +Query CSAS_ALICE_ORDERS_0 terminated$"],
    "session.query(\"SELECT * FORM orders\")": [r"^\[\{'customer': '(alice|bob)', 'n': \d\}",
                                                 r"^syntax syntax error at or near \"orders\""],
}, "docs/features.md": {
    "log = PartitionLog.open": [r"^\[0\] \[b'value'\]$"],
}, "docs/testing.md": {
    "def test_orders_round_trip(kafkalite)": [r"^2 passed"],
}}

# What a section needs beyond the base install, and how to tell it is there.
NEEDS = {
    ("docs/spark.md", "Spark"): lambda: (None if importlib.util.find_spec("pyspark") and shutil.which("java")
                      else "needs pyspark (pip install -e '.[spark]') and a Java runtime"),
    ("docs/schema-registry.md", "Spark"): lambda: (None if importlib.util.find_spec("pyspark") and shutil.which("java")
                      else "needs pyspark (pip install -e '.[spark]') and a Java runtime"),
    ("docs/iceberg-topics.md", "Reading it from Spark"): lambda: (
        None if importlib.util.find_spec("pyspark") and shutil.which("java")
        else "needs pyspark (pip install -e '.[spark]') and a Java runtime"),
    ("docs/connect.md", "Connect"): lambda: (None if postgres.find_binaries() and shutil.which("psql")
                        else "needs PostgreSQL's server and psql (tools/install-system-deps)"),
}


@pytest.fixture
def walk_root():
    """The walks' directories: not under /tmp, which each walk has its own
    of (a failure shows what each block printed; the files go with the test)."""
    root = Path(tempfile.mkdtemp(prefix="kafkalite-readme-walk-", dir="/var/tmp"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


def test_every_block_is_run_or_says_why_not():
    """A block is a command (run), a file's contents (a language saying so)
    or skipped with a reason; the test's expectations each name one block."""
    blocks = [b for w in WALKS for b in w.blocks]
    unlabelled = [b.name() for b in blocks if not b.language]
    assert not unlabelled, f"blocks without a language: {unlabelled}"
    unknown = [b.name() for b in blocks if b.language not in readme_walk.RUN_LANGUAGES
               and b.language not in readme_walk.FILE_LANGUAGES]
    assert not unknown, f"blocks in a language the walk does not know: {unknown}"
    assert set(EXPECT) <= set(PAGES), f"EXPECT names no such page: {set(EXPECT) - set(PAGES)}"
    assert {page for page, _ in NEEDS} <= set(PAGES)
    for page, expect in EXPECT.items():
        for key in expect:
            named = [b.name() for b in blocks if b.page == page and key in b.code]
            assert len(named) == 1, f"EXPECT key {key!r} names {named}"
    skipped = [f"{b.name()}: {b.skip}" for b in blocks if b.skip is not None]
    assert all(s.split(": ", 1)[1].strip() for s in skipped), "a skip needs its reason"
    print("\nnot run:\n" + "\n".join(skipped + [
        f"{b.name()}: a {b.language} file's contents" for b in blocks
        if b.language in readme_walk.FILE_LANGUAGES]))


def _unwaited_servers(blocks) -> list[str]:
    """Blocks that leave ``kafkalite server`` in the background (``&``)
    and go on, or end, without ``kafkalite health --wait``: the next
    command, or the reader's next block, races the server's start."""
    out = []
    for b in blocks:
        if b.language not in readme_walk.RUN_LANGUAGES or b.language == "python":
            continue
        lines = [line for line in readme_walk.logical_lines(b.code)
                 if line.strip() and not line.lstrip().startswith("#")]
        for i, line in enumerate(lines):
            if readme_walk.starts_server(line) and line.rstrip().endswith("&"):
                after = lines[i + 1] if i + 1 < len(lines) else ""
                if not after.startswith("kafkalite health --wait"):
                    out.append(f"{b.name()}: `{line.strip()}`")
    return out


def _blocked_by_a_server(blocks) -> list[str]:
    """Blocks that run ``kafkalite server`` in the foreground with more
    lines after it: pasted, the server holds the terminal and none of them
    runs (the walk starts such a line in the background, as a reader's
    second terminal would be, so only this check sees it)."""
    out = []
    for b in blocks:
        # a skipped block says why it is not pasted as it stands (three hosts, say)
        if (b.language not in readme_walk.RUN_LANGUAGES or b.language == "python"
                or b.skip is not None):
            continue
        lines = [line for line in readme_walk.logical_lines(b.code)
                 if line.strip() and not line.lstrip().startswith("#")]
        for i, line in enumerate(lines[:-1]):
            code = line.split(" #")[0].rstrip()
            if readme_walk.starts_server(code) and not code.endswith("&"):
                out.append(f"{b.name()}: `{line.strip()}`, then {len(lines) - i - 1} more line(s)")
    return out


def test_no_block_runs_a_server_in_the_foreground_before_other_commands():
    """docs/operations.md and docs/replication.md began a block with
    ``kafkalite server`` in the foreground and went on with client commands
    (issue 74, item 2)."""
    blocked = _blocked_by_a_server(b for w in WALKS for b in w.blocks)
    assert not blocked, "a foreground server with commands after it:\n" + "\n".join(blocked)
    planted = readme_walk.walks("# t\n\n## s\n\n```bash\nkafkalite server --workers 3  # x\n"
                                "kafkalite topics list\n```\n", "planted.md")
    assert len(_blocked_by_a_server(b for w in planted for b in w.blocks)) == 1


def test_a_server_left_in_the_background_is_waited_for():
    """docs/tiered-storage.md's server line had no wait after it: the
    Python block after it found no server yet under a fresh-clone run's
    load, and confluent-kafka's create_topics failed (_DESTROY_BROKER)."""
    unwaited = _unwaited_servers(b for w in WALKS for b in w.blocks)
    assert not unwaited, ("a background server with no `kafkalite health --wait` after it:\n"
                          + "\n".join(unwaited))
    planted = readme_walk.walks("# t\n\n## s\n\n```bash\nkafkalite server --config t.toml &\n"
                                "```\n", "planted.md")
    assert len(_unwaited_servers(b for w in planted for b in w.blocks)) == 1


def test_generated_pages_are_the_generators():
    """The pages left out are exactly those the code writes."""
    from kafkalite.tools import gen_docs
    assert {str(p) for p in gen_docs.generated()} == GENERATED


@pytest.mark.parametrize("block", [b for w in WALKS for b in w.blocks if b.skip is not None],
                         ids=lambda b: f"{b.page}-{b.section}-{b.line}")
def test_readme_block_not_walked(block):
    """What the walk leaves out, and why: in the run's summary of skips (-ra)."""
    pytest.skip(f"{block.name()}: {block.skip}")


def _left_out(page: str) -> dict[str, str]:
    """The sections of ``page`` not walked here, and why (what they need
    that this machine lacks)."""
    out = {}
    for (p, section), need in NEEDS.items():
        if p == page and need() is not None:
            out[section] = need()
    return out


# Each page's walk in an xdist group of its own: a page shares nothing with
# another (its own directory, network namespace and /tmp), and one after
# another on one xdist worker they were 6-8 minutes of a full run, its longest
# group; the heavier pages go out first (tests/durations.json)
@pytest.mark.parametrize("page", [
    pytest.param(w, marks=pytest.mark.xdist_group(f"readme_walk-{w.id}"), id=w.id)
    for w in PAGE_WALKS if any(b.runs for b in w.blocks)])
def test_readme_page_runs_top_to_bottom_as_pasted(page, walk_root):
    """Every block of the page in its order, in one directory, with the
    README's server for a page whose first blocks need one (a reader left
    it running) and the servers the page itself starts and stops: a block
    finds what the blocks above it made (issue 74, item 3: security.md's
    CURVE block met the `orders` an earlier block created, the schema
    registry's ACL example a schema registered earlier under its subject)."""
    left_out = _left_out(page.page)
    if all(not b.runs for w in page.parts if w.section not in left_out for b in w.blocks):
        pytest.skip("; ".join(f"{s}: {why}" for s, why in left_out.items()))
    walker = readme_walk.Walker(walk_root, WALKS, server=SERVER)
    failures = walker.walk(page, EXPECT.get(page.page, {}), leave_out=set(left_out))
    assert not failures, "\n\n".join(failures)


@pytest.mark.parametrize("page,section", sorted(NEEDS), ids=lambda x: x)
def test_readme_section_left_out_here(page, section):
    """A section whose needs this machine lacks: its page's walk passes over
    it, and the run's summary of skips (-ra) says so."""
    why = NEEDS[page, section]()
    if why is not None:
        pytest.skip(f"{page}, {section}: {why}")


PLANTED = """
## Fails
<!-- walk: no server: planted -->
```sh
echo before
false
echo after
```

## A thread dies
<!-- walk: no server: planted -->
```python
import threading
t = threading.Thread(target=lambda: 1 / 0)
t.start(); t.join()
print("the main thread carries on and exits 0")
```

## Promises
<!-- walk: no server: planted -->
```sh
echo "something else"
```

## Never ends
<!-- walk: no server: planted -->
<!-- walk: timeout 2 -->
```sh
sleep 60
```

## A background server dies
<!-- walk: no server: planted -->
```sh
python3 -c "import time; time.sleep(0.5); import no_such_module" &
```

```sh
sleep 4         # the process the block before left behind dies meanwhile (its start-up
                # took over a second at a load of 30 on 2 cores: 1.5 s was not always enough)
```
"""


@pytest.mark.parametrize("section,failure", [
    ("Fails", "exit status 1, not 0"),
    ("A thread dies", "printed a Python traceback (exit status 0)"),
    ("Promises", r"printed nothing matching ['^the promised line$']"),
    ("Never ends", "still running after 2 s"),
    ("A background server dies", "a Python traceback:"),
])
def test_the_walk_catches_a_planted_fault(section, failure, walk_root):
    """Each check of the walk, shown to fail the snippet it is for."""
    planted = readme_walk.walks(PLANTED)
    walk = next(w for w in planted if w.section == section)
    failures = readme_walk.Walker(walk_root, planted).walk(
        walk, {'echo "something else"': ["^the promised line$"]})
    assert len(failures) == 1 and failure in failures[0], failures


DAMAGED = """
## Damaged data
<!-- walk: no server: it starts its own -->
```sh
kafkalite server --data-dir d &
until [ -f d/server.json ]; do sleep 0.2; done
echo hello | kafkalite produce walked
printf X | dd of=d/walked-0/00000000000000000000.log bs=1 seek=70 conv=notrunc status=none
```
"""
FLIP = "printf X | dd of=d/walked-0/00000000000000000000.log bs=1 seek=70 conv=notrunc status=none"


def test_the_walk_verifies_the_data_of_each_server_it_stops(walk_root):
    """A walk whose server's log was damaged while it ran (a byte of a
    record flipped) fails at the verify after the server's clean stop; the
    same walk without the damage passes."""
    planted = readme_walk.walks(DAMAGED)
    failures = readme_walk.Walker(walk_root, planted).walk(planted[0])
    assert len(failures) == 1 and "kafkalite verify" in failures[0] and \
        "after its server stopped cleanly: exit status 1" in failures[0], failures
    # a section of another name: a directory of its own
    healthy = readme_walk.walks(DAMAGED.replace(FLIP, "true  # no damage").replace(
        "## Damaged data", "## Healthy data"))
    assert readme_walk.Walker(walk_root, healthy).walk(healthy[0]) == []


IN_ORDER = """# A page

## Making it
<!-- walk: no server: planted -->
```sh
mkdir made
```

## Making it again
<!-- walk: no server: planted -->
```sh
mkdir made      # the block above made it: a reader who pasted both fails here
```
"""


def test_a_page_walk_runs_its_sections_in_one_directory(walk_root):
    """Each section alone passes; the page top to bottom fails where a
    block meets what an earlier section made, as a reader's paste does
    (security.md's CURVE block and `orders`, issue 74)."""
    sections = readme_walk.walks(IN_ORDER, "planted.md")
    for walk in sections:
        assert readme_walk.Walker(walk_root, sections).walk(walk) == []
    page = readme_walk.page_walk(IN_ORDER, "planted.md")
    assert (page.id, page.section, [w.section for w in page.parts]) == (
        "planted", "A page", ["Making it", "Making it again"])
    failures = readme_walk.Walker(walk_root, sections).walk(page)
    assert len(failures) == 1 and failures[0].startswith(
        "Making it again (planted.md line 11): exit status 1, not 0"), failures
    assert "cannot create directory" in failures[0] and "File exists" in failures[0]
    # a section left out (what it needs is not here): the rest runs
    shutil.rmtree(walk_root / page.id)
    assert readme_walk.Walker(walk_root, sections).walk(
        page, leave_out={"Making it again"}) == []


def test_a_page_walk_verifies_a_server_the_page_stopped_itself(walk_root):
    """A server a block stops (``kafkalite server-stop``) leaves no
    server.json: its data is verified all the same once the walk is over."""
    stopped = DAMAGED + "\n```sh\nkafkalite server-stop --data-dir d\n```\n"
    page = readme_walk.page_walk(stopped, "planted.md")
    failures = readme_walk.Walker(walk_root, readme_walk.walks(stopped, "planted.md")).walk(page)
    assert len(failures) == 1 and "kafkalite verify" in failures[0] and \
        "after its server stopped cleanly: exit status 1" in failures[0], failures


def test_a_walk_sees_the_commands_of_a_virtualenv_under_tmp(walk_root):
    """A walk binds a /tmp of its own over /tmp: run from a virtualenv
    under /tmp, every block failed with ``kafkalite: not found`` (issue 73).
    What the interpreter, PATH and PYTHONPATH need under /tmp is bound back
    in; here a command on PATH in a directory under /tmp, as a virtualenv's
    console scripts are."""
    bindir = Path(tempfile.mkdtemp(prefix="kafkalite-walk-venv-", dir="/tmp")) / "bin"
    try:
        bindir.mkdir()
        (bindir / "kl-walk-hello").write_text("#!/bin/sh\necho hello from a venv\n")
        (bindir / "kl-walk-hello").chmod(0o755)
        env = child_env(PATH=f"{bindir}{os.pathsep}{os.environ['PATH']}")
        planted = readme_walk.walks("# t\n\n## s\n<!-- walk: no server: planted -->\n"
                                    "```sh\nkl-walk-hello\necho private > /tmp/kl-walk-file\n"
                                    "```\n", "planted.md")
        failures = readme_walk.Walker(walk_root, planted, env=env).walk(
            planted[0], {"kl-walk-hello": ["^hello from a venv$"]})
        assert not failures, failures
        # the walk's /tmp is still its own, and removing the walk's
        # directories removes nothing of what was bound into them
        assert not Path("/tmp/kl-walk-file").exists()
        shutil.rmtree(walk_root)
        assert (bindir / "kl-walk-hello").exists()
    finally:
        shutil.rmtree(bindir.parent, ignore_errors=True)


def test_the_streams_walk_fails_when_its_threads_die(walk_root):
    """Issue 42's case: without rocksdict the Streams example's threads die
    at their first task. The walk fails it: the process exits 1 with one
    line saying why (on the old code it printed the threads' tracebacks and
    exited 0, which the walk fails as a traceback)."""
    hidden = walk_root / "no-rocksdict" / "rocksdict"
    hidden.mkdir(parents=True)
    # what a base install without the streams extra has: no rocksdict
    (hidden / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'rocksdict'\", name='rocksdict')\n")
    env = child_env()
    env["PYTHONPATH"] = f"{hidden.parent}{os.pathsep}{env['PYTHONPATH']}"
    walk = next(w for w in WALKS if (w.page, w.section) == ("docs/streams.md", "Streams"))
    failures = readme_walk.Walker(walk_root, WALKS, env=env, server=SERVER).walk(
        walk, EXPECT[walk.page])
    assert len(failures) == 1, failures
    assert "exit status 1, not 0" in failures[0], failures[0]
    assert ("every stream thread died: ModuleNotFoundError: No module named 'rocksdict'"
            in failures[0]), failures[0]
    assert readme_walk.TRACEBACK not in failures[0]
