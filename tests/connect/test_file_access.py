"""Which files a connector and a config provider may open (issue 67, item
1; kafkalite/connect/file_access.py, config_providers.py), in this process:
the rules on real files, directories and links, and the attacker's paths."""
from __future__ import annotations

import os

import pytest

from kafkalite.connect.config import ConfigException
from kafkalite.connect.config_providers import ConfigTransformer, reverse_transform
from kafkalite.connect.errors import ConnectException
from kafkalite.connect.file_access import DATA_DIR_MARKERS, FileAccess
from kafkalite.server.node import processes

FILE = "org.apache.kafka.common.config.provider.FileConfigProvider"
DIRECTORY = "org.apache.kafka.common.config.provider.DirectoryConfigProvider"
ENV = "org.apache.kafka.common.config.provider.EnvVarConfigProvider"


def refused(access, path, flags=os.O_RDONLY) -> str:
    with pytest.raises(ConnectException) as e:
        os.close(access.open(str(path), flags))
    return str(e.value)


def test_the_markers_are_the_servers_own_file_names():
    # a data directory is known by these; the server owns the names (processes.py)
    assert set(DATA_DIR_MARKERS) == {processes.SERVER_FILE, processes.NODE_KEYS_FILE}


def test_no_file_at_all_when_the_worker_lists_no_directory(tmp_path):
    (tmp_path / "lines.txt").write_text("a\n")
    message = refused(FileAccess([]), tmp_path / "lines.txt")
    assert "kafkalite.file.allowed.paths" in message


def test_a_file_under_a_listed_directory_opens_and_one_outside_does_not(tmp_path):
    allowed, other = tmp_path / "allowed", tmp_path / "other"
    (allowed / "sub").mkdir(parents=True)
    other.mkdir()
    (allowed / "sub" / "in.txt").write_text("hello\n")
    (other / "secret.txt").write_text("secret\n")
    access = FileAccess([str(allowed)])
    fd = access.open(str(allowed / "sub" / "in.txt"))
    assert os.read(fd, 100) == b"hello\n"
    os.close(fd)
    assert "is not under a directory listed" in refused(access, other / "secret.txt")
    # ".." is resolved before the check, not after it
    assert "is not under" in refused(access, f"{allowed}/sub/../../other/secret.txt")
    # a directory whose name starts like the allowed one is another directory
    (tmp_path / "allowed-not").mkdir()
    (tmp_path / "allowed-not" / "x").write_text("x\n")
    assert "is not under" in refused(access, tmp_path / "allowed-not" / "x")
    # relative to the working directory, as Kafka's connectors take it
    cwd = os.getcwd()
    os.chdir(allowed)
    try:
        os.close(access.open("sub/in.txt"))
    finally:
        os.chdir(cwd)


def test_a_sink_creates_only_below_the_directory(tmp_path):
    access = FileAccess([str(tmp_path)])
    fd = access.open(str(tmp_path / "out.txt"), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.write(fd, b"x\n")
    os.close(fd)
    assert (tmp_path / "out.txt").read_text() == "x\n"
    with pytest.raises(ConnectException):
        access.open("/etc/kafkalite-created-by-a-connector", os.O_WRONLY | os.O_CREAT)
    assert not os.path.exists("/etc/kafkalite-created-by-a-connector")


def test_links_below_the_directory_are_not_followed(tmp_path):
    """The attacker's way around a prefix check: a link placed in the
    allowed directory (by another connector's sink, or a local user)."""
    allowed, secrets = tmp_path / "allowed", tmp_path / "secrets"
    allowed.mkdir()
    secrets.mkdir()
    (secrets / "owner.key_secret").write_text("the server's key\n")
    os.symlink(secrets / "owner.key_secret", allowed / "key")
    os.symlink(secrets, allowed / "dir")
    os.symlink(secrets / "new.txt", allowed / "dangling")
    access = FileAccess([str(allowed)])
    assert "symbolic link" in refused(access, allowed / "key")
    assert "symbolic link" in refused(access, allowed / "dir" / "owner.key_secret")
    # a sink's create through a dangling link would make the file outside
    assert "symbolic link" in refused(access, allowed / "dangling",
                                      os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    assert not (secrets / "new.txt").exists()


def test_the_allowed_directory_itself_may_be_a_link(tmp_path):
    """The operator's own link is resolved once, when the worker starts."""
    real = tmp_path / "real"
    real.mkdir()
    (real / "in.txt").write_text("x\n")
    os.symlink(real, tmp_path / "alias")
    os.close(FileAccess([str(tmp_path / "alias")]).open(str(real / "in.txt")))


def test_never_a_kafkalite_data_directory_even_when_listed(tmp_path):
    """The issue's attack: owner.key_secret and sasl-users.json in the data
    directory, read by a FileStreamSource. A data directory is refused
    below any listed directory, and when it is listed itself."""
    data = tmp_path / "kafkalite-data"
    (data / "orders-0").mkdir(parents=True)
    (data / processes.SERVER_FILE).write_text("{}")
    for name in ("owner.key_secret", "sasl-users.json", "orders-0/00000000000000000000.log"):
        (data / name).write_text("secret")
    for listed in (tmp_path, data):
        access = FileAccess([str(listed)])
        for name in ("owner.key_secret", "sasl-users.json", "orders-0/00000000000000000000.log",
                     "new-file"):
            assert "kafkalite data directory" in refused(
                access, data / name, os.O_RDWR | os.O_CREAT), name
    assert not (data / "new-file").exists()
    # a cluster node's data directory has its key pair, no server.json
    node = tmp_path / "node"
    node.mkdir()
    (node / processes.NODE_KEYS_FILE).write_text("k")
    assert "kafkalite data directory" in refused(FileAccess([str(tmp_path)]), node / "x")


def test_only_regular_files(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    access = FileAccess([str(tmp_path)])
    # a FIFO would block the task's open forever without O_NONBLOCK
    assert "not a regular file" in refused(access, tmp_path / "fifo")
    assert "not a regular file" in refused(access, tmp_path / "dir")
    assert "directory" in refused(access, tmp_path)


def transformer(tmp_path, **worker) -> ConfigTransformer:
    return ConfigTransformer.from_worker_config(worker)


def test_file_and_directory_providers_read_only_under_their_allowed_paths(tmp_path):
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "db.properties").write_text("password=s3cret\nuser = app\n")
    (secrets / "token").write_text("tok-123")
    (tmp_path / "elsewhere.properties").write_text("password=other\n")
    t = ConfigTransformer.from_worker_config({
        "config.providers": "file,dir",
        "config.providers.file.class": FILE,
        "config.providers.file.param.allowed.paths": str(secrets),
        "config.providers.dir.class": "DirectoryConfigProvider",
        "config.providers.dir.param.allowed.paths": str(secrets)})
    raw = {"connection.password": f"${{file:{secrets}/db.properties:password}}",
           "connection.user": f"u-${{file:{secrets}/db.properties:user}}",
           "token": f"${{dir:{secrets}:token}}",
           "missing": f"${{file:{secrets}/db.properties:nope}}",
           "unknown": "${vault:a:b}", "plain": "x"}
    assert t.transform(raw) == {"connection.password": "s3cret", "connection.user": "u-app",
                                "token": "tok-123", "missing": raw["missing"],
                                "unknown": "${vault:a:b}", "plain": "x"}
    with pytest.raises(ConnectException, match="is not under"):
        t.transform({"x": f"${{file:{tmp_path}/elsewhere.properties:password}}"})
    with pytest.raises(ConnectException, match="without '/'"):
        t.transform({"x": f"${{dir:{secrets}:../elsewhere.properties}}"})


def test_providers_open_nothing_unless_the_operator_lists_it(tmp_path, monkeypatch):
    """Kafka's providers default to every path and every variable; ours to
    none, so enabling a provider does not hand the worker's files and
    environment to whoever may create a connector."""
    (tmp_path / "a.properties").write_text("k=v\n")
    monkeypatch.setenv("KAFKALITE_TEST_SECRET", "hunter2")
    t = ConfigTransformer.from_worker_config({
        "config.providers": "file,env", "config.providers.file.class": FILE,
        "config.providers.env.class": ENV})
    with pytest.raises(ConnectException, match="allowed.paths"):
        t.transform({"x": f"${{file:{tmp_path}/a.properties:k}}"})
    with pytest.raises(ConnectException, match="allowlist.pattern"):
        t.transform({"x": "${env:KAFKALITE_TEST_SECRET}"})
    t = ConfigTransformer.from_worker_config({
        "config.providers": "env", "config.providers.env.class": ENV,
        "config.providers.env.param.allowlist.pattern": "KAFKALITE_TEST_.*"})
    assert t.transform({"x": "${env:KAFKALITE_TEST_SECRET}"}) == {"x": "hunter2"}
    with pytest.raises(ConnectException, match="not matched"):
        t.transform({"x": "${env:HOME}"})


def test_a_bad_provider_setting_stops_the_worker_naming_it():
    with pytest.raises(ConfigException) as e:
        ConfigTransformer.from_worker_config({"config.providers": "x"})
    assert e.value.name == "config.providers.x.class"
    with pytest.raises(ConfigException) as e:
        ConfigTransformer.from_worker_config({"config.providers": "x",
                                              "config.providers.x.class": "os.path:join"})
    assert "FileConfigProvider" in str(e.value)


def test_task_configs_are_stored_with_the_references():
    raw = {"connection.password": "${file:/s/db.properties:password}", "topic": "t"}
    tasks = [{"connection.password": "s3cret", "topic": "t", "table": "a"}]
    assert reverse_transform(raw, tasks) == [
        {"connection.password": "${file:/s/db.properties:password}", "topic": "t", "table": "a"}]
