"""What an ACL decision costs as the ACLs grow: ``Authorizer.authorize`` (ACLs
looked up by resource name and type) against a scan of every ACL with
``AclBinding.matches_resource`` (the baseline), in one run.

    python benchmarks/bench_authorizer.py            # a few seconds
    python benchmarks/bench_authorizer.py --acls 100000

The ACLs: ``--acls`` literal topic ACLs for 100 principals, plus
``--prefixed`` prefixed ones; each decision asks one topic's Read, as a
Fetch of one topic does (a Produce or Fetch of n topics asks n). Timing
never fails anything: this prints figures.
"""
from __future__ import annotations

import time

import common

from kafkalite.protocol.enums import AclOperation as Op
from kafkalite.protocol.enums import AclPermissionType as Perm
from kafkalite.protocol.enums import PatternType as Pat
from kafkalite.protocol.enums import ResourceType as Res
from kafkalite.server.auth.authorizer import AclBinding, Authorizer


def rate(fn, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return n / (time.perf_counter() - start)


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--acls", type=int, default=10_000)
    parser.add_argument("--prefixed", type=int, default=20)
    parser.add_argument("--decisions", type=int, default=20_000)
    args = common.parse(parser)
    acls = [AclBinding(Res.TOPIC, f"topic-{i}", Pat.LITERAL, f"User:u{i % 100}", "*", Op.READ,
                       Perm.ALLOW) for i in range(args.acls)]
    acls += [AclBinding(Res.TOPIC, f"team-{i}.", Pat.PREFIXED, "User:alice", "*", Op.WRITE,
                        Perm.ALLOW) for i in range(args.prefixed)]
    authorizer = Authorizer(acls=acls)
    indexed = rate(lambda: authorizer.authorize("User:u5", "127.0.0.1", Op.READ, Res.TOPIC,
                                                "topic-5"), args.decisions)
    scans = max(10, args.decisions // max(1, args.acls // 100))
    scanned = rate(lambda: [a for a in acls if a.matches_resource(Res.TOPIC, "topic-5")], scans)
    common.say(f"{len(acls):,} ACLs, one topic's Read a decision")
    common.say_table([
        common.Row("authorize", indexed, "decisions/s", scanned, "scanning every ACL"),
        common.Row("time a decision", 1e6 / indexed, "us", 1e6 / scanned, "scanning every ACL",
                   fmt=".1f")])


if __name__ == "__main__":
    main()
