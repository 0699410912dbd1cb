"""``kafkalite produce``: lines of stdin to records of a topic, like
kafka-console-producer (``--key-separator``, ``--property parse.key=true``,
headers, acks, compression, linger). Every record is accounted for: on an
error the ones written before it are counted in the error line.

Runs in the ``kafkalite`` process; kafkalite.client's Producer is imported
in ``run``.
"""
from __future__ import annotations

import argparse
import sys

from kafkalite import errors
from kafkalite.cli.arguments import client_args, client_properties, topic_arg
from kafkalite.cli.client_config import client_config, is_true, parse_kv, property_flags


HELP = "send stdin lines to a topic, one record per line"
DESCRIPTION = ("Send stdin lines to a topic, one record per line, like kafka-console-producer. "
               "On an error, the records written before it are counted in the error line.")


def add_arguments(prod: argparse.ArgumentParser) -> None:
    topic_arg(prod)
    prod.add_argument("--key-separator", help="split each line into key and value at this string")
    prod.add_argument("--property", action="append", metavar="NAME=VALUE",
                      help="kafka-console-producer's: parse.key=true (key and value split at "
                           "key.separator, default a tab), key.separator=SEP")
    prod.add_argument("-p", "--partition", type=int, default=-1,
                      help="the partition (default: by key, else spread)")
    prod.add_argument("--acks", default="1", choices=["0", "1", "-1", "all"])
    prod.add_argument("--compression", default="none",
                      choices=["none", "gzip", "snappy", "lz4", "zstd"])
    prod.add_argument("--linger-ms", type=int, default=5)
    prod.add_argument("--header", action="append", metavar="NAME=VALUE", help="repeatable")
    client_args(prod)
    client_properties(prod, "--producer-property")


# kafka-console-producer's --property names (LineMessageReader)
_PRODUCER_PROPERTIES = ("parse.key", "key.separator")


def run(args) -> int:
    """Lines of stdin -> records. Every record is accounted for: on an error
    (a refused record, a line without its key separator) the records
    written before it are flushed and counted in the one-line error."""
    from kafkalite.client import Producer
    props = property_flags(args, _PRODUCER_PROPERTIES)
    key_separator = args.key_separator
    if is_true(props.get("parse.key", "false")):
        key_separator = props.get("key.separator", "\t")
    failures: list = []         # (line number, error)
    written = [0]

    def delivered(line_no, err, msg):
        if err is None:
            written[0] += 1
        else:
            failures.append((line_no, err))

    headers = list(parse_kv(args.header, "--header").items()) or None
    producer = Producer(client_config(args, **{
        "acks": args.acks, "compression.type": args.compression, "linger.ms": args.linger_ms}))
    sent, read, stopped = 0, 0, None
    try:
        try:
            for line in sys.stdin.buffer:
                # counted as read before it can fail: a line the producer
                # refused (no server) is one of the records not written
                read += 1
                line = line.rstrip(b"\r\n")
                key = None
                if key_separator is not None:
                    sep = key_separator.encode()
                    if sep not in line:
                        raise ValueError(f"line {sent + 1} has no key separator "
                                         f"{key_separator!r}")
                    key, line = line.split(sep, 1)
                line_no = sent + 1
                while True:
                    try:
                        producer.produce(args.topic, line, key, partition=args.partition,
                                         headers=headers,
                                         on_delivery=lambda err, msg, n=line_no:
                                         delivered(n, err, msg))
                        break
                    except BufferError:
                        producer.poll(0.1)
                    except errors.MessageTooLargeError as exc:
                        # refused by produce() itself (over max.request.size):
                        # one failed record, as a refusal by the broker is
                        failures.append((line_no, exc))
                        break
                sent += 1
                producer.poll(0)
        except (ValueError, errors.KafkaError) as exc:
            stopped = exc
        left = producer.flush(args.timeout)
    finally:
        producer.close(0)
    if failures or left or stopped:
        done = f"wrote {written[0]} of {read} record(s) to topic {args.topic!r}"
        if failures:
            line_no, first = min(failures, key=lambda f: f[0])
            raise type(first)(f"{done}; {len(failures)} failed, the first (line {line_no}): "
                              f"{getattr(first, 'message', first)}")
        if stopped is not None:
            raise type(stopped)(f"{done}, then stopped: "
                                f"{getattr(stopped, 'message', stopped)}")
        raise TimeoutError(f"{done}; {left} not delivered within {args.timeout:g} s")
    print(f"Produced {sent} messages to {args.topic}.", file=sys.stderr)
    return 0
