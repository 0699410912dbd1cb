"""The network layer of a broker process: from bytes on a socket to a
handler's answer, and the requests one broker process sends another
(Kafka's ``network`` module and the request channel of ``KafkaApis``).

What it holds:

- requests.py: ``RequestContext`` and ``RequestDispatcher``, the one path
  of every request whatever it came in on (a handler returns a body,
  ``DEFERRED`` or ``NO_RESPONSE``);
- native_listener.py: the native protocol's ZeroMQ ROUTER;
- kafka_listener.py: Kafka's wire protocol over non-blocking TCP, with TLS
  and the SASL exchange per connection;
- tls.py: TLS on a listener's socket through memory BIOs;
- relay.py: Kafka requests a worker does not serve, passed to the supervisor;
- broker_requests.py: requests between broker processes (WriteTxnMarkers,
  AddPartitionsToTxn's verification);
- per_partition.py: walking a request's topics and partitions into the
  response's (``each_partition``);
- quotas.py: client quotas and throttling; connection_quotas.py: the
  connection-rate quotas (KIP-612);
- port_holder.py: which process holds a port a listener cannot bind;
- poller.py: the event loop's poller, ``zmq.Poller``'s interface over one
  persistent epoll set (the worker's).

Which process runs it: every broker process, on its event loop: the
supervisor and each partition worker (of the controller node or of a
broker node of a cluster). The relay's server side runs in the supervisor,
its client side in the workers.

What it may import: auth/ (the Kafka listener's TLS and SASL,
``ListenerSecurity``), server/listeners.py, server/topic.py and
server/ratelimit.py; kafkalite.protocol, kafkalite.storage (the
``FileRegion`` a fetch answer is sent from), kafkalite.local_socket and the
bottom (errors, ratelimit, record).
"""
