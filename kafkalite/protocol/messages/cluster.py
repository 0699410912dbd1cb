"""Cluster administration that Kafka 4.1's brokers serve and kafkalite
answers from its own model: delegation tokens (KIP-48), feature levels
(UpdateFeatures, KIP-584), broker registrations (UnregisterBroker, KIP-500),
the KRaft quorum's voters (AddRaftVoter, RemoveRaftVoter, KIP-853), and the
resources that have configs (ListConfigResources, KIP-714 and KIP-1142).

Who answers each, and how, is server/controller/cluster_admin.py's.
"""
from __future__ import annotations

from kafkalite.protocol.api_keys import ApiKey
from kafkalite.protocol.schema import Array, Field, Request, Response

_PRINCIPAL = [Field("principal_type", "string"), Field("principal_name", "string")]

# CreateDelegationToken, API key 38. v1: same as v0. v2: flexible. v3: the
# owner may be named (a token made for another principal, KIP-373).
CreateDelegationTokenRequest = Request(ApiKey.CREATE_DELEGATION_TOKEN, "0-3", flexible="2+",
                                       fields=[
    Field("owner_principal_type", "string", "3+", nullable="3+"),
    Field("owner_principal_name", "string", "3+", nullable="3+"),
    Array("renewers", fields=_PRINCIPAL),
    Field("max_lifetime_ms", "int64"),
])
CreateDelegationTokenResponse = Response(ApiKey.CREATE_DELEGATION_TOKEN, "0-3", flexible="2+",
                                         fields=[
    Field("error_code", "int16"),
    *_PRINCIPAL,
    Field("token_requester_principal_type", "string", "3+"),
    Field("token_requester_principal_name", "string", "3+"),
    Field("issue_timestamp_ms", "int64"),
    Field("expiry_timestamp_ms", "int64"),
    Field("max_timestamp_ms", "int64"),
    Field("token_id", "string"),
    Field("hmac", "bytes"),
    Field("throttle_time_ms", "int32"),
])

# RenewDelegationToken, 39, and ExpireDelegationToken, 40. v2: flexible.
RenewDelegationTokenRequest = Request(ApiKey.RENEW_DELEGATION_TOKEN, "0-2", flexible="2+", fields=[
    Field("hmac", "bytes"),
    Field("renew_period_ms", "int64"),
])
RenewDelegationTokenResponse = Response(ApiKey.RENEW_DELEGATION_TOKEN, "0-2", flexible="2+",
                                        fields=[
    Field("error_code", "int16"),
    Field("expiry_timestamp_ms", "int64"),
    Field("throttle_time_ms", "int32"),
])
ExpireDelegationTokenRequest = Request(ApiKey.EXPIRE_DELEGATION_TOKEN, "0-2", flexible="2+",
                                       fields=[
    Field("hmac", "bytes"),
    Field("expiry_time_period_ms", "int64"),
])
ExpireDelegationTokenResponse = Response(ApiKey.EXPIRE_DELEGATION_TOKEN, "0-2", flexible="2+",
                                         fields=[
    Field("error_code", "int16"),
    Field("expiry_timestamp_ms", "int64"),
    Field("throttle_time_ms", "int32"),
])

# DescribeDelegationToken, 41. v2: flexible. v3: the requester of each token.
DescribeDelegationTokenRequest = Request(ApiKey.DESCRIBE_DELEGATION_TOKEN, "0-3", flexible="2+",
                                         fields=[
    Array("owners", nullable="0+", fields=_PRINCIPAL),
])
DescribeDelegationTokenResponse = Response(ApiKey.DESCRIBE_DELEGATION_TOKEN, "0-3",
                                           flexible="2+", fields=[
    Field("error_code", "int16"),
    Array("tokens", fields=[
        *_PRINCIPAL,
        Field("token_requester_principal_type", "string", "3+"),
        Field("token_requester_principal_name", "string", "3+"),
        Field("issue_timestamp", "int64"),
        Field("expiry_timestamp", "int64"),
        Field("max_timestamp", "int64"),
        Field("token_id", "string"),
        Field("hmac", "bytes"),
        Array("renewers", fields=_PRINCIPAL),
    ]),
    Field("throttle_time_ms", "int32"),
])

# UpdateFeatures, API key 57 (KIP-584). v1: validate_only, and upgrade_type
# (1 upgrade, 2 safe downgrade, 3 unsafe downgrade) replaces allow_downgrade.
# v2: no per-feature results, the top-level error says all.
UpdateFeaturesRequest = Request(ApiKey.UPDATE_FEATURES, "0-2", flexible="0+", fields=[
    Field("timeout_ms", "int32", default=60000),
    Array("feature_updates", fields=[
        Field("feature", "string"),
        Field("max_version_level", "int16"),
        Field("allow_downgrade", "bool", "0"),
        Field("upgrade_type", "int8", "1+", default=1),
    ]),
    Field("validate_only", "bool", "1+"),
])
UpdateFeaturesResponse = Response(ApiKey.UPDATE_FEATURES, "0-2", flexible="0+", fields=[
    Field("throttle_time_ms", "int32"),
    Field("error_code", "int16"),
    Field("error_message", "string", nullable="0+"),
    Array("results", "0-1", fields=[
        Field("feature", "string"),
        Field("error_code", "int16"),
        Field("error_message", "string", nullable="0+"),
    ]),
])

# UnregisterBroker, API key 64 (KIP-500): drop a broker's registration.
UnregisterBrokerRequest = Request(ApiKey.UNREGISTER_BROKER, "0", flexible="0+", fields=[
    Field("broker_id", "int32"),
])
UnregisterBrokerResponse = Response(ApiKey.UNREGISTER_BROKER, "0", flexible="0+", fields=[
    Field("throttle_time_ms", "int32"),
    Field("error_code", "int16"),
    Field("error_message", "string", nullable="0+"),
])

# ListConfigResources, API key 74: v0 was ListClientMetricsResources (KIP-714,
# the client metrics subscriptions); v1 lists the resources of the types
# asked for, every type with configs when none is (KIP-1142).
ListConfigResourcesRequest = Request(ApiKey.LIST_CONFIG_RESOURCES, "0-1", flexible="0+", fields=[
    Field("resource_types", "[]int8", "1+"),
])
ListConfigResourcesResponse = Response(ApiKey.LIST_CONFIG_RESOURCES, "0-1", flexible="0+",
                                       fields=[
    Field("throttle_time_ms", "int32"),
    Field("error_code", "int16"),
    Array("config_resources", fields=[
        Field("resource_name", "string"),
        Field("resource_type", "int8", "1+", default=16),
    ]),
])

# AddRaftVoter, 80, and RemoveRaftVoter, 81 (KIP-853): change the KRaft
# controller quorum's voters.
AddRaftVoterRequest = Request(ApiKey.ADD_RAFT_VOTER, "0", flexible="0+", fields=[
    Field("cluster_id", "string", nullable="0+"),
    Field("timeout_ms", "int32"),
    Field("voter_id", "int32"),
    Field("voter_directory_id", "uuid"),
    Array("listeners", fields=[
        Field("name", "string"),
        Field("host", "string"),
        Field("port", "uint16"),
    ]),
])
AddRaftVoterResponse = Response(ApiKey.ADD_RAFT_VOTER, "0", flexible="0+", fields=[
    Field("throttle_time_ms", "int32"),
    Field("error_code", "int16"),
    Field("error_message", "string", nullable="0+"),
])
RemoveRaftVoterRequest = Request(ApiKey.REMOVE_RAFT_VOTER, "0", flexible="0+", fields=[
    Field("cluster_id", "string", nullable="0+"),
    Field("voter_id", "int32"),
    Field("voter_directory_id", "uuid"),
])
RemoveRaftVoterResponse = Response(ApiKey.REMOVE_RAFT_VOTER, "0", flexible="0+", fields=[
    Field("throttle_time_ms", "int32"),
    Field("error_code", "int16"),
    Field("error_message", "string", nullable="0+"),
])
