"""Test harness: network namespaces for network-fault tests.

``Network()`` makes a bridge in the root namespace on a private /24
(``10.<a>.<b>.1``) and ``add(name)`` a namespace joined to it by a veth
pair: the namespace's end is ``eth0`` at ``10.<a>.<b>.<n>``, its root end
a port of the bridge. Namespaces reach each other and the root namespace
(the test process, a PostgreSQL listening on ``network.gateway``) through
the bridge. ``cut(ns)`` takes the root end of its veth down: the
namespace keeps its own address and loopback (processes inside still talk
to each other) but nothing crosses the link, either way, and open TCP
connections stall as they would behind a dead switch port (no RST, no
FIN). ``heal(ns)`` brings it back up. ``argv(ns, cmd)`` is ``cmd`` run
inside the namespace (``ip netns exec``: the same pid, so signals to it
reach the command itself).

Names carry a tag unique to the run (pid and random bits), and the subnet
is one no interface of this host uses, so two runs cannot collide.
``close()`` removes everything it made, killing what still runs inside
its namespaces, and is safe to call twice and after a half-made set-up;
tests call it from a fixture's finalizer, so a failing test cleans up too.

``unusable()`` says why namespaces cannot be made here (not root, no
``ip``, a kernel or container that refuses them), or None: tests skip
with that reason, so CI without privileges still passes.

Who may call: tests, from one thread.
"""
from __future__ import annotations

import ipaddress
import os
import secrets
import shutil
import signal
import subprocess


def _ip(*args, check=True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True, timeout=30)


def unusable() -> str | None:
    """Why network namespaces cannot be used here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2)"
    probe = f"kl-probe-{os.getpid()}-{secrets.token_hex(2)}"
    r = _ip("netns", "add", probe, check=False)
    if r.returncode != 0:
        return f"cannot create a network namespace: {r.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    r = _ip("link", "add", f"klp{secrets.token_hex(3)}", "type", "bridge", check=False)
    if r.returncode != 0:
        return f"cannot create a bridge: {r.stderr.strip()}"
    _ip("link", "del", r.args[3], check=False)
    return None


def _used_networks() -> list:
    out = _ip("-o", "-4", "addr", "show").stdout
    return [ipaddress.ip_interface(line.split()[3]).network for line in out.splitlines()]


class Namespace:
    def __init__(self, name: str, ns: str, address: str, root_end: str):
        self.name = name            # the test's name for it ("node1")
        self.ns = ns                # the kernel's name, unique to the run
        self.address = address      # its eth0's address
        self.root_end = root_end    # the veth end on the bridge: cut here


class Network:
    def __init__(self):
        self.tag = f"{os.getpid() % 4096:03x}{secrets.token_hex(2)}"
        self.bridge = f"klb{self.tag}"
        used = _used_networks()
        while True:
            net = ipaddress.ip_network(f"10.{secrets.randbelow(200) + 50}."
                                       f"{secrets.randbelow(256)}.0/24")
            if not any(net.overlaps(u) for u in used):
                break
        self.subnet = net
        self.gateway = str(net.network_address + 1)
        self.namespaces: dict[str, Namespace] = {}
        self._links: list[str] = []
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            self._links.append(self.bridge)
            _ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
        except BaseException:
            self.close()
            raise

    def add(self, name: str) -> Namespace:
        """A namespace joined to the bridge, with loopback and eth0 up."""
        n = len(self.namespaces) + 1
        ns = f"kl-{self.tag}-{name}"
        root_end, inner = f"klv{self.tag}{n}", f"kli{self.tag}{n}"
        address = str(self.subnet.network_address + 1 + n)
        _ip("netns", "add", ns)
        self.namespaces[name] = Namespace(name, ns, address, root_end)
        _ip("link", "add", root_end, "type", "veth", "peer", "name", inner)
        self._links.append(root_end)
        _ip("link", "set", inner, "netns", ns)
        _ip("link", "set", root_end, "master", self.bridge)
        _ip("link", "set", root_end, "up")
        _ip("-n", ns, "link", "set", inner, "name", "eth0")
        _ip("-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
        _ip("-n", ns, "link", "set", "eth0", "up")
        _ip("-n", ns, "link", "set", "lo", "up")
        return self.namespaces[name]

    def argv(self, name: str, cmd: list) -> list:
        """``cmd`` run inside namespace ``name``."""
        return ["ip", "netns", "exec", self.namespaces[name].ns, *cmd]

    def run(self, name: str, cmd: list, **kw) -> subprocess.CompletedProcess:
        return subprocess.run(self.argv(name, cmd), **kw)

    def cut(self, name: str) -> None:
        """Nothing crosses namespace ``name``'s link until ``heal``."""
        _ip("link", "set", self.namespaces[name].root_end, "down")

    def heal(self, name: str) -> None:
        _ip("link", "set", self.namespaces[name].root_end, "up")

    def close(self) -> None:
        for n in list(self.namespaces.values()):
            # whatever still runs inside was started by this test: it would
            # keep the namespace alive after `ip netns del`
            pids = _ip("netns", "pids", n.ns, check=False).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            _ip("netns", "del", n.ns, check=False)
            del self.namespaces[n.name]
        for link in reversed(self._links):
            # deleting a namespace deletes its veth end, and with it the
            # pair's root end: a link already gone is fine
            _ip("link", "del", link, check=False)
        self._links.clear()
