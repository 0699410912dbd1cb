"""How the client commands print: ``--output json`` (one JSON document per
line) and aligned text tables. Standard library only."""
from __future__ import annotations

import json
import sys


def print_json(rows) -> None:
    """``--output json``: one JSON document per line (a record, a topic, a
    group...), as rpk and jq pipelines take them."""
    for row in rows:
        sys.stdout.write(json.dumps(row, separators=(",", ":")) + "\n")


def print_table(rows: list[list], header: list[str]) -> None:
    cells = [header] + [["-" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    for r in cells:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
