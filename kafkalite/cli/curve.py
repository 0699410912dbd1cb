from __future__ import annotations

import sys


def _curve(args) -> int:
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
