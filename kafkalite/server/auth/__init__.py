"""Who a connection is and what it may do: SASL and TLS on the listeners,
the users, and Kafka's ACL authorizer (Kafka's ``security`` and
``authorizer`` packages).

What it holds:

- security.py: each listener's TLS and SASL settings (``ListenerSecurity``),
  CURVE on the native ports, and the checks of the security settings;
- credentials.py: the SASL users file (``CredentialStore``) every process
  logs in against;
- native_login.py: SASL logins on the native protocol for clients without
  a CURVE key pair;
- http_login.py: logins on the HTTP port (``/metrics``, the web console,
  the schema registry);
- authorizer.py: the ACL model and its decisions;
- request_authorization.py: what each Kafka API asks of the authorizer
  before its handler runs (``RequestGate``);
- stale_acls.py: what a worker answers while its ACLs are behind the
  controller's (a retriable error, never a decision with the old ones).

Which process runs it: every broker process (the supervisor and each
worker; a broker node of a cluster keeps the users file its workers read);
http_login.py only in the supervisor, which serves HTTP. ``kafkalite
users`` (cli/users.py) writes the users file through credentials.py.

What it may import: server/listeners.py (the listener table) and
server/ratelimit.py (nothing of network/, which sits above it); kafkalite.protocol, kafkalite.storage (its atomic
file writes) and the bottom. Never the controller, replica/ or the
coordinators: the ACLs reach it as data (controller/acl_control.py sends
them, the authorizer holds them).
"""
