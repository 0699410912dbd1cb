"""Connector offsets administration (KIP-875) for the standalone herder,
and what both herders answer with: a STOPPED connector's offsets read
(the worker's offset store for a source connector, the consumer group
``connect-<name>`` for a sink), altered or reset, the connector's own
``alter_offsets`` hook asked first; Kafka's messages and 400s.

``ConnectorOffsets`` is a part of herder.py's ``Herder`` (which inherits
it and holds its state and lock); distributed/offset_admin.py is the
Connect cluster's side, and takes the helpers below from here.
"""
from __future__ import annotations

import json

from kafkalite.connect import plugins
from kafkalite.connect.creator import admin_config
from kafkalite.connect.errors import BadRequestException, ConnectException
from kafkalite.errors import GroupIdNotFoundError, NonEmptyGroupError, UnknownMemberIdError

# KIP-875's answers to an offsets change, as Kafka's: the connector's
# alter_offsets hook said it has handled what it keeps itself, or did not
ALTERED = "The offsets for this connector have been altered successfully"
RESET = "The offsets for this connector have been reset successfully"
_FRAMEWORK_ONLY = ("The Connect framework-managed offsets for this connector have been {0} "
                   "successfully. However, if this connector manages offsets externally, "
                   "they will need to be manually {0} in the system that the connector uses.")


def offsets_answer(reset: bool, handled: bool) -> str:
    """The message of a successful PATCH (``reset`` False) or DELETE /offsets."""
    if handled:
        return RESET if reset else ALTERED
    return _FRAMEWORK_ONLY.format("reset" if reset else "altered")


def ask_connector(name: str, config: dict, offsets) -> bool:
    """KIP-875: the connector's own ``alter_offsets`` hook, asked before the
    framework writes anything, on a new instance of its class (the
    connector is stopped; Kafka makes one too). ``offsets``: a source
    connector's [(partition, offset or None)], a sink connector's
    {TopicPartition: offset or None}; None is a reset. Its answer picks the
    message (offsets_answer); an exception from it refuses the change (500,
    as Kafka's ConnectException), and nothing is written."""
    try:
        return bool(plugins.connector_class(config["connector.class"])().alter_offsets(
            dict(config), offsets))
    except Exception as e:  # noqa: BLE001 -- a plugin's refusal, whatever its type
        raise ConnectException(f"Failed to modify offsets for connector {name}: the connector "
                               f"refused: {e}") from e


def sink_offsets_of(offsets: list[dict]) -> dict:
    """{TopicPartition: offset} of a PATCH body's sink connector offsets
    (400 for any other shape, or a null offset: one partition alone cannot
    be reset)."""
    from kafkalite.client import TopicPartition
    out = {}
    for o in offsets:
        p = o["partition"]
        try:
            topic, part = p["kafka_topic"], int(p["kafka_partition"])
            off = o.get("offset")
            if off is None:
                raise BadRequestException("resetting one sink partition (a null offset) is "
                                          "not supported; DELETE /offsets resets them all")
            out[TopicPartition(topic, part)] = int(off["kafka_offset"])
        except (KeyError, TypeError, ValueError):
            raise BadRequestException(
                "sink connector offsets are {\"partition\": {\"kafka_topic\", "
                "\"kafka_partition\"}, \"offset\": {\"kafka_offset\"}}: " + json.dumps(o)
            ) from None
    return out


def not_stopped(name: str) -> BadRequestException:
    """Kafka's 400 for an offsets change of a connector that is not STOPPED
    (or, in distributed mode, still has task configs)."""
    return BadRequestException(
        "Connectors must be in the STOPPED state before their offsets can be modified. "
        "This can be done for the specified connector by issuing a 'PUT' request to "
        f"the '/connectors/{name}/stop' endpoint")


def tasks_not_stopped(what: str, name: str) -> BadRequestException:
    """Kafka's 400 when a sink connector's consumer group still has members
    (its tasks are stopping, or it was resumed meanwhile): safe to retry."""
    return BadRequestException(
        f"Failed to {what} consumer group offsets for connector {name} either because its "
        "tasks haven't stopped completely yet or the connector was resumed before the request "
        f"to {what} its offsets could be successfully completed. If the connector is in a "
        "stopped state, this operation can be safely retried")


def check_offsets(offsets) -> None:
    """The shape of a PATCH /offsets body's ``offsets`` (400 otherwise)."""
    if not isinstance(offsets, list) or not offsets:
        raise BadRequestException("The offsets to be altered must be a non-empty list "
                                  "of {\"partition\": ..., \"offset\": ...}")
    for o in offsets:
        if not isinstance(o, dict) or not isinstance(o.get("partition"), dict):
            raise BadRequestException(f"Each offset needs a \"partition\" object: {o!r}")


class ConnectorOffsets:
    """The offsets endpoints, the standalone Herder's side (this module's docstring)."""

    def _sink_group(self, name):
        return f"connect-{name}"

    def _connector_config_or_none(self, name) -> dict | None:
        c = self._connectors.get(name)
        return None if c is None else c.config

    def _admin_config(self, name) -> dict:
        """The admin client of a connector's offsets endpoints: the worker's
        settings with the connector's ``admin.override.*``, so it acts as the
        connector's creator (creator.py), as Kafka's does."""
        return admin_config(self.worker.client_config,
                            self._connector_config_or_none(name) or {})

    def offsets(self, name) -> dict:
        with self._lock:
            c = self._get(name)
            if c.kind == "source":
                return self._source_offsets(name)
        return self._sink_offsets(name)

    def _source_offsets(self, name) -> dict:
        return {"offsets": [{"partition": p, "offset": o}
                            for p, o in self.worker.offsets.offsets_of(name)]}

    def _sink_offsets(self, name) -> dict:
        from kafkalite.connect.clients import AdminClient
        admin = AdminClient(self._admin_config(name))
        try:
            tps = admin.list_consumer_group_offsets(self._sink_group(name)).result()
        except Exception:   # noqa: BLE001 -- no group yet: no offsets
            tps = []
        finally:
            admin.close()
        return {"offsets": [{"partition": {"kafka_topic": tp.topic,
                                           "kafka_partition": tp.partition},
                             "offset": {"kafka_offset": tp.offset}}
                            for tp in tps if tp.offset >= 0]}

    def _require_stopped(self, c):
        if c.target != "STOPPED":
            raise not_stopped(c.name)

    def alter_offsets(self, name, offsets: list[dict]) -> str:
        with self._lock:
            c = self._get(name)
            self._require_stopped(c)
            check_offsets(offsets)
            if c.kind == "source":
                pairs = [(o["partition"], o.get("offset")) for o in offsets]
                handled = ask_connector(name, c.config, pairs)
                self.worker.offsets.put(name, pairs)
            else:
                wanted = sink_offsets_of(offsets)
                handled = ask_connector(name, c.config, wanted)
                self._alter_sink(name, wanted)
            return offsets_answer(False, handled)

    def _alter_sink(self, name, wanted: dict):
        """``wanted``: {TopicPartition: offset} (sink_offsets_of)."""
        from kafkalite.client import TopicPartition
        from kafkalite.connect.clients import AdminClient
        tps = [TopicPartition(tp.topic, tp.partition, off) for tp, off in wanted.items()]
        admin = AdminClient(self._admin_config(name))
        try:
            admin.alter_consumer_group_offsets(self._sink_group(name), tps).result()
        except (NonEmptyGroupError, UnknownMemberIdError):
            raise tasks_not_stopped("alter", name) from None
        finally:
            admin.close()

    def _reset_sink(self, name):
        """Kafka's reset of a sink connector's offsets: its consumer group deleted."""
        from kafkalite.connect.clients import AdminClient
        admin = AdminClient(self._admin_config(name))
        try:
            admin.delete_consumer_groups([self._sink_group(name)])[
                self._sink_group(name)].result()
        except GroupIdNotFoundError:
            pass
        except (NonEmptyGroupError, UnknownMemberIdError):
            raise tasks_not_stopped("reset", name) from None
        finally:
            admin.close()

    def reset_offsets(self, name) -> str:
        with self._lock:
            c = self._get(name)
            self._require_stopped(c)
            if c.kind == "source":
                pairs = [(p, None) for p, _ in self.worker.offsets.offsets_of(name)]
                handled = ask_connector(name, c.config, pairs)
                self.worker.offsets.put(name, pairs)
            else:
                handled = ask_connector(name, c.config, self._sink_reset_map(name))
                self._reset_sink(name)
            return offsets_answer(True, handled)

    def _sink_reset_map(self, name) -> dict:
        """{TopicPartition: None} for each partition the sink's group has an
        offset for: what a reset hands the connector's hook."""
        from kafkalite.client import TopicPartition
        return {TopicPartition(o["partition"]["kafka_topic"], o["partition"]["kafka_partition"]):
                None for o in self._sink_offsets(name)["offsets"]}
