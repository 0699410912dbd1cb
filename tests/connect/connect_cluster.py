"""Helpers of the distributed-mode offsets and config-offset tests:
``kafkalite connect distributed`` workers whose REST ports the test picks
(the group's member ids start with the worker's URL, so the port order is
the member id order the assignor breaks ties with), this folder importable
(connect_plugins), and an optional fault (distributed/internal_topics.py's FAULT_ENV)."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import requests

from connect_helpers import FILES
from harness import free_port

from kafkalite.launcher import package_env


def free_ports(n: int) -> list[int]:
    """``n`` free ports in increasing string order (member id order)."""
    return sorted((free_port() for _ in range(n)), key=str)


def group_name(tag: str) -> str:
    return f"{tag}-{os.getpid()}-{int(time.time() * 1000) % 10**8}"


def start_worker(server, tmp_path, i, group, port, fault=None, **extra):
    """A worker of ``group`` on ``port``: (Popen, REST url); its log is
    ``worker<i>.log`` (werkzeug's request lines included)."""
    props = tmp_path / f"worker{i}.properties"
    props.write_text(
        f"bootstrap.servers={server.bootstrap}\ngroup.id={group}\n"
        f"config.storage.topic={group}-configs\nstatus.storage.topic={group}-status\n"
        f"offset.storage.topic={group}-offsets\noffset.storage.partitions=3\n"
        f"offset.flush.interval.ms=300\nsession.timeout.ms=3000\nheartbeat.interval.ms=300\n"
        f"consumer.session.timeout.ms=3000\nconsumer.heartbeat.interval.ms=300\n"
        f"scheduled.rebalance.max.delay.ms=1000\n"
        f"value.converter=org.apache.kafka.connect.storage.StringConverter\n"
        f"listeners=http://127.0.0.1:{port}\n" +
        "".join(f"{k}={v}\n" for k, v in {**FILES, **extra}.items()))
    env = package_env()
    env["PYTHONPATH"] = os.path.dirname(__file__) + os.pathsep + env["PYTHONPATH"]
    if fault:
        env["KAFKALITE_CONNECT_FAULT"] = fault
    log = open(tmp_path / f"worker{i}.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "kafkalite", "connect", "distributed",
                             str(props)], env=env, stdout=log, stderr=subprocess.STDOUT)
    return proc, f"http://127.0.0.1:{port}"


def call(method, url, path, **kw):
    return requests.request(method, url + path, timeout=60, **kw)


def get(url, path, auth=None):
    """The JSON of a GET (None unless 200); ``auth`` (user, password) for a
    worker whose REST API asks for logins."""
    try:
        r = requests.get(url + path, timeout=10, auth=auth)
    except requests.ConnectionError:
        return None
    return r.json() if r.status_code == 200 else None


def status(url, name):
    return get(url, f"/connectors/{name}/status")


def running(url, name, tasks):
    """The status of ``name`` once it and ``tasks`` tasks are RUNNING (else None)."""
    st = status(url, name)
    if st and st["connector"]["state"] == "RUNNING" and len(st["tasks"]) == tasks and \
            all(t["state"] == "RUNNING" for t in st["tasks"]):
        return st
    return None


def stopped(url, name):
    """Whether ``name`` is STOPPED with no tasks (its offsets may change)."""
    st = status(url, name)
    return bool(st and st["connector"]["state"] == "STOPPED" and not st["tasks"])
