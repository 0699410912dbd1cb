"""kafkalite's import layers, read from the source (issue 41).

Every import of every module of kafkalite/ and spark/kafkalite_spark/ is
read with ``ast``: at module level and inside functions (and under
``TYPE_CHECKING``), ``import x`` and ``from x import y``, relative ones
resolved, plus the modules a package's ``lazy_exports`` table loads on
first use. Three rules, each a table below:

(a) LAYERS: what each part of kafkalite (a package or module right under
    kafkalite/; kafkalite_spark counts as ``spark``) may import. Data flows
    one way: the capabilities (Connect, Streams, ...) and client/ use
    protocol/; server/ uses protocol/ and storage/; everything may use the
    bottom (record/, _ext/, errors, ...); nothing imports the entry points
    (cli, tools, testing) but another entry point.
(b) SERVER_FOLDERS: server/'s folders from the bottom up. An import from a
    folder to one above it needs its line in SERVER_UPWARD, with the reason;
    the cycles between folders those lines make are SERVER_FOLDER_CYCLES,
    which no new import may widen; and no module of kafkalite imports
    itself back through others (MODULE_CYCLES: those that exist, and why).
(c) No module takes another folder's private name (``from x import _y`` or
    ``x._y`` on an imported module).

An entry in an exception table that no import needs any more fails the
test too, so the tables stay what they claim: the list of today's debts.
docs/architecture.md ("Layers") says the same in prose; the docstring of
each folder of server/ says what it may import.
Each check was shown to fail on a planted violation: a client import in
storage/ and a server import in webconsole/, a package in no layer, an
import up server/'s folders, a folder pulled into a cycle by an import
down, a new cycle between modules, a private name taken.

Why a test of our own rather than import-linter: rule (c) needs the names
imported, which import-linter does not check; the messages can say which
table to change; and it runs in the test process in about a second, as a
unit-tier test (tests/conftest.py), with nothing to install.
"""
from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# top-level package -> its directory
PACKAGES = {"kafkalite": ROOT / "kafkalite", "kafkalite_spark": ROOT / "spark" / "kafkalite_spark"}

# (a) The layers. The bottom, which every layer may import: the byte format
# (record/, the Cython codec in _ext/), Kafka's errors, the rate-limited
# log, the lazy-export helper, Confluent's HTTP error body and lazy app (the
# registry and the REST proxy share it), the one HTTP server, route table and
# authorization layer (every HTTP service, server/'s and the capabilities', is served by it), pyiceberg's SQL catalog made safely
# (Connect's Iceberg sink and Spark's history read share it), the launcher
# that starts a server in child processes (it imports none of the broker), and
# the package root (its version only).
BOTTOM = frozenset({"kafkalite", "_ext", "_lazy", "errors", "ratelimit", "record",
                    "confluent_http", "http_server", "http_routes", "http_access",
                    "iceberg_catalog", "launcher"})
# What a client of the broker may import: kafkalite's own clients and the
# protocol they speak (Connect's group client and the Spark sink's
# transactions name Kafka's APIs), never server/ or storage/.
CLIENT_SIDE = BOTTOM | {"client", "protocol"}
ENTRY_POINTS = frozenset({"cli", "__main__", "tools", "testing"})
LAYERS: dict[str, frozenset[str]] = {
    # the bottom
    "kafkalite": frozenset(),
    "_ext": frozenset(),
    "_lazy": frozenset(),
    "errors": frozenset(),
    "ratelimit": frozenset(),
    "confluent_http": frozenset(),    # the registry's and the REST proxy's error body
    "http_server": frozenset(),       # the one HTTP server of every HTTP service
    "http_routes": frozenset(),       # the one route table convention of its apps
    "http_access": frozenset(),       # the one authorization layer of its apps
    "iceberg_catalog": frozenset(),   # pyiceberg's SQL catalog: Connect's sink, Spark's history
    "launcher": frozenset({"kafkalite"}),  # starts a server in child processes (its root: where)
    "record": frozenset({"_ext", "_lazy", "errors"}),
    # transports shared by client/ and server/: the shared-memory rings and
    # the Unix-domain sockets beside a worker's Kafka listener
    "shm": BOTTOM,
    "local_socket": BOTTOM,
    # the log on disk and the wire format import neither each other nor anything above
    "storage": BOTTOM,
    "protocol": BOTTOM,
    # the broker: nothing from client/ or any package above it
    "server": BOTTOM | {"protocol", "storage", "shm", "local_socket"},
    "client": BOTTOM | {"protocol", "shm", "local_socket"},
    # the capabilities, each a client of the broker and none another's
    "connect": CLIENT_SIDE,
    "streams": CLIENT_SIDE,
    "registry": CLIENT_SIDE,
    "rest_proxy": CLIENT_SIDE,
    "iceberg_rest": CLIENT_SIDE,      # reads the node's SQL catalog file, never the broker
    "webconsole": CLIENT_SIDE,
    "bench": CLIENT_SIDE,
    "spark": CLIENT_SIDE,
    # SQL over topics: reads them through the client; a persistent query is
    # a Streams application (issue 76: run with the Streams runtime's exactly-once)
    "sql": CLIENT_SIDE | {"streams"},
    # the entry points put the layers together (cli/server.py hands the supervisor
    # the web console and the registry, so that server/ need not import them)
    **{name: frozenset() for name in ENTRY_POINTS},
}

# Imports the layers refuse that exist today: (importing file, imported
# module) -> why. A new one needs a line here and a reason a reviewer accepts.
LAYER_EXCEPTIONS: dict[tuple[str, str], str] = {}

# (b) server/'s folders, from the bottom up: a folder may import those below
# it. The modules at server/'s top (config.py, ...) count as folders of their
# own. The order is the one today's imports allow with the fewest exceptions.
SERVER_FOLDERS = (
    "ratelimit",        # the listeners' rate-limited log
    "topic",            # topic names: the internal topics, the naming rules
    "listeners",        # the named Kafka listeners, read from the config's settings
    "auth",             # SASL and TLS per listener, credentials, the authorizer
    "network",          # dispatcher, listeners, relay, TLS, broker requests, quotas
    "config",           # ServerConfig (validated by auth/security.py when it is made)
    "config_registry",  # the dynamic configs' rules (DescribeConfigs, AlterConfigs)
    "group_config",     # group configs (KIP-848): their rules, read by controller and group
    "replica",          # replica manager, partitions, purgatory, fetchers, the ring gateway
    "internal_topic",   # the coordinators' logs on a Partition of their own
    "controller",       # metadata, topics, configs, ACLs, SCRAM, quotas
    "share",            # share groups and their state
    "group",            # consumer groups (it routes share-group requests to share/)
    "txn",              # transactions, producer ids
    "metrics",          # /metrics and /health
    "node",             # the processes: supervisor, worker, broker node
)
# Imports from a server/ folder up to one above it: (importing file,
# imported module) -> why. Each closes a cycle between folders (not between
# modules: see MODULE_CYCLES); moving the imported module down is the fix.
SERVER_UPWARD: dict[tuple[str, str], str] = {
}
# The cycles between server/'s folders that SERVER_UPWARD's imports make
# today (each folder reaches every other of its set); a new import may not
# add a folder to one, or make another.
SERVER_FOLDER_CYCLES = (
)
# Cycles between modules: the set of modules -> why.
MODULE_CYCLES: dict[frozenset[str], str] = {
}

# (c) Private names taken across folders: (importing file, module, name) -> why.
PRIVATE_EXCEPTIONS: dict[tuple[str, str, str], str] = {}


@dataclass(frozen=True)
class Import:
    file: str           # the importing file, relative to the repository
    line: int
    source: str         # the importing module
    target: str         # the imported module
    name: str | None    # the name taken from it; None for the module itself

    def __str__(self) -> str:
        what = f"{self.target}.{self.name}" if self.name else self.target
        return f"{self.file}:{self.line} imports {what}"


def _modules() -> dict[str, Path]:
    modules = {}
    for top, directory in PACKAGES.items():
        for path in sorted(directory.rglob("*.py")):
            parts = path.relative_to(directory).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join((top, *parts))] = path
    return modules


MODULES = _modules()


def _ours(name: str) -> str | None:
    """The module of ours that ``import name`` loads (a compiled module in
    _ext/ counts as _ext), or None for another distribution's."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def _imports_of(module: str, path: Path) -> tuple[list[Import], list[Import]]:
    """The module's imports of ours, and its uses of a private attribute of
    one of our modules bound to a local name (``x._y``)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    file = path.relative_to(ROOT).as_posix()
    found, bound = [], {}

    def add(line: int, dotted: str, name: str | None = None, asname: str | None = None) -> None:
        if name is not None and f"{dotted}.{name}" in MODULES:
            dotted, name = f"{dotted}.{name}", None
            bound[asname or dotted.rpartition(".")[2]] = dotted
        elif name is None and asname is not None and dotted in MODULES:
            bound[asname] = dotted
        target = _ours(dotted)
        if target is not None and target != module:
            found.append(Import(file, line, module, target, name))

    attributes = []         # (line, name, attribute): ``name`` is bound by the end of the walk
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and _private(node.attr)):
            attributes.append((node.lineno, node.value.id, node.attr))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                add(node.lineno, alias.name, asname=alias.asname)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = parts[:len(parts) - node.level + 1]
                dotted = ".".join(base + ([node.module] if node.module else []))
            else:
                dotted = node.module
            for alias in node.names:
                add(node.lineno, dotted, None if alias.name == "*" else alias.name, alias.asname)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id == "lazy_exports" and len(node.args) == 2
              and isinstance(node.args[1], ast.Dict)):
            # kafkalite/_lazy.py: {module: (names...)} loaded on first use
            for key in node.args[1].keys:
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    add(key.lineno, key.value)
    private = [Import(file, line, module, bound[name], attr)
               for line, name, attr in attributes if name in bound]
    return found, private


@functools.cache
def _read() -> dict[str, tuple[list[Import], list[Import]]]:
    """Every module's imports and private attribute uses, read once, when a
    test first asks: not at import, which every pytest-xdist worker does at
    collection (3.3 CPU-s each) whether or not it runs these tests; and no
    tree is kept (a worker holding every module's tree, about 900,000
    objects, made each of its full garbage collections 0.5 s longer)."""
    return {module: _imports_of(module, path) for module, path in MODULES.items()}


def _imports() -> list[Import]:
    return [imp for found, _ in _read().values() for imp in found]


def _part(module: str) -> str:
    """The layer a module belongs to: the package or module right under kafkalite/."""
    parts = module.split(".")
    if parts[0] == "kafkalite_spark":
        return "spark"
    return parts[1] if len(parts) > 1 else "kafkalite"


def _server_folder(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if parts[:2] == ["kafkalite", "server"] and len(parts) > 2 else None


def _folder(module: str) -> str:
    """The directory a module's file is in (a package's own: its directory)."""
    return MODULES[module].parent.as_posix()


def test_every_part_of_kafkalite_has_a_layer():
    missing = sorted({_part(m) for m in MODULES} - set(LAYERS))
    assert not missing, (
        f"{', '.join(missing)}: in no layer; add each to LAYERS in tests/test_layers.py with "
        "what it may import (and say the same in its docstring and docs/architecture.md)")
    folders = sorted({_server_folder(m) for m in MODULES} - {None} - set(SERVER_FOLDERS))
    assert not folders, (
        f"server/{', server/'.join(folders)}: not in SERVER_FOLDERS (tests/test_layers.py); "
        "place each where its imports go only down")


def test_imports_follow_the_layers():
    wrong, used = [], set()
    for imp in _imports():
        src, dst = _part(imp.source), _part(imp.target)
        if src not in LAYERS:       # test_every_part_of_kafkalite_has_a_layer says so
            continue
        if src == dst or src in ENTRY_POINTS or dst in LAYERS[src]:
            continue
        if (imp.file, imp.target) in LAYER_EXCEPTIONS:
            used.add((imp.file, imp.target))
            continue
        wrong.append(f"{imp}: {src} may import {', '.join(sorted(LAYERS[src])) or 'nothing'} "
                     f"of kafkalite, not {dst}")
    assert not wrong, ("imports across the layers (a needed one goes in LAYER_EXCEPTIONS in "
                       "tests/test_layers.py, with its reason):\n" + "\n".join(wrong))
    stale = sorted(set(LAYER_EXCEPTIONS) - used)
    assert not stale, f"LAYER_EXCEPTIONS entries no import needs any more: remove {stale}"


def test_server_folders_import_only_the_folders_below():
    level = {folder: i for i, folder in enumerate(SERVER_FOLDERS)}
    wrong, used = [], set()
    for imp in _imports():
        src, dst = _server_folder(imp.source), _server_folder(imp.target)
        if src is None or dst is None or src == dst or level[dst] < level[src]:
            continue
        if (imp.file, imp.target) in SERVER_UPWARD:
            used.add((imp.file, imp.target))
            continue
        wrong.append(f"{imp}: server/{src} sits below server/{dst}")
    assert not wrong, (
        "imports up server/'s folders (SERVER_FOLDERS in tests/test_layers.py, bottom first), "
        "each a cycle between folders in the making: import downward (move the shared name "
        "down), or declare the edge in SERVER_UPWARD with its reason:\n" + "\n".join(wrong))
    stale = sorted(set(SERVER_UPWARD) - used)
    assert not stale, f"SERVER_UPWARD entries no import needs any more: remove {stale}"


def _cycles(edges: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan's,
    iterative: the graph is deep enough for Python's recursion limit)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


def test_server_folders_make_no_new_cycle():
    edges: dict[str, set[str]] = {folder: set() for folder in SERVER_FOLDERS}
    where: dict[tuple[str, str], Import] = {}
    for imp in _imports():
        src, dst = _server_folder(imp.source), _server_folder(imp.target)
        if src is not None and dst is not None and src != dst:
            edges[src].add(dst)
            where.setdefault((src, dst), imp)
    found = {frozenset(component) for component in _cycles(edges)}
    new = [f"{', '.join(sorted(c))}:\n    " + "\n    ".join(
               str(where[(a, b)]) for a in sorted(c) for b in sorted(edges[a]) if b in c)
           for c in found - set(SERVER_FOLDER_CYCLES)]
    assert not new, ("server/ folders importing each other beyond SERVER_FOLDER_CYCLES "
                     "(tests/test_layers.py): an import closed a new cycle, or pulled a folder "
                     "into one:\n" + "\n".join(new))
    gone = [sorted(c) for c in SERVER_FOLDER_CYCLES if c not in found]
    assert not gone, f"SERVER_FOLDER_CYCLES entries that are no cycle any more: update {gone}"


def test_no_module_imports_itself_back():
    edges: dict[str, set[str]] = {module: set() for module in MODULES}
    where: dict[tuple[str, str], Import] = {}
    for imp in _imports():
        edges[imp.source].add(imp.target)
        where.setdefault((imp.source, imp.target), imp)
    wrong, seen = [], set()
    for component in _cycles(edges):
        seen.add(frozenset(component))
        if frozenset(component) in MODULE_CYCLES:
            continue
        lines = [str(where[(a, b)]) for a in sorted(component) for b in sorted(edges[a])
                 if b in component]
        wrong.append(f"{', '.join(sorted(component))}:\n    " + "\n    ".join(lines))
    assert not wrong, ("modules importing each other (break the cycle; a needed one goes in "
                       "MODULE_CYCLES in tests/test_layers.py, with its reason):\n"
                       + "\n".join(wrong))
    stale = [sorted(c) for c in MODULE_CYCLES if c not in seen]
    assert not stale, f"MODULE_CYCLES entries that are no cycle any more: remove {stale}"


def _private(name: str | None) -> bool:
    return bool(name) and name.startswith("_") and not name.startswith("__")


def _private_uses() -> list[Import]:
    """``from x import _y``, and ``x._y`` where x names a module of ours."""
    return ([imp for imp in _imports() if _private(imp.name)]
            + [use for _, private in _read().values() for use in private])


def test_no_private_name_is_taken_from_another_folder():
    wrong, used = [], set()
    for imp in _private_uses():
        if _folder(imp.source) == _folder(imp.target):
            continue
        if (imp.file, imp.target, imp.name) in PRIVATE_EXCEPTIONS:
            used.add((imp.file, imp.target, imp.name))
            continue
        wrong.append(str(imp))
    assert not wrong, ("private names taken from another folder (make the name public in the "
                       "module that owns it; a needed one goes in PRIVATE_EXCEPTIONS in "
                       "tests/test_layers.py, with its reason):\n" + "\n".join(wrong))
    stale = sorted(set(PRIVATE_EXCEPTIONS) - used)
    assert not stale, f"PRIVATE_EXCEPTIONS entries no import needs any more: remove {stale}"
