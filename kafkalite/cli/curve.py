"""``kafkalite curve keygen``: a CURVE key pair (NAME.key, NAME.key_secret) for
the native protocol's encryption and authentication, server or client.

Runs in the ``kafkalite`` process; kafkalite.protocol.curve (zmq) is
imported when it runs.
"""
from __future__ import annotations

import argparse
import sys


HELP = "make CURVE key pairs (native protocol encryption and authentication)"
DESCRIPTION = ("Make a CURVE key pair with zmq.curve_keypair: NAME.key (the public key, to hand "
               "out; the server's goes to its clients as curve.server.key, a client's into the "
               "server's --native-curve-authorized-keys directory) and NAME.key_secret (the "
               "pair, mode 0600: the server's --native-curve-secret-key-file, or a client's "
               "curve.secret.key).")


def add_arguments(curve: argparse.ArgumentParser) -> None:
    csub = curve.add_subparsers(dest="action", required=True)
    k = csub.add_parser("keygen", help="write NAME.key and NAME.key_secret")
    k.add_argument("name", help="the key's name (file names; default principal User:NAME)")
    k.add_argument("--dir", default=".", help="where to write them (default .)")
    k.add_argument("--principal", help="the principal the server maps the key to "
                                       "(default User:NAME)")


def run(args) -> int:
    """kafkalite curve keygen: a CURVE key pair, NAME.key and NAME.key_secret."""
    from kafkalite.protocol import curve
    principal = args.principal or f"User:{args.name}"
    try:
        public, secret = curve.write_keypair(args.dir, args.name, principal)
    except FileExistsError as exc:
        print(f"kafkalite curve: {exc.filename} exists; not overwritten", file=sys.stderr)
        return 1
    key = curve.load_key(public).decode()
    print(f"public key {key} ({principal})\n  {public}\n  {secret}  (secret: mode 0600)")
    return 0
