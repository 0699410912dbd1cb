"""Group configs (KIP-848, KIP-932; ConfigResource type GROUP, 32): each
group's own values of the session and heartbeat settings its coordinator
otherwise takes from the server, as Kafka 4.1's ``GroupConfig`` defines
them -- name, type, default, bounds -- and the rules DescribeConfigs,
AlterConfigs and IncrementalAlterConfigs apply to them.

A group's configs are kept with the cluster metadata (controller/metadata.py
``group_configs``, cluster_store.py with --cluster) whether or not the group
exists, as Kafka keeps them. The group coordinator acts on the consumer
group and share group session timeouts and heartbeat intervals, per group
(``effective``); the others are stored and described, each key's
``effect`` says why.

Errors, as Kafka's: an unknown name or a bad value is INVALID_CONFIG.

Who runs it: the supervisor's controller (config_control.py) and group
coordinator (group/coordinator.py), and the docs generator. Pure data and
functions.
"""
from __future__ import annotations

from kafkalite import errors
from kafkalite.protocol.enums import ConfigSource
from kafkalite.server.config import ServerConfig
from kafkalite.server.config_registry import ConfigKey, Scope, _entry, _key

_G = Scope.GROUP
_NO_STREAMS = "stored and described; kafkalite has no streams groups (KIP-1071)"
_LEADER_SETTING = ("stored and described; share-partition leaders apply the server's "
                   "`group_share_record_lock_duration_ms`")
_SHARE_READS = ("stored and described; a share group reads from the share-partition start "
                "offset its coordinator initialized, uncommitted records included")

# Kafka 4.1's group configs; the bounds are Kafka's broker defaults of
# group.{consumer,share,streams}.{min,max}.{session.timeout,heartbeat.interval}.ms
# and group.share.{min,max}.record.lock.duration.ms.
GROUP_CONFIGS: dict[str, ConfigKey] = {k.name: k for k in [
    _key("consumer.session.timeout.ms", "int", 45000,
         "Consumer group (KIP-848): a member silent this long is removed.", _G,
         lo=45000, hi=60000),
    _key("consumer.heartbeat.interval.ms", "int", 5000,
         "Consumer group (KIP-848): how often members heartbeat.", _G, lo=5000, hi=15000),
    _key("share.session.timeout.ms", "int", 45000,
         "Share group: a member silent this long is removed.", _G, lo=45000, hi=60000),
    _key("share.heartbeat.interval.ms", "int", 5000,
         "Share group: how often members heartbeat.", _G, lo=5000, hi=15000),
    _key("share.record.lock.duration.ms", "int", 30000,
         "Share group: how long a member holds the records it acquired.", _G, lo=15000,
         hi=60000, effect=_LEADER_SETTING),
    _key("share.auto.offset.reset", "string", "latest",
         "Share group: where a share-partition without state starts.", _G,
         valid="[latest, earliest, by_duration:PnDTnHnMn.nS]", effect=_SHARE_READS),
    _key("share.isolation.level", "string", "read_uncommitted",
         "Share group: which transactional records members read.", _G,
         choices=("read_committed", "read_uncommitted"), effect=_SHARE_READS),
    _key("streams.session.timeout.ms", "int", 45000,
         "Streams group (KIP-1071): a member silent this long is removed.", _G, lo=45000,
         hi=60000, effect=_NO_STREAMS),
    _key("streams.heartbeat.interval.ms", "int", 5000,
         "Streams group (KIP-1071): how often members heartbeat.", _G, lo=5000, hi=15000,
         effect=_NO_STREAMS),
    _key("streams.num.standby.replicas", "int", 0,
         "Streams group (KIP-1071): standby replicas of each task.", _G, lo=0, hi=2,
         effect=_NO_STREAMS),
]}
# session timeout -> the heartbeat interval that must stay below it
_HEARTBEAT_OF = {"consumer.session.timeout.ms": "consumer.heartbeat.interval.ms",
                 "share.session.timeout.ms": "share.heartbeat.interval.ms",
                 "streams.session.timeout.ms": "streams.heartbeat.interval.ms"}
# the server setting a group without its own value takes
_SERVER_SETTING = {"consumer.session.timeout.ms": "group_consumer_session_timeout_ms",
                   "consumer.heartbeat.interval.ms": "group_consumer_heartbeat_interval_ms",
                   "share.session.timeout.ms": "group_share_session_timeout_ms",
                   "share.heartbeat.interval.ms": "group_share_heartbeat_interval_ms",
                   "share.record.lock.duration.ms": "group_share_record_lock_duration_ms"}


def check_group_configs(group: str, configs: dict) -> dict[str, str]:
    """A group's configs as they would become, checked as Kafka's
    GroupConfig checks them; returns them to store."""
    if not group:
        raise errors.InvalidRequestError("Group name can't be empty.")
    for name, value in configs.items():
        key = GROUP_CONFIGS.get(name)
        if key is None:
            raise errors.InvalidConfigurationError(f"Unknown group config name: {name}")
        if value is None:
            raise errors.InvalidConfigurationError(f"Null value not supported for: {name}")
        if key.check is not None:
            try:
                key.check(str(value))
            except errors.KafkaError as exc:
                raise errors.InvalidConfigurationError(
                    f"Invalid value {value} for configuration {name}: {exc.message}") from None
    for session, heartbeat in _HEARTBEAT_OF.items():
        if session in configs or heartbeat in configs:
            s = int(configs.get(session, GROUP_CONFIGS[session].default))
            h = int(configs.get(heartbeat, GROUP_CONFIGS[heartbeat].default))
            if h >= s:
                raise errors.InvalidConfigurationError(
                    f"{heartbeat} must be less than {session}")
    return {name: str(value) for name, value in configs.items()}


def server_default(config: ServerConfig, name: str) -> str:
    """What a group without its own value of ``name`` has."""
    setting = _SERVER_SETTING.get(name)
    return str(getattr(config, setting)) if setting else GROUP_CONFIGS[name].default


def effective(config: ServerConfig, own: dict, name: str) -> int:
    """A group's value of an int config: its own, else the server's."""
    return int(own.get(name) or server_default(config, name))


def describe_group(config: ServerConfig, own: dict, keys=None, include_synonyms: bool = False,
                   include_documentation: bool = False) -> list:
    """A group's entries: every group config, its own value (GROUP_CONFIG)
    or the server's (DEFAULT_CONFIG)."""
    out = []
    for name, key in GROUP_CONFIGS.items():
        if keys and name not in keys:
            continue
        if name in own:
            value, source = own[name], ConfigSource.GROUP_CONFIG
        else:
            value, source = server_default(config, name), ConfigSource.DEFAULT_CONFIG
        out.append(_entry(key, value, source, [(name, value, source)], False, include_synonyms,
                          include_documentation))
    return out
