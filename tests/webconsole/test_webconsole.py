"""The web console in a real browser: Debian's Chromium, headless, driven by Selenium.

One server (the shared ``server`` fixture) and one browser per module. Each
test does in the UI what a user would (fills forms, presses buttons) and
checks the outcome with kafkalite's own clients, or produces with the
clients and checks what the pages show. Screenshots are decoded with
Pillow (matplotlib's dependency) and the chart's region must show the
drawn series, not a blank box.

Needs /usr/bin/chromium and /usr/bin/chromedriver (tools/install-system-deps
installs them). Selenium is pointed at that chromedriver explicitly: its
own driver manager would go to the network.
"""
import base64
import datetime
import io
import json
import os
import re
import shutil
import threading
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

from harness import ServerProcess, sasl_config, secured_server, stop_server, wait_until
from kafkalite.client import (AdminClient, ConfigResource, Consumer, NewTopic, Producer,
                              TopicPartition)

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.common.exceptions import (StaleElementReferenceException,  # noqa: E402
                                        TimeoutException)
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402
from PIL import Image  # noqa: E402

# one browser for the module: its tests go to one xdist worker
pytestmark = pytest.mark.xdist_group("webconsole")

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
SERIES_BLUE = (0x25, 0x63, 0xeb)       # console.js COLORS[0]: a chart's first series
WAIT_S = 20


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    if not (os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK)):
        pytest.skip("needs chromium and chromium-driver: run tools/install-system-deps")
    profile = tmp_path_factory.mktemp("chromium-profile")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,1000",
                # /tmp rather than /dev/shm: nothing left in /dev/shm, and no crash
                # where /dev/shm is small (containers)
                "--disable-dev-shm-usage", f"--user-data-dir={profile}"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture(scope="module")
def admin(server):
    client = AdminClient(server.config())
    yield client
    client.close()


@pytest.fixture(scope="module")
def console(server):
    """The console's base URL, from the server's endpoints (server.json)."""
    url = server.info["console"]
    assert url.endswith("/console/")
    return url


def goto(driver, console, hash_):
    """Open a view and wait until it is drawn."""
    if driver.current_url == console + hash_:
        driver.refresh()
    else:
        driver.get(console + hash_)
    wait_loaded(driver, lambda loaded: loaded == hash_)


def wait_loaded(driver, check):
    WebDriverWait(driver, WAIT_S).until(lambda d: (lambda v: v is not None and check(v))(
        d.execute_script("return document.getElementById('view').dataset.loaded")))


def flash(driver) -> str:
    return driver.execute_script(
        "const f = document.getElementById('flash'); return f.hidden ? '' : f.className + ': ' "
        "+ f.textContent")


def wait_flash(driver, starts) -> str:
    """The message shown, once it starts with ``starts``; fails naming what is
    shown. An "ok" message is shown as the view starts to be drawn again
    (route() in app.js): wait for the view too, or a read of its tables may
    find them empty (fresh-clone run N did)."""
    try:
        WebDriverWait(driver, WAIT_S).until(lambda d: flash(d).startswith(starts))
    except TimeoutException:
        raise AssertionError(f"waited for a message {starts!r}; shown: {flash(driver)!r}")
    shown = flash(driver)
    if starts.startswith("ok"):
        wait_loaded(driver, lambda loaded: True)
    return shown


def fill(driver, form_id, **fields):
    form = driver.find_element(By.ID, form_id)
    for name, value in fields.items():
        field = form.find_element(By.NAME, name)
        if field.tag_name == "select":
            Select(field).select_by_value(str(value))
        else:
            field.clear()
            field.send_keys(str(value))
    return form


def rows(driver, table_id) -> list[list[str]]:
    return driver.execute_script(
        "return Array.from(document.querySelectorAll(`#${arguments[0]} tbody tr`), tr => "
        "Array.from(tr.cells, td => td.innerText))", table_id)


def png(driver) -> Image.Image:
    return Image.open(io.BytesIO(driver.get_screenshot_as_png())).convert("RGB")


def region(driver, image: Image.Image, element_id: str) -> Image.Image:
    """The part of a screenshot that shows the element (in device pixels)."""
    box = driver.execute_script(
        "const r = document.getElementById(arguments[0]).getBoundingClientRect();"
        "return [r.left, r.top, r.right, r.bottom, window.devicePixelRatio]", element_id)
    ratio = box[4]
    return image.crop(tuple(int(v * ratio) for v in box[:4]))


def pixels_near(image: Image.Image, color, tolerance=40) -> int:
    """How many pixels are within ``tolerance`` of ``color`` in each channel."""
    diff = np.abs(np.asarray(image, dtype=np.int16) - np.array(color, dtype=np.int16))
    return int((diff <= tolerance).all(axis=2).sum())


def distinct_colours(image: Image.Image) -> int:
    return len(np.unique(np.asarray(image).reshape(-1, 3), axis=0))


def produce(server, topic, records, partition=0, **config):
    """records: (key, value, headers, timestamp ms) tuples, in order, to one partition."""
    p = Producer(server.config(**{"linger.ms": 5, **config}))
    try:
        for key, value, headers, ts in records:
            p.produce(topic, value=value, key=key, partition=partition, headers=headers,
                      timestamp=ts)
        assert p.flush(30) == 0
    finally:
        p.close()


# ---- the tests ---------------------------------------------------------------------------------

def test_overview_charts_draw_the_traffic_produced(server, browser, console, admin, topic_name):
    admin.create_topics([NewTopic(topic_name, 1)])[topic_name].result()
    goto(browser, console, "#/")
    # produce for a few seconds while the page polls: the charts get points above zero
    stop = threading.Event()

    def traffic():
        p = Producer(server.config(**{"linger.ms": 5}))
        try:
            while not stop.is_set():
                for _ in range(200):
                    p.produce(topic_name, value=b"x" * 500)
                p.flush(10)
                time.sleep(0.05)
        finally:
            p.close()

    thread = threading.Thread(target=traffic)
    thread.start()
    try:
        def drawn(d):
            try:
                return d.execute_script(
                    "const l = document.querySelector('#chart-bytes polyline[data-name=in]');"
                    "if (!l) return null; const ys = l.getAttribute('points').split(' ')"
                    ".filter(Boolean).map(p => Number(p.split(',')[1]));"
                    # the plot's zero line is at y = 200 - 24 (console.js lineChart)
                    "return ys.length >= 3 && ys.some(y => y < 170) ? ys : null")
            except StaleElementReferenceException:
                return None
        ys = WebDriverWait(browser, WAIT_S).until(drawn)
    finally:
        stop.set()
        thread.join()
    assert len(ys) >= 3
    # (read in one script: the cards are redrawn while the page polls)
    assert browser.execute_script(
        "return document.querySelector('#card-topics .n').textContent") != "0"
    # The screenshot's chart region shows the series, not an empty box: many
    # pixels of the series' colour, and more than a couple of colours at all.
    # (looked at again until drawn: the page redraws it as it polls, and a
    # shot taken mid-redraw under load held 61 such pixels once)
    def drawn():
        shot = region(browser, png(browser), "chart-bytes")
        return shot if pixels_near(shot, SERIES_BLUE) > 100 else None
    shot = wait_until(drawn, 15, "the bytes chart's series drawn", interval=0.5)
    assert shot.width > 200 and shot.height > 60
    assert distinct_colours(shot) > 10
    # and the records-in chart too
    assert int(browser.execute_script(
        "return document.querySelector('#chart-messages polyline').dataset.points")) >= 3


def test_topic_created_altered_and_deleted_in_the_ui(browser, console, admin, topic_name):
    goto(browser, console, "#/topics")
    fill(browser, "create-topic", name=topic_name, partitions=3,
         configs="retention.ms=123456").submit()
    assert topic_name in wait_flash(browser, "ok: created topic")
    md = admin.list_topics(topic_name).topics[topic_name]
    assert md.error is None and len(md.partitions) == 3
    resource = ConfigResource("topic", topic_name)
    assert admin.describe_configs([resource])[resource].result()["retention.ms"].value == "123456"
    assert topic_name in [r[0] for r in rows(browser, "topics")]

    # the topic's page: partitions with offsets, configs; alter one
    goto(browser, console, "#/topic/" + topic_name)
    assert [r[0] for r in rows(browser, "partitions")] == ["0", "1", "2"]
    fill(browser, "alter-config", name="retention.ms", value="654321").submit()
    wait_flash(browser, "ok: set retention.ms=654321")
    assert admin.describe_configs([resource])[resource].result()["retention.ms"].value == "654321"
    assert ["retention.ms", "654321"] in [r[:2] for r in rows(browser, "configs")]
    # a bad value is refused with the server's message, nothing changes
    fill(browser, "alter-config", name="retention.ms", value="soon").submit()
    assert "retention.ms" in wait_flash(browser, "error:")
    assert admin.describe_configs([resource])[resource].result()["retention.ms"].value == "654321"

    browser.find_element(By.ID, "delete-topic").click()
    WebDriverWait(browser, WAIT_S).until(lambda d: d.switch_to.alert).accept()
    wait_flash(browser, "ok: deleted topic")
    wait_until(lambda: topic_name not in admin.list_topics().topics, 10,
               "the topic to be gone")


def _browse(browser, **fields):
    before = browser.execute_script("return document.getElementById('view').dataset.loaded")
    fill(browser, "browse", **fields).submit()
    wait_loaded(browser, lambda loaded: loaded != before and "run=" in loaded)
    return rows(browser, "records")


def test_message_browser_finds_records_by_offset_timestamp_and_key(
        server, browser, console, admin, topic_name):
    admin.create_topics([NewTopic(topic_name, 2)])[topic_name].result()
    base = int(time.time() * 1000) - 60_000
    produce(server, topic_name, [
        (b"k%d" % i, json.dumps({"n": i, "name": f"r{i}"}).encode(),
         [("trace", b"abc-%d" % i)], base + i * 1000) for i in range(20)])
    produce(server, topic_name, [(b"other", b"p1", None, base)], partition=1)
    goto(browser, console, "#/messages?topic=" + topic_name)

    # by partition and offset
    got = _browse(browser, partition=0, mode="offset", at=15, limit=3, key="")
    assert [r[:2] for r in got] == [["0", "15"], ["0", "16"], ["0", "17"]]
    assert got[0][3] == "k15"
    # the next page goes on where this one stopped
    before = browser.execute_script("return document.getElementById('view').dataset.loaded")
    browser.find_element(By.ID, "next-page").click()
    wait_loaded(browser, lambda loaded: loaded != before)
    assert [r[1] for r in rows(browser, "records")] == ["18", "19"]
    assert browser.find_elements(By.ID, "next-page") == []

    # by timestamp (a date, as a user types it): the first record at or after it
    at = datetime.datetime.fromtimestamp((base + 10_000) / 1000, datetime.timezone.utc)
    got = _browse(browser, mode="timestamp", at=at.isoformat(timespec="milliseconds"), limit=2)
    assert [r[:2] for r in got] == [["0", "10"], ["0", "11"]]

    # by key, over every partition; the header shown; the value as JSON, the key as
    # hex (and so typed as hex digits: "k7")
    Select(browser.find_element(By.NAME, "partition")).select_by_value("")
    got = _browse(browser, mode="start", at="", key="6b 37", limit=50, vfmt="json", kfmt="hex")
    assert len(got) == 1 and got[0][:2] == ["0", "7"]
    assert got[0][5] == "trace: abc-7"
    assert got[0][3].strip() == "000000  6b 37"
    assert json.loads(got[0][4]) == {"n": 7, "name": "r7"}
    assert got[0][4].splitlines()[1] == '  "n": 7,'        # pretty-printed
    summary = browser.find_element(By.ID, "summary").text
    assert summary.startswith("1 record(s), 21 read")       # both partitions scanned

    # a key typed as text when keys are shown as text
    got = _browse(browser, key="k12", limit=50, vfmt="text", kfmt="text")
    assert [r[:2] for r in got] == [["0", "12"]]

    # text: the JSON as it is stored
    got = _browse(browser, partition=1, mode="offset", at=0, key="", vfmt="text", kfmt="text")
    assert [r[3:5] for r in got] == [["other", "p1"]]


def test_group_lag_shown_and_offsets_reset_from_the_ui(server, browser, console, admin,
                                                       topic_name):
    group = "g-" + topic_name
    admin.create_topics([NewTopic(topic_name, 2)])[topic_name].result()
    for p in (0, 1):
        produce(server, topic_name, [(None, b"v%d" % i, None, 0) for i in range(30)],
                partition=p)
    # a member that read and committed 10 and 4, and stays in the group
    member = Consumer(server.config(**{"group.id": group, "auto.offset.reset": "earliest",
                                       "enable.auto.commit": False}))
    member.subscribe([topic_name])
    stop, ready = threading.Event(), threading.Event()

    def run_member():
        deadline = time.monotonic() + 20
        while len(member.assignment()) < 2 and time.monotonic() < deadline:
            member.poll(0.1)
        member.commit(offsets=[TopicPartition(topic_name, 0, 10),
                               TopicPartition(topic_name, 1, 4)], asynchronous=False)
        ready.set()
        while not stop.is_set():
            member.poll(0.1)

    thread = threading.Thread(target=run_member)
    thread.start()
    try:
        assert ready.wait(25)
        goto(browser, console, "#/group/" + group)
        members = rows(browser, "members")
        assert len(members) == 1
        assert sorted(members[0][3].split(", ")) == [f"{topic_name}-0", f"{topic_name}-1"]
        offsets = rows(browser, "offsets")
        assert [(r[1], r[2], r[3], r[4]) for r in offsets] == [("0", "10", "30", "20"),
                                                              ("1", "4", "30", "26")]
        # lag over time: the page polls, and the chart's series fill in
        def lag_drawn(d):
            return d.execute_script(
                "return Array.from(document.querySelectorAll('#chart-lag polyline'), "
                "l => Number(l.dataset.points))")
        points = WebDriverWait(browser, WAIT_S, poll_frequency=0.5).until(
            lambda d: (lambda p: p if len(p) == 2 and min(p) >= 3 else None)(lag_drawn(d)))
        assert len(points) == 2
        # the screenshot shows the series: looked at again while the page,
        # polling, redraws (a loaded CI run's one shot held 16 of its pixels,
        # the chart's points already in the page)
        seen = []
        try:
            WebDriverWait(browser, WAIT_S, poll_frequency=0.5).until(
                lambda d: seen.append(pixels_near(region(d, png(d), "chart-lag"), SERIES_BLUE))
                or seen[-1] > 50)
        except TimeoutException:
            raise AssertionError(f"the lag series never drawn: its pixels {seen[-5:]}") from None

        # refused while the group has a member: the server's reason is shown
        fill(browser, "reset-offsets", spec="to-offset", value=2).submit()
        assert "active members" in wait_flash(browser, "error:")
    finally:
        stop.set()
        thread.join()
        member.close()
    goto(browser, console, "#/groups")
    assert [r[:3] for r in rows(browser, "groups") if r[0] == group] == [[group, "Empty", "0"]]
    goto(browser, console, "#/group/" + group)
    fill(browser, "reset-offsets", spec="to-offset", value=2).submit()
    wait_flash(browser, "ok: reset " + group)
    committed = admin.list_consumer_group_offsets(group).result()
    assert [(tp.partition, tp.offset) for tp in committed] == [(0, 2), (1, 2)]
    assert [(r[1], r[2], r[4]) for r in rows(browser, "offsets")] == [("0", "2", "28"),
                                                                     ("1", "2", "28")]


def test_metrics_page_lists_the_brokers_metrics(server, browser, console, admin, topic_name):
    admin.create_topics([NewTopic(topic_name, 1)])[topic_name].result()
    produce(server, topic_name, [(None, b"m", None, 0)] * 5)
    goto(browser, console, "#/metrics")
    # no value rendered as JavaScript's null (a word of its own: the shared
    # server's topic names may hold the letters, "..._and_null_removes_a_key")
    assert not re.search(r"\bnull\b", browser.find_element(By.ID, "view").text)
    names = {r[0] for r in rows(browser, "metrics")}
    assert {"kafka_network_requestmetrics_requests_total",
            "kafka_controller_kafkacontroller_globaltopiccount", "process_cpu_seconds_total"} <= names
    # filtered: the topic's records-in counter, with its label
    def found(d):
        goto(d, console, "#/metrics?filter=messagesin")
        return [r for r in rows(d, "metrics") if f'topic="{topic_name}"' in r[1]] or None
    got = WebDriverWait(browser, WAIT_S, poll_frequency=1).until(found)
    assert got[0][0] == "kafka_server_brokertopicmetrics_messagesin_total" and got[0][2] == "5"


def _call(console, method, path, body=None, raw=None, ctype="application/json"):
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    req = urllib.request.Request(console + path, method=method, data=data,
                                 headers={"Content-Type": ctype})
    try:
        with urllib.request.urlopen(req, timeout=15) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_api_answers_bad_input_with_a_4xx_and_a_message(server, console, admin, topic_name):
    admin.create_topics([NewTopic(topic_name, 1)])[topic_name].result()
    # names of this test's own (the server is shared): none of them exists
    ok_name, missing, csrf = topic_name + "-ok", topic_name + "-missing", topic_name + "-csrf"
    nobody = "g" + topic_name[1:] + "-nobody"
    bad = [
        ("POST", "api/topics", None, b"{not json"),
        ("POST", "api/topics", None, b"[1, 2]"),
        ("POST", "api/topics", None, b"x" * (65 << 10)),
        ("POST", "api/topics", {"name": "has space"}, None),
        ("POST", "api/topics", {"name": topic_name}, None),
        ("POST", "api/topics", {"name": ok_name, "partitions": "many"}, None),
        ("POST", "api/topics", {"name": ok_name, "partitions": 0}, None),
        ("GET", f"api/topics/{topic_name}/messages?limit=100000", None, None),
        ("GET", f"api/topics/{topic_name}/messages?offset=-5", None, None),
        ("GET", f"api/topics/{topic_name}/messages?partition=7", None, None),
        ("GET", f"api/topics/{topic_name}/messages?offset=1&timestamp=1", None, None),
        ("GET", f"api/topics/{topic_name}/messages?key_hex=zz", None, None),
        ("GET", f"api/topics/{missing}", None, None),
        ("DELETE", f"api/topics/{missing}", None, None),
        ("POST", f"api/topics/{topic_name}/configs", {}, None),
        ("POST", f"api/topics/{topic_name}/configs", {"set": {"no.such.config": "1"}}, None),
        ("POST", f"api/groups/{nobody}/reset-offsets", {"spec": "to-somewhere"}, None),
        ("POST", f"api/groups/{nobody}/reset-offsets", {"spec": "to-offset", "value": "x"}, None),
        ("GET", f"api/groups/{nobody}", None, None),
        ("PUT", "api/topics", {}, None),
        ("GET", "api/nothing-here", None, None),
        ("GET", "../../etc/passwd", None, None),
        ("GET", "static/secret.py", None, None),
    ]
    for method, path, body, raw in bad:
        status, answer = _call(console, method, path, body, raw)
        assert 400 <= status < 500, (method, path, status, answer)
        assert isinstance(answer.get("error"), str) and answer["error"], (method, path, answer)
    # a form another site's page could post without a CORS preflight is refused
    status, answer = _call(console, "POST", "api/topics", {"name": csrf},
                           ctype="text/plain")
    assert status == 415 and "application/json" in answer["error"]
    assert csrf not in admin.list_topics().topics
    # the topic is untouched, asking about a missing topic did not create it
    # (auto.create.topics is on by default), and the console still serves
    assert topic_name in admin.list_topics().topics
    assert missing not in admin.list_topics().topics
    status, answer = _call(console, "GET", "api/cluster")
    assert status == 200 and len(answer["brokers"]) == 2


def test_reading_is_bounded_in_count_and_bytes(server, console, admin, topic_name):
    admin.create_topics([NewTopic(topic_name, 1)])[topic_name].result()
    big = os.urandom(256 << 10)
    # 6 MiB, one record a batch (the producer's batches may outgrow max.message.bytes)
    produce(server, topic_name, [(None, big, None, 0)] * 24, **{"batch.size": 1})
    status, answer = _call(console, "GET", f"api/topics/{topic_name}/messages?limit=500")
    assert status == 200, answer
    assert answer["truncated"], (len(answer["records"]), answer["next"], answer["end"])
    # at most 4 MiB of values come back (the record that crossed the line included)
    assert 0 < len(answer["records"]) <= 17
    assert base64.b64decode(answer["records"][0]["value"]) == big
    status, answer = _call(console, "GET", f"api/topics/{topic_name}/messages?limit=3")
    assert [r["offset"] for r in answer["records"]] == [0, 1, 2] and answer["truncated"]
    assert answer["next"] == {"0": 3}


@pytest.mark.processes
def test_no_console_flag_leaves_only_metrics_and_health(tmp_path):
    srv = ServerProcess(str(tmp_path / "data"), extra_args=["--no-console"]).start()
    try:
        assert "console" not in srv.info
        base = srv.info["metrics"].rsplit("/", 1)[0]
        for path in ("/console/", "/console/api/cluster"):
            try:
                urllib.request.urlopen(base + path, timeout=5)
            except urllib.error.HTTPError as exc:
                assert exc.code == 404 and b"<html" not in exc.read(), path
            else:
                raise AssertionError(f"{path} answered without the console")
        with urllib.request.urlopen(srv.info["metrics"], timeout=5) as ok:
            assert ok.status == 200
    finally:
        assert srv.stop() == 0
        srv.kill()


# ---- records through the schema registry ------------------------------------------------------

READING = json.dumps({"type": "record", "name": "Reading", "namespace": "lab", "fields": [
    {"name": "sensor", "type": "string"}, {"name": "celsius", "type": ["null", "double"]}]})
READING_KEY = json.dumps({"type": "object", "properties": {"site": {"type": "string"}},
                          "required": ["site"]})


def _order_class():
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    fdp = descriptor_pb2.FileDescriptorProto(name="order.proto", package="shop", syntax="proto3")
    m = fdp.message_type.add(name="Order")
    m.field.add(name="item", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
                label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL, json_name="item")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Order"))


def test_records_in_confluents_wire_format_are_shown_decoded_beside_their_schema(
        server, browser, console, admin, topic_name):
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.schema_registry.json_schema import JSONSerializer
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from confluent_kafka.schema_registry import topic_record_subject_name_strategy
    from confluent_kafka.serialization import MessageField, SerializationContext
    registry = SchemaRegistryClient({"url": server.info["schema_registry"]})
    admin.create_topics([NewTopic(topic_name, 1)])[topic_name].result()
    value_ctx = SerializationContext(topic_name, MessageField.VALUE)
    key_ctx = SerializationContext(topic_name, MessageField.KEY)
    avro = AvroSerializer(registry, READING)(
        {"sensor": "s1", "celsius": 21.5}, value_ctx)
    key = JSONSerializer(READING_KEY, registry)({"site": "north"}, key_ctx)
    cls = _order_class()
    proto = ProtobufSerializer(cls, registry, {
        "use.deprecated.format": False,
        "subject.name.strategy": topic_record_subject_name_strategy})(cls(item="bolt"), value_ctx)
    registry.set_compatibility(f"{topic_name}-value", "FULL")
    value_id = registry.get_latest_version(f"{topic_name}-value").schema_id
    key_id = registry.get_latest_version(f"{topic_name}-key").schema_id
    produce(server, topic_name, [
        (key, avro, None, 0),
        (None, proto, None, 0),
        (None, b"\x00\x7f\xff\xff\xf0not-registry", None, 0),    # magic 0, no such schema
        (None, avro[:6], None, 0),                               # its schema, cut short
        (None, b"plain text", None, 0)])

    goto(browser, console, "#/messages?topic=" + topic_name)
    got = _browse(browser, partition=0, mode="offset", at=0, limit=10, key="")
    assert [r[1] for r in got] == ["0", "1", "2", "3", "4"]
    # Avro in Avro's JSON encoding (the union's branch named), the key's JSON Schema
    value, schema_line = got[0][4].rsplit("\n", 1)
    assert json.loads(value) == {"sensor": "s1", "celsius": {"double": 21.5}}
    assert schema_line == f"schema {value_id} · {topic_name}-value v1 · AVRO"
    key_text, key_schema = got[0][3].rsplit("\n", 1)
    assert json.loads(key_text) == {"site": "north"}
    assert key_schema == f"schema {key_id} · {topic_name}-key v1 · JSON"
    # Protobuf under its record-name subject (the one the registry names for the id)
    value, schema_line = got[1][4].rsplit("\n", 1)
    assert json.loads(value) == {"item": "bolt"}
    assert schema_line.endswith(f"· {topic_name}-shop.Order v1 · PROTOBUF")
    # what does not decode is shown as its bytes, with why; the page still serves
    assert "not decoded: schema 2147483632 is not in the registry" in got[2][4]
    assert "not-registry" in got[2][4]
    assert f"not decoded: does not decode with schema {value_id}" in got[3][4]
    assert got[4][4] == "plain text"
    # as hex: the bytes, wire format and all
    got = _browse(browser, vfmt="hex")
    assert got[0][4].startswith("000000  00 " + " ".join(
        f"{b:02x}" for b in value_id.to_bytes(4, "big")))

    # the topic's page: its subjects, versions and compatibility level (and whose)
    goto(browser, console, "#/topic/" + topic_name)
    level = registry.get_compatibility()
    assert rows(browser, "topic-subjects") == [
        [f"{topic_name}-key", "JSON", "1", str(key_id), f"{level} (global)"],
        [f"{topic_name}-value", "AVRO", "1", str(value_id), "FULL (subject)"]]
    # the Schemas page: every subject
    goto(browser, console, "#/schemas")
    listed = {r[0]: r for r in rows(browser, "subjects")}
    assert listed[f"{topic_name}-shop.Order"][1:3] == ["PROTOBUF", "1"]
    assert listed[f"{topic_name}-value"][4] == "FULL (subject)"


# ---- the SQL page: POST /query (kafkalite/sql/http_query.py) from the browser -------------------

def run_sql(driver, sql: str) -> None:
    """Type ``sql`` on the SQL page and press Run."""
    form = fill(driver, "sql-form", sql=sql)
    form.find_element(By.ID, "sql-run").click()


def open_sql(driver, console) -> None:
    goto(driver, console, "#/sql")


def sql_status(driver) -> str:
    return driver.find_element(By.ID, "sql-status").text


def sql_error(driver) -> str:
    return driver.execute_script(
        "const e = document.getElementById('sql-error'); return e.hidden ? '' : e.textContent")


def sql_header(driver) -> list[str]:
    return driver.execute_script(
        "return Array.from(document.querySelectorAll('#sql-rows thead th'), th => th.innerText)")


def queries_running(server) -> float:
    """The node's kafkalite_sql_queries_running gauge, from /metrics."""
    with urllib.request.urlopen(server.info["metrics"], timeout=20) as resp:
        text = resp.read().decode()
    found = re.search(r"^kafkalite_sql_queries_running (\S+)$", text, re.M)
    assert found, "no kafkalite_sql_queries_running on /metrics"
    return float(found[1])


def test_sql_page_shows_a_querys_rows_as_produced(server, browser, console, admin, topic_name):
    admin.create_topics([NewTopic(topic_name, 2)])[topic_name].result()
    model: dict[str, list[int]] = {}
    for partition in (0, 1):
        records = [(f"c{(i + partition) % 3}", i * 10 + partition) for i in range(7)]
        produce(server, topic_name, [(k.encode(), str(v).encode(), None, None)
                                     for k, v in records], partition=partition)
        for k, v in records:
            model.setdefault(k, []).append(v)
    open_sql(browser, console)
    run_sql(browser, f'SELECT decode(key) AS customer, count(*) AS orders, '
                     f'sum(CAST(decode(value) AS INTEGER)) AS total FROM "{topic_name}" '
                     f'GROUP BY customer ORDER BY customer')
    WebDriverWait(browser, WAIT_S).until(lambda d: sql_status(d) == f"{len(model)} row(s)")
    assert sql_header(browser) == ["customer", "orders", "total"]
    assert rows(browser, "sql-rows") == [[k, str(len(v)), str(sum(v))]
                                         for k, v in sorted(model.items())]
    assert sql_error(browser) == ""


def test_sql_page_shows_a_syntax_errors_one_line_as_the_api_gives_it(server, browser, console):
    sql = "SELECT * FORM orders"
    status, answer = _post_query(server.info["query"], sql)
    assert status == 400 and "line 1" in answer["error"], answer
    open_sql(browser, console)
    run_sql(browser, sql)
    WebDriverWait(browser, WAIT_S).until(lambda d: sql_error(d))
    assert sql_error(browser) == answer["error"]
    assert not browser.find_elements(By.ID, "sql-rows")


def _post_query(url: str, sql: str):
    request = urllib.request.Request(url, data=json.dumps({"sql": sql}).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_sql_page_follows_emit_changes_until_cancel(server, browser, console, admin, topic_name):
    admin.create_topics([NewTopic(topic_name, 1)])[topic_name].result()
    assert queries_running(server) == 0
    open_sql(browser, console)
    run_sql(browser, f'SELECT decode(value) AS dish FROM "{topic_name}" '
                     f"WHERE key = 'bob' EMIT CHANGES")
    # the follower starts at the partition's end: produce until its first row is shown
    def a_row_shown():
        produce(server, topic_name, [(b"bob", b"ramen", None, None),
                                     (b"alice", b"tea", None, None)])
        return bool(browser.find_elements(By.ID, "sql-rows")) and rows(browser, "sql-rows")
    wait_until(a_row_shown, 60, "a row of a record produced after Run", interval=1.0)
    shown = rows(browser, "sql-rows")
    assert sql_header(browser) == ["dish"] and shown and all(r == ["ramen"] for r in shown), shown
    assert queries_running(server) == 1
    browser.find_element(By.ID, "sql-cancel").click()
    WebDriverWait(browser, WAIT_S).until(lambda d: sql_status(d).startswith("cancelled"))
    # the server notices the closed connection at its next write, and ends the query
    wait_until(lambda: queries_running(server) == 0, 60, "the query ended on the server")


def test_sql_page_keeps_the_last_rows_of_a_long_answer(browser, console):
    # an EMIT CHANGES query left open must not grow the page without bound:
    # past SQL_ROWS_KEPT (console.js) the oldest rows go, and a notice says so
    kept, total = 10000, 10050
    open_sql(browser, console)
    run_sql(browser, f"SELECT range AS n FROM range({total})")
    WebDriverWait(browser, 3 * WAIT_S).until(lambda d: sql_status(d) == f"{total} row(s)")
    first, last, count = browser.execute_script(
        "const rows = document.querySelectorAll('#sql-rows tbody tr');"
        "return [rows[0].innerText, rows[rows.length - 1].innerText, rows.length]")
    assert (first, last, count) == (str(total - kept), str(total - 1), kept)
    assert browser.find_element(By.ID, "sql-notice").text == f"showing the last {kept} rows"
    # a short answer after it: all its rows, and no notice
    run_sql(browser, "SELECT 1 AS n")
    WebDriverWait(browser, WAIT_S).until(lambda d: sql_status(d) == "1 row(s)")
    assert not browser.find_element(By.ID, "sql-notice").is_displayed()


SQL_USERS = {"admin": "admin-secret", "alice": "alice-secret"}


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    """A server with security on: alice may Read topic "open", not "closed"."""
    srv = secured_server(tmp_path_factory.mktemp("console-sql"), SQL_USERS, ["--console"])
    try:
        from confluent_kafka import Producer as KafkaProducer
        from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType,
                                           ResourcePatternType, ResourceType)
        from confluent_kafka.admin import AdminClient as KafkaAdmin
        from confluent_kafka.admin import NewTopic as KafkaNewTopic
        kafka_admin = KafkaAdmin(sasl_config(srv, "admin", SQL_USERS["admin"]))
        for f in kafka_admin.create_topics([KafkaNewTopic(t, 1, 1)
                                            for t in ("open", "closed")]).values():
            f.result(30)
        for f in kafka_admin.create_acls([AclBinding(
                ResourceType.TOPIC, "open", ResourcePatternType.LITERAL, "User:alice", "*",
                AclOperation.READ, AclPermissionType.ALLOW)]).values():
            f.result(30)
        producer = KafkaProducer(sasl_config(srv, "admin", SQL_USERS["admin"]))
        for t in ("open", "closed"):
            producer.produce(t, b"v-" + t.encode(), b"k")
        assert producer.flush(30) == 0
        yield srv
    finally:
        stop_server(srv)


def test_sql_page_reads_only_what_the_users_acls_allow(secured, browser):
    """The browser logged in as alice (the page opened with alice:password@,
    which Chromium keeps for the port's realm and sends to /query when
    asked, as it does a login prompt's): her query of "open" shows its row,
    one of "closed" the 403's message and no rows."""
    console = secured.info["console"].replace("://", f"://alice:{SQL_USERS['alice']}@", 1)
    browser.get(console + "#/sql")
    wait_loaded(browser, lambda loaded: loaded == "#/sql")
    run_sql(browser, "SELECT decode(value) AS v FROM open")
    WebDriverWait(browser, WAIT_S).until(lambda d: sql_status(d) == "1 row(s)" or sql_error(d))
    assert sql_error(browser) == "" and rows(browser, "sql-rows") == [["v-open"]]
    run_sql(browser, "SELECT decode(value) AS v FROM closed")
    WebDriverWait(browser, WAIT_S).until(lambda d: sql_error(d))
    assert sql_error(browser) == "not authorized to read topic 'closed'"
    assert not browser.find_elements(By.ID, "sql-rows")
