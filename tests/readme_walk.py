"""Test harness: the snippets of the README and of the docs/ pages, extracted
and run as a user pastes them (issue 42); tests/test_readme_walk.py walks
every page with it.

Reading: ``walks(text, page)`` splits a Markdown page into sections (``#``
to ``###`` headings) and each section's fenced blocks into walks. A walk is
what one user session does: its blocks run in order, in one directory, one
network namespace and one /tmp of their own, so the README's default ports
are free and nothing is left over from another page or another run. A block that starts a
``kafkalite server`` begins a new walk unless it is the section's first
(the Security section's TLS example is a second set-up, not a second server
beside the first). ``page_walk(text, page)`` is the whole page as one walk,
its sections' walks in order: what a reader who pastes the page top to
bottom runs (issue 74), and what tests/test_readme_walk.py walks. A page
that starts a server of other settings while one runs stops it first
(``kafkalite server-stop``), as its reader must.

Markers, HTML comments on the lines right before a block (invisible once
rendered, read by no one but this walk):

- ``<!-- walk: skip: REASON -->``: not run; the test lists it with REASON.
- ``<!-- walk: exit N -->``: the block is meant to end with status N.
- ``<!-- walk: twice -->``: run it again right after: a second run must
  work too (a snippet that creates what it needs).
- ``<!-- walk: after SECTION -->``: the section's own walk first runs
  SECTION's first walk (a section of the same page), as a reader who did
  that section is set up (its server, users, files); a page's walk has run
  it already.
- ``<!-- walk: file NAME; run: COMMAND -->``: the block is the file NAME
  (a test module, say), run by COMMAND.
- ``<!-- walk: no server: REASON -->``: the walk starts no server for it.
- ``<!-- walk: postgresql -->``: the block needs a PostgreSQL on
  localhost:5432 whose superuser ``postgres`` logs in without a password:
  the walk starts one in its namespace (tests/postgres.py's server).
- ``<!-- walk: timeout SECONDS -->``: a block that may take longer than
  the walk's default (90 s).

Running: sh/bash/shell blocks through ``bash -euo pipefail``, python blocks
as a file given to ``python``, with this checkout first on PYTHONPATH (the
``kafkalite`` console script then imports it too), and a Spark driver
with tests/spark's JVM options (``PYSPARK_SUBMIT_ARGS``: quicker to start,
the same code run). Blocks in other
languages (toml, properties, text, c) are a file's contents or a listing:
listed, not run; a block without a language is an error (say which it is).
A walk whose first blocks start no server gets the README's own ``kafkalite
server`` (``server_command``: its opening block's), started in its
directory and waited for until its ready line, as "with the server
running" asks; its later sections have what the blocks before them left. A ``kafkalite
server`` line a block runs in the foreground (no ``&``) is started in the
background and waited for the same way: the user would have left it
running in another terminal.

Once a walk's blocks passed, each server it left running is stopped with
SIGTERM (its supervisor's pid from its data dir's server.json) and
``kafkalite verify`` must pass on the data dir of every server the walk
saw running (one the page stopped itself too).

A block fails if it exits with another status than it should, runs past
its timeout, prints a Python traceback (a thread that died counts: the
process may still exit 0), or lacks a line the README says it prints
(the test's EXPECT). A server's output is looked at for tracebacks too,
once the walk is over.

Who may call: tests, from one thread; a walk needs root for its namespace
(``unusable()`` says why it cannot run).
"""
from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import netns
import postgres
from harness import SPARK_DRIVER_JAVA_OPTIONS, child_env

SERVER_COMMAND = "kafkalite server"     # how a line that starts a server begins


def starts_server(line: str) -> bool:
    """Whether a shell line starts a server: ``kafkalite server`` and its
    arguments, not ``kafkalite server-stop``."""
    return re.match(re.escape(SERVER_COMMAND) + r"(\s|$)", line) is not None

READY_LINE = "kafkalite server ready"
TRACEBACK = "Traceback (most recent call last)"
RUN_LANGUAGES = {"sh": "bash", "bash": "bash", "shell": "bash", "python": "python"}
FILE_LANGUAGES = {"toml", "properties", "text", "ini", "json", "yaml", "c"}
MARKER = re.compile(r"<!--\s*walk:\s*(.*?)\s*-->")


@dataclass
class Block:
    section: str
    line: int               # 1-based line of the opening fence
    language: str
    code: str
    markers: list[str] = field(default_factory=list)
    page: str = "README.md"     # the file, relative to the checkout

    def marker(self, name: str) -> str | None:
        """The value of marker ``name`` ("" for a bare one), or None."""
        for m in self.markers:
            if m == name or m.startswith(name + " ") or m.startswith(name + ":"):
                return m[len(name):].lstrip(":").strip()
        return None

    @property
    def skip(self) -> str | None:
        return self.marker("skip")

    @property
    def runs(self) -> bool:
        return self.language in RUN_LANGUAGES and self.skip is None

    @property
    def starts_server(self) -> bool:
        return self.runs and any(starts_server(line)
                                 for line in logical_lines(self.code))

    def name(self) -> str:
        return f"{self.section} ({self.page} line {self.line})"


@dataclass
class Walk:
    section: str
    index: int                  # the section's walks, from 0
    blocks: list[Block]
    after: str | None = None    # a section whose first walk runs first
    page: str = "README.md"
    # a whole page's walk (``page_walk``): its sections' walks, in order
    parts: list["Walk"] = field(default_factory=list)

    @property
    def id(self) -> str:
        """``<page>-<section>[-N]`` (``readme-acls``, ``docs-streams-streams``),
        ``<page>`` for a whole page's walk: unique over the pages, a
        directory's name."""
        slug = _slug(str(Path(self.page).with_suffix("")))
        if self.parts:
            return slug
        slug += "-" + _slug(self.section)
        return slug + (f"-{self.index + 1}" if self.index else "")

    @property
    def needs_server(self) -> bool:
        return not any(b.starts_server or b.marker("no server") is not None
                       for b in self.blocks)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def logical_lines(code: str) -> list[str]:
    """Shell lines with their backslash continuations joined."""
    out, cur = [], ""
    for line in code.splitlines():
        if line.endswith("\\"):
            cur += line[:-1] + " "
            continue
        out.append((cur + line).strip())
        cur = ""
    if cur:
        out.append(cur.strip())
    return out


def blocks(text: str, page: str = "README.md") -> list[Block]:
    """Every fenced block of ``page``, with its section and the markers
    right before it."""
    found, section, markers = [], "", []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if re.match(r"#{1,3} ", line):
            section, markers = line.lstrip("#").strip(), []
        elif MARKER.fullmatch(line.strip()):
            markers.append(MARKER.fullmatch(line.strip()).group(1))
        elif line.startswith("```"):
            language, start, body = line[3:].strip(), i + 1, []
            i += 1
            while i < len(lines) and not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            found.append(Block(section, start, language, "\n".join(body) + "\n", markers,
                               page))
            markers = []
        elif line.strip():
            markers = []        # a marker belongs to the block right after it
        i += 1
    return found


def walks(text: str, page: str = "README.md") -> list[Walk]:
    """A page's walks, in order (see the module docstring)."""
    out: list[Walk] = []
    for b in blocks(text, page):
        last = out[-1] if out else None
        same = last is not None and last.section == b.section
        if not same or (b.starts_server and any(x.runs for x in last.blocks)):
            out.append(Walk(b.section, last.index + 1 if same else 0, [], page=page))
        walk = out[-1]
        walk.blocks.append(b)
        if b.marker("after") is not None and walk.after is None:
            walk.after = b.marker("after").strip('"')
    return out


def page_walk(text: str, page: str = "README.md") -> Walk:
    """The whole page as one walk: every block in the page's order, in one
    directory, as a reader who pastes the page top to bottom runs it (issue
    74, item 3). Its ``parts`` are the sections' walks; ``after`` markers
    name sections the page walked already and add nothing."""
    parts = walks(text, page)
    title = next((line.lstrip("#").strip() for line in text.splitlines()
                  if re.match(r"#{1,3} ", line)), page)
    return Walk(title, 0, [b for w in parts for b in w.blocks], page=page, parts=parts)


def server_command(text: str) -> str:
    """The README's own command for a server with its defaults: the first
    ``kafkalite server`` its blocks run (``pip install -e . && kafkalite
    server``, in the opening block)."""
    for b in blocks(text):
        for line in logical_lines(b.code):
            for part in line.split("&&"):
                part = part.split("#")[0].strip()
                if starts_server(part):
                    return part
    raise ValueError("no block runs a kafkalite server")


def unusable() -> str | None:
    return netns.unusable()


class _Postgres(postgres.PostgresServer):
    """tests/postgres.py's throwaway PostgreSQL, inside a walk's namespace on
    PostgreSQL's default port, as the README's examples expect it."""

    def __init__(self, ns: "_Namespace"):
        super().__init__()
        self.ns, self.port = ns, 5432

    def _run(self, *cmd, check=True):
        argv = [os.path.join(self.bindir, cmd[0]), *cmd[1:]]
        if self.user:
            argv = ["runuser", "-u", self.user, "--", *argv]
        # its socket directory is in the host's /tmp
        return subprocess.run(self.ns.argv(argv, own_tmp=False), check=check,
                              capture_output=True, text=True, timeout=120)


def _kept_paths(env: dict) -> list[str]:
    """What a walk's own /tmp must not hide, where it lives under /tmp: the
    interpreter's prefix (a virtualenv there: its python, packages and the
    ``kafkalite`` console script; a run in one failed every block with
    ``kafkalite: not found``), this checkout, and the directories of the
    walk's PATH and PYTHONPATH. The outermost of nested ones."""
    candidates = [sys.prefix, sys.exec_prefix, str(Path(__file__).resolve().parents[1])]
    for var in ("PATH", "PYTHONPATH"):
        candidates += env.get(var, "").split(os.pathsep)
    under = sorted({os.path.realpath(p) for p in candidates if p and os.path.isdir(p)
                    and os.path.realpath(p).startswith("/tmp/")})
    kept: list[str] = []
    for path in under:          # sorted: a directory before what is under it
        if not any(path.startswith(k + "/") for k in kept):
            kept.append(path)
    return kept


# Run as `sh -c KEEP_AND_BIND TMP N PATH... CMD...`: each of the N paths is
# bound at its own place in TMP, then TMP (with those binds: --rbind) on /tmp
KEEP_AND_BIND = """t=$0; n=$1; shift
while [ "$n" -gt 0 ]; do
    mkdir -p "$t${1#/tmp}" && mount --bind "$1" "$t${1#/tmp}" || exit 1
    shift; n=$((n - 1))
done
mount --rbind "$t" /tmp && exec "$@"
"""


class _Namespace:
    """A network namespace with loopback only; closing it kills what still
    runs inside (servers a block left in the background). ``argv`` runs a
    command there with ``tmp`` mounted on /tmp: snippets write to /tmp
    (Streams' state.dir, Spark, pytest), and two walks, or two test runs,
    must not meet there. The ``keep`` paths (``_kept_paths``) are bound back
    in at their places."""

    def __init__(self, tag: str, tmp: Path, keep: list[str] = ()):
        self.tmp = tmp
        self.keep = list(keep)
        tmp.mkdir(parents=True, exist_ok=True)
        self.name = f"kl-walk-{os.getpid()}-{tag}"[:60]
        subprocess.run(["ip", "netns", "add", self.name], check=True, capture_output=True)
        subprocess.run(["ip", "-n", self.name, "link", "set", "lo", "up"], check=True,
                       capture_output=True)

    def argv(self, cmd: list, own_tmp: bool = True) -> list:
        if not own_tmp:
            return ["ip", "netns", "exec", self.name, *cmd]
        # `ip netns exec` gives each command a mount namespace of its own
        # (a slave of the host's): the binds are its alone, and the host's
        # cleanup of tmp removes none of what they show
        return ["ip", "netns", "exec", self.name, "sh", "-c", KEEP_AND_BIND, str(self.tmp),
                str(len(self.keep)), *self.keep, *cmd]

    def close(self) -> None:
        pids = subprocess.run(["ip", "netns", "pids", self.name], capture_output=True,
                              text=True).stdout.split()
        # every process stopped before any is killed: killed one by one, a
        # process could run on for a moment with its parent gone and start
        # a shutdown of its own (a fresh-clone run's walk caught the ingest
        # gateway's stderr cut off three lines into a traceback by its own
        # kill), a state of the teardown, not of anything the walk ran
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for pid in pids:
                try:
                    os.kill(int(pid), sig)
                except (ProcessLookupError, ValueError):
                    pass
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True)


@dataclass
class Run:
    """One block's run: what it printed and how it ended."""
    block: Block
    status: int | None          # None: killed at its timeout
    stdout: str
    stderr: str
    seconds: float


class Walker:
    """Runs walks in ``root`` (a directory of its own per walk), which must
    not be under /tmp: each walk has a /tmp of its own (``_Namespace``),
    which would hide it."""

    def __init__(self, root: Path, sections: list[Walk], timeout: float = 90.0,
                 env: dict | None = None, server: str = SERVER_COMMAND):
        if Path("/tmp") in [root.resolve(), *root.resolve().parents]:
            raise ValueError(f"{root}: a walk's own /tmp would hide it")
        self.root = root
        self.sections = sections
        self.server = server        # what a walk that starts no server of its own gets
        self.timeout = timeout
        self.env = env if env is not None else child_env()
        self.env.pop("KAFKALITE_LOG_LEVEL", None)
        # the JVM of a page's Spark block, as tests/spark's: the same code,
        # started in half the time (harness.SPARK_DRIVER_JAVA_OPTIONS; a
        # block at a load of 15 ran past the walk's 90 s without them)
        self.env.setdefault("PYSPARK_SUBMIT_ARGS", shlex.join(
            ["--driver-java-options", SPARK_DRIVER_JAVA_OPTIONS, "pyspark-shell"]))
        self.runs: list[Run] = []
        self._outputs: list[Path] = []
        self._n = 0

    # ---- one walk ----
    def walk(self, walk: Walk, expect: dict[str, list[str]] | None = None,
             leave_out: set[str] = frozenset()) -> list[str]:
        """Run ``walk`` (a section's, or a whole page's: ``page_walk``);
        return its failures (empty: it did what it said). ``expect``: a
        piece of a block's code -> regexes its output must match;
        ``leave_out``: sections of a page's walk passed over (what they
        need is not on this machine)."""
        if walk.parts:
            todo = [w for w in walk.parts if w.section not in leave_out]
            ours = set(map(id, todo))
        else:
            todo, ours = [walk], {id(walk)}
            if walk.after is not None:
                first = next((w for w in self.sections
                              if w.page == walk.page and w.section == walk.after), None)
                if first is None:
                    return [f"{walk.section} ({walk.page}): 'after {walk.after}' names no "
                            f"section of its page"]
                todo.insert(0, first)
        home = self.root / walk.id
        home.mkdir(parents=True, exist_ok=True)
        self._outputs = []
        self._postgres = None
        self._data_dirs: set[Path] = set()
        ns = _Namespace(walk.id[-20:] + str(self._n), home / "tmp", _kept_paths(self.env))
        try:
            failure = self._walk(ns, home, todo, ours, expect or {})
            if not failure:
                failure = self._stop_and_verify(home)
        finally:
            ns.close()
            if self._postgres is not None:
                self._postgres.remove()
        if failure:
            return [failure]
        # what a server printed after its block ended, or the walk's own
        # server, is read once the walk is over
        return [f"{p.name}: a Python traceback:\n{_tail(p.read_text(errors='replace'))}"
                for p in self._outputs if TRACEBACK in p.read_text(errors="replace")]

    def _walk(self, ns, home, todo: list[Walk], ours: set, expect: dict) -> str | None:
        # the README's server, left running by the reader, for a walk whose
        # first blocks need one; a later section that needs a server has the
        # one its page left running (its page starts another if it must)
        runnable = [w for w in todo if any(b.runs for b in w.blocks)]
        if runnable and runnable[0].needs_server:
            failure = self._server(ns, home, self.server)
            if failure:
                return failure
        for w in todo:
            for block in w.blocks:
                if not block.runs:
                    continue
                # what a section this walk runs first (``after``) promises
                # is its own walk's to check
                wanted = [e for key, es in expect.items() if key in block.code
                          for e in es] if id(w) in ours else []
                if block.marker("postgresql") is not None and self._postgres is None:
                    self._postgres = _Postgres(ns)
                    try:
                        self._postgres.start()
                    except RuntimeError as exc:
                        return f"{block.name()}: {exc}"
                for _ in range(2 if block.marker("twice") is not None else 1):
                    failure = self._block(ns, home, block, wanted)
                    self._note_data_dirs(home)
                    if failure:
                        return failure
        return None

    def _note_data_dirs(self, home: Path) -> None:
        """The data dirs of the servers running now: each is verified once
        the walk is over, also one whose server the page itself stopped
        (its server.json is gone by then)."""
        # os.walk, which passes over what vanishes under it (a Spark job still
        # removing its temporary directories), not Path.rglob, which raises
        self._data_dirs.update(Path(d) for d, _, files in os.walk(home)
                               if "server.json" in files)

    def _stop_and_verify(self, home: Path) -> str | None:
        """Each server the walk left running stopped as its user stops one
        (SIGTERM to the supervisor named in its data dir's server.json),
        then ``kafkalite verify`` of each data dir a server ran on: the data
        of a healthy server after a clean stop must pass (issue 74: verify
        reported damage in directories the server itself writes)."""
        self._note_data_dirs(home)
        for data_dir in sorted(self._data_dirs):
            try:
                pid = int(json.loads((data_dir / "server.json").read_text())["pid"])
            except (OSError, ValueError, KeyError, TypeError):
                continue                # the page stopped it itself
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            deadline = time.monotonic() + self.timeout
            while _running(pid):
                if time.monotonic() > deadline:
                    return f"the server of {data_dir} still ran {self.timeout:.0f} s after SIGTERM"
                time.sleep(0.1)
        for data_dir in sorted(d for d in self._data_dirs if d.is_dir()):
            done = subprocess.run([sys.executable, "-m", "kafkalite.cli", "verify",
                                   str(data_dir)], capture_output=True, text=True,
                                  env=self.env, timeout=self.timeout)
            if done.returncode != 0:
                return (f"`kafkalite verify {data_dir}` after its server stopped cleanly: "
                        f"exit status {done.returncode}\n{_tail(done.stdout + done.stderr)}")
        return None

    def _server(self, ns: _Namespace, home: Path, command: str) -> str | None:
        """Start ``command`` (a ``kafkalite server`` line) in the background
        and wait for its ready line."""
        self._n += 1
        log = home / f"server-{self._n}.out"
        self._outputs.append(log)
        with open(log, "wb") as out:
            proc = subprocess.Popen(ns.argv(["bash", "-c", "exec " + command]), cwd=home,
                                    stdout=out, stderr=subprocess.STDOUT, env=self.env,
                                    start_new_session=True)
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if READY_LINE in log.read_text(errors="replace"):
                return None
            if proc.poll() is not None:
                return (f"`{command}` exited with status {proc.returncode} before its ready "
                        f"line:\n{_tail(log.read_text(errors='replace'))}")
            time.sleep(0.1)
        return f"`{command}` printed no ready line in {self.timeout:.0f} s"

    def _block(self, ns: _Namespace, home: Path, block: Block, expect: list[str]) -> str | None:
        if block.language == "python":
            return self._script(ns, home, block, block.code, expect)
        # a server the block runs in the foreground is left running by the
        # user in a terminal of its own: here in the background, waited for
        lines = logical_lines(block.code)
        fg = [i for i, line in enumerate(lines)
              if starts_server(line) and not line.rstrip().endswith("&")]
        if not fg:
            return self._script(ns, home, block, block.code, expect)
        start = 0
        pieces = []
        for i in fg:
            pieces.append(("\n".join(lines[start:i]), None))
            pieces.append(("", lines[i]))
            start = i + 1
        pieces.append(("\n".join(lines[start:]), None))
        outputs = []
        for code, server in pieces:
            if server:
                failure = self._server(ns, home, server)
            elif code.strip():
                failure = self._script(ns, home, block, code + "\n", [], outputs)
            else:
                continue
            if failure:
                return failure
        return self._check_expect(block, "".join(outputs), expect)

    def _script(self, ns, home, block: Block, code: str, expect: list[str],
                outputs: list | None = None) -> str | None:
        self._n += 1
        file_marker = block.marker("file")
        if file_marker is not None:
            name, _, run = file_marker.partition(";")
            path = home / name.strip()
            argv = ["bash", "-euo", "pipefail", "-c", run.split("run:", 1)[1].strip()]
        elif block.language == "python":
            path = home / f"walk_{self._n}.py"
            argv = [sys.executable, path.name]
        else:
            path = home / f"walk-{self._n}.sh"
            argv = ["bash", "-euo", "pipefail", path.name]
        path.write_text(code)
        out_path, err_path = home / f"walk-{self._n}.stdout", home / f"walk-{self._n}.stderr"
        self._outputs.extend([out_path, err_path])
        t0 = time.monotonic()
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            # files, not pipes: a server a block leaves in the background
            # keeps its output open after the block ended
            proc = subprocess.Popen(ns.argv(argv), cwd=home, stdout=out, stderr=err,
                                    stdin=subprocess.DEVNULL, env=self.env,
                                    start_new_session=True)
            timeout = float(block.marker("timeout") or self.timeout)
            try:
                status = proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                status = None
        stdout = out_path.read_text(errors="replace")
        stderr = err_path.read_text(errors="replace")
        self.runs.append(Run(block, status, stdout, stderr, time.monotonic() - t0))
        if outputs is not None:
            outputs.append(stdout + stderr)
        shown = (f"\n--- the block:\n{code}--- stdout:\n{_tail(stdout)}\n"
                 f"--- stderr:\n{_tail(stderr)}")
        want = int(block.marker("exit") or 0)
        if status is None:
            return f"{block.name()}: still running after {timeout:.0f} s{shown}"
        if status != want:
            return f"{block.name()}: exit status {status}, not {want}{shown}"
        if TRACEBACK in stdout or TRACEBACK in stderr:
            return f"{block.name()}: printed a Python traceback (exit status {status}){shown}"
        failure = self._check_expect(block, stdout + stderr, expect)
        return failure + shown if failure else None

    @staticmethod
    def _check_expect(block: Block, output: str, expect: list[str]) -> str | None:
        missing = [e for e in expect if not re.search(e, output, re.M)]
        if missing:
            return f"{block.name()}: printed nothing matching {missing}"
        return None


def _running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, waiting for the walk's Popen to reap
    it, has stopped)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.splitlines()[-lines:])

