"""What a fresh install promises: the parts that need more than
``pip install -e .`` (pyspark, a Java runtime) say so in one line, and their
tests are skipped, never crash, where those are missing.

Both are checked by running the real thing in a subprocess with the missing
piece taken away: PATH without java and no JAVA_HOME, or pyspark made
unimportable (``sys.modules["pyspark"] = None`` makes ``import pyspark`` fail
as it does when it is not installed)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from harness import child_env

REPO = Path(__file__).resolve().parents[1]
WITHOUT_PYSPARK = "import sys, runpy; sys.modules['pyspark'] = None; "


@pytest.fixture
def path_without_java(tmp_path):
    """A PATH with every command of the current one except java."""
    shims = tmp_path / "bin"
    shims.mkdir()
    for d in os.environ.get("PATH", "").split(os.pathsep):
        if not os.path.isdir(d):
            continue
        for name in os.listdir(d):
            target = os.path.join(d, name)
            if name != "java" and not (shims / name).exists() and os.access(target, os.X_OK):
                (shims / name).symlink_to(target)
    assert shutil.which("java", path=str(shims)) is None
    return str(shims)


@pytest.mark.processes
def test_spark_tests_skip_without_java(path_without_java):
    env = child_env(PATH=path_without_java)
    env.pop("JAVA_HOME", None)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0",
                        "-rs", "tests/spark"], cwd=REPO, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "error" not in r.stdout.splitlines()[-1], r.stdout[-3000:]
    assert " skipped" in r.stdout.splitlines()[-1]
    assert "need a Java runtime" in r.stdout and "tools/install-system-deps" in r.stdout


@pytest.mark.processes
@pytest.mark.parametrize("script, prefix", [("spark/windowed_counts.py", "windowed_counts.py: "),
                                            ("benchmarks/bench_spark.py", "bench_spark: ")])
def test_spark_scripts_without_pyspark_name_the_extra_in_one_line(script, prefix):
    # JAVA_HOME set (to anything) passes the scripts' Java check, so that the
    # missing pyspark is what they report even on a machine without Java
    r = subprocess.run([sys.executable, "-c", WITHOUT_PYSPARK +
                        f"sys.path.insert(0, {os.path.dirname(script)!r}); "
                        f"sys.argv = [{script!r}, '--quick'][:1 + ('bench' in {script!r})]; "
                        f"runpy.run_path({script!r}, run_name='__main__')"],
                       cwd=REPO, env=child_env(JAVA_HOME="/nonexistent"), capture_output=True,
                       text=True, timeout=60)
    assert r.returncode != 0
    assert "Traceback" not in r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith(prefix + "kafkalite_spark needs pyspark"), line
    assert "kafkalite[spark]" in line


@pytest.mark.processes
def test_importing_the_spark_connector_without_pyspark_names_the_extra():
    r = subprocess.run([sys.executable, "-c", WITHOUT_PYSPARK + "import kafkalite_spark"],
                       cwd=REPO, env=child_env(PYTHONPATH=os.pathsep.join(
                           [str(REPO / "spark"), child_env()["PYTHONPATH"]])),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("ModuleNotFoundError: kafkalite_spark needs pyspark")
    assert "kafkalite[spark]" in last


def test_the_test_extra_holds_what_setup_py_imports():
    """The build cache's test below runs setup.py in the test environment,
    which pip gives the build's requirements only in its isolated build: in
    a fresh virtualenv that installed ``.[test]`` it failed with ``No
    module named 'Cython'`` (issue 73). The test extra names each of them
    (wheel aside: setup.py does not import it)."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())

    def names(requirements):
        return {re.match(r"[A-Za-z0-9._-]+", r).group().lower() for r in requirements}
    missing = (names(pyproject["build-system"]["requires"]) - {"wheel"}
               - names(pyproject["project"]["dependencies"])
               - names(pyproject["project"]["optional-dependencies"]["test"]))
    assert not missing, f"the build's requirements missing from the test extra: {missing}"


@pytest.mark.processes
def test_an_install_takes_unchanged_extensions_from_the_build_cache(tmp_path):
    """pip builds every install in a new temporary directory, so each
    `pip install -e '.[extra]'` compiled all the extensions again (issue
    42): setup.py copies those whose inputs have not changed since from
    build/ext-cache/. Here the cache holds stand-ins newer than every input:
    they are what the build puts in place, and none is translated or
    compiled (that would take minutes and fail on the stand-ins)."""
    import sysconfig

    import Cython
    import numpy
    tree = tmp_path / "tree"
    tree.mkdir()
    shutil.copy(REPO / "setup.py", tree)
    # with the .c files Cython wrote in this checkout, if it was built here
    # (they keep their times: only a changed .pyx is translated again)
    shutil.copytree(REPO / "ext", tree / "ext", ignore=shutil.ignore_patterns("*.html", "*.o"))
    translated = {p: p.stat().st_mtime_ns for p in (tree / "ext").glob("*.c")}
    cache = (tree / "build" / "ext-cache" /
             f"{sysconfig.get_config_var('SOABI')}-numpy-{numpy.__version__}-cython-"
             f"{Cython.__version__}")
    cache.mkdir(parents=True)
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    names = [p.stem for p in (tree / "ext").glob("*.pyx")]
    assert len(names) >= 12
    for name in names:
        (cache / f"{name}{suffix}").write_bytes(b"cached " + name.encode())
    r = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--build-lib", "lib",
                        "--build-temp", "tmp"], cwd=tree, env=child_env(),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    for name in names:
        assert (tree / "lib" / "kafkalite" / "_ext" / f"{name}{suffix}").read_bytes() == \
            b"cached " + name.encode()
    assert {p: p.stat().st_mtime_ns for p in (tree / "ext").glob("*.c")} == translated, \
        "nothing is translated when all is cached"
    # a changed input makes the stand-ins stale: the build does not take them
    # (it translates and compiles; stopped here by a compiler that fails at once)
    smallest = min(names, key=lambda n: (tree / "ext" / f"{n}.pyx").stat().st_size)
    later = os.path.getmtime(cache / f"{smallest}{suffix}") + 10
    os.utime(tree / "ext" / f"{smallest}.pyx", (later, later))
    shutil.rmtree(tree / "lib")
    r = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--build-lib", "lib",
                        "--build-temp", "tmp"], cwd=tree, env=child_env(CC="false", LDSHARED="false"),
                       capture_output=True, text=True, timeout=600)
    assert r.returncode != 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert not (tree / "lib" / "kafkalite" / "_ext" / f"{smallest}{suffix}").exists()
