"""SCRAM credentials through Kafka's APIs: DescribeUserScramCredentials and
AlterUserScramCredentials (KIP-554), as Kafka's ScramControlManager serves
them.

The credentials live in the SASL users file (credentials.py), the one store
``kafkalite users`` edits too (``FileUsers``). The supervisor serves both
APIs (workers relay them, relay.py); an alteration is written
(``update_users``, under the file's lock) before it is answered, and every
broker process's ``CredentialStore`` re-reads the file at its next login,
so an altered user logs in at once on every Kafka listener of the node, and
a deleted one is refused there (and at its connections' next
re-authentication, KIP-368).

In a cluster (``--cluster``) the users live in PostgreSQL (``ClusterUsers``,
cluster_store.py), as Kafka keeps them in its metadata log
(UserScramCredentialsRecord). Only the controller node's supervisor serves
the two APIs: every worker of every node relays them to it (broker nodes'
workers over the network, to the relay the controller published). An
alteration is a read-modify-write of the row under its row lock, answered
once committed and written to the controller node's own users file; the
other nodes' files, mirrors of the row (cluster_store.UsersMirror), follow
a moment later on its notification. Describe reads the row.

Semantics and error codes are Kafka's:

- Describe: null or empty ``users`` describes every user with a SCRAM
  credential; a named user without one is RESOURCE_NOT_FOUND, a user named
  twice DUPLICATE_RESOURCE. The response never carries salts or keys, only
  each mechanism and its iteration count.
- Alter: a user named more than once across deletions and upsertions is
  DUPLICATE_RESOURCE and nothing of it changes; an unknown mechanism is
  UNSUPPORTED_SASL_MECHANISM; an empty user name, or iterations outside
  4096..16384, or a salt or salted password that is empty or over 1 KiB
  (our bound), UNACCEPTABLE_CREDENTIAL; deleting a credential that does not
  exist RESOURCE_NOT_FOUND. Users are independent: one user's error does
  not keep another's change from being applied. The client sends the salt
  and the salted password (never the password); the file keeps StoredKey
  and ServerKey, from which neither can be recovered.
- Authorization (request_authorization.py): Describe needs DESCRIBE on the
  cluster (else the whole response is CLUSTER_AUTHORIZATION_FAILED), Alter
  needs ALTER on the cluster (else every user's result is).

PLAIN entries of the same users are not Kafka's and are left alone; a user
left with no credential at all is removed from the file.

Who may call: the supervisor (supervisor.py), on its single thread.
"""
from __future__ import annotations

import logging

from kafkalite import errors
from kafkalite.protocol import ApiKey
from kafkalite.server.auth.credentials import (SCRAM_MAX_ITERATIONS,
                                          SCRAM_MECHANISM_TYPES, SCRAM_MECHANISMS,
                                          SCRAM_MIN_ITERATIONS, SCRAM_TYPE_OF, read_users,
                                          reserved, scram_credential, update_users)
from kafkalite.server.network.requests import RequestContext

log = logging.getLogger("kafkalite.scram")

_TWICE = "A user credential cannot be altered twice in the same request"
# Ours, not Kafka's: every broker process re-reads the users file at each
# login, so a salt of megabytes must not get into it (real ones are 16-64
# bytes, salted passwords 32 or 64).
MAX_SECRET_BYTES = 1024


class _Refused(Exception):
    """One user's alteration refused: (error class, message)."""


class FileUsers:
    """The SASL users file itself (credentials.users_file): a single node."""

    def __init__(self, path: str):
        self.path = path
        self.where = path

    def read(self) -> dict:
        return read_users(self.path)

    def update(self, change) -> object:
        return update_users(self.path, change)


class ClusterUsers:
    """The cluster's SASL users in PostgreSQL, through the controller's
    PostgresMetadataStore (its connection); each change is also put in
    this node's users file at once by ``mirror`` (cluster_store.UsersMirror)."""

    def __init__(self, metadata, mirror):
        self.metadata, self.mirror = metadata, mirror
        self.where = "the cluster's PostgreSQL"

    def read(self) -> dict:
        return self.metadata.read_users()

    def update(self, change) -> object:
        result, users, version = self.metadata.update_users(change)
        try:
            self.mirror.write(users, version)
        except (OSError, errors.KafkaError) as exc:
            # stored: the mirror's thread writes it on the notification
            log.warning("cannot write %s now: %s", self.mirror.path, exc)
        return result


class ScramControl:
    """``users`` a FileUsers or ClusterUsers."""

    def __init__(self, users):
        self.users = users

    def handlers(self) -> dict:
        return {ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: self._describe,
                ApiKey.ALTER_USER_SCRAM_CREDENTIALS: self._alter}

    # ---- DescribeUserScramCredentials -------------------------------------------------------

    def _describe(self, ctx: RequestContext, body: dict) -> dict:
        users = self.users.read()
        named = [u["name"] for u in body.get("users") or ()]
        if named:
            counts: dict[str, int] = {}
            for name in named:
                counts[name] = counts.get(name, 0) + 1
        else:
            counts = {name: 1 for name in sorted(users)
                      if any(m in users[name] for m in SCRAM_MECHANISMS)}
        results = []
        for name, count in counts.items():
            result = {"user": name, "error_code": 0, "error_message": None,
                      "credential_infos": []}
            if count > 1:
                result.update(error_code=errors.DuplicateResourceError.code,
                              error_message="Cannot describe SCRAM credentials for the same "
                                            f"user twice in a single request: {name}")
            else:
                entry = users.get(name, {})
                infos = [{"mechanism": SCRAM_TYPE_OF[m], "iterations": int(entry[m]["iterations"])}
                         for m in SCRAM_MECHANISMS if m in entry]
                if infos:
                    result["credential_infos"] = infos
                else:
                    result.update(error_code=errors.ResourceNotFoundError.code,
                                  error_message=f"Attempt to describe a user credential that "
                                                f"does not exist: {name}")
            results.append(result)
        return {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                "results": results}

    # ---- AlterUserScramCredentials ----------------------------------------------------------

    def _alter(self, ctx: RequestContext, body: dict) -> dict:
        # Kafka's rule: a user may appear once in the whole request.
        order: list[str] = []
        seen: dict[str, int] = {}
        for op in (*body["deletions"], *body["upsertions"]):
            name = op["name"]
            if name not in seen:
                order.append(name)
            seen[name] = seen.get(name, 0) + 1
        deletions = {d["name"]: d for d in body["deletions"] if seen[d["name"]] == 1}
        upsertions = {u["name"]: u for u in body["upsertions"] if seen[u["name"]] == 1}
        outcome: dict[str, tuple[int, str | None]] = {
            name: (errors.DuplicateResourceError.code, _TWICE)
            for name, count in seen.items() if count > 1}
        # The salted passwords turn into keys before the lock is taken.
        prepared: dict[str, tuple[str, dict] | _Refused] = {}
        for name, up in upsertions.items():
            try:
                mechanism = _mechanism(name, up["mechanism"])
                iterations = up["iterations"]
                if iterations < SCRAM_MIN_ITERATIONS:
                    raise _Refused(errors.UnacceptableCredentialError, "Too few iterations")
                if iterations > SCRAM_MAX_ITERATIONS:
                    raise _Refused(errors.UnacceptableCredentialError, "Too many iterations")
                if not 0 < len(up["salt"]) <= MAX_SECRET_BYTES or \
                        not 0 < len(up["salted_password"]) <= MAX_SECRET_BYTES:
                    raise _Refused(errors.UnacceptableCredentialError,
                                   f"The salt and the salted password must be 1 to "
                                   f"{MAX_SECRET_BYTES} bytes")
                prepared[name] = (mechanism, scram_credential(
                    mechanism, bytes(up["salt"]), bytes(up["salted_password"]), iterations))
            except _Refused as exc:
                prepared[name] = exc

        def change(users: dict) -> None:
            for name, d in deletions.items():
                try:
                    mechanism = _mechanism(name, d["mechanism"])
                    entry = users.get(name)
                    if entry is None or mechanism not in entry:
                        raise _Refused(errors.ResourceNotFoundError,
                                       "Attempt to delete a user credential that does not exist")
                except _Refused as exc:
                    outcome[name] = (exc.args[0].code, exc.args[1])
                    continue
                del entry[mechanism]
                if not entry:
                    del users[name]
                outcome[name] = (0, None)
            for name, ready in prepared.items():
                if isinstance(ready, _Refused):
                    outcome[name] = (ready.args[0].code, ready.args[1])
                    continue
                mechanism, credential = ready
                users.setdefault(name, {})[mechanism] = credential
                outcome[name] = (0, None)

        try:
            self.users.update(change)
        except (OSError, errors.KafkaError) as exc:
            # not written: no user changed
            log.error("cannot alter SCRAM credentials in %s: %s", self.users.where, exc)
            code = (exc.code if isinstance(exc, errors.KafkaError)
                    else errors.KafkaStorageError.code)
            message = (f"cannot write the SASL users file: {exc}" if isinstance(
                self.users, FileUsers) else f"cannot store the SASL users: {exc}")
            return {"throttle_time_ms": 0, "results": [
                {"user": name, "error_code": outcome.get(name, (code,))[0] or code,
                 "error_message": message} for name in order]}
        changed = [name for name in order if outcome.get(name, (1,))[0] == 0]
        if changed:
            log.info("SCRAM credentials altered by %s: %s", ctx.principal, ", ".join(changed))
        return {"throttle_time_ms": 0, "results": [
            {"user": name, "error_code": outcome[name][0], "error_message": outcome[name][1]}
            for name in order]}


def _mechanism(name: str, mechanism_type: int) -> str:
    mechanism = SCRAM_MECHANISM_TYPES.get(mechanism_type)
    if mechanism is None:
        raise _Refused(errors.UnsupportedSaslMechanismError,
                       f"Unknown SCRAM mechanism {mechanism_type}")
    if not name:
        raise _Refused(errors.UnacceptableCredentialError, "Username must not be empty")
    why = reserved(name)
    if why:
        raise _Refused(errors.UnacceptableCredentialError, f"Username {name}: {why}")
    return mechanism
