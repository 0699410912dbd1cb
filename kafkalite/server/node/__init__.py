"""A node's processes: their main loops, their lives, and the wiring of
every other folder of server/ into them.

What it holds:

- supervisor.py: the supervisor process (``kafkalite server``): spawning
  and restarting the workers, ``server.json``, and the loop that runs the
  controller, the coordinators, the relay's server and the HTTP port;
- worker.py: a partition worker process (``python -m
  kafkalite.server.node.worker``): the loop around one broker's replica
  manager, fetcher and ring gateway;
- broker_node.py: the main process of a broker node of a cluster, in
  place of the supervisor when another node holds the controller lease:
  this host's workers only;
- processes.py: spawning the workers and the ingest gateway early, and
  the workers' locks (used by the supervisor, a broker node and workers).

(The launcher that starts a server in child processes for tests, benchmarks
and tools is kafkalite/launcher.py, outside the broker.)

What it may import: every other folder of server/ (it sits at their top)
and kafkalite.protocol, kafkalite.storage and the bottom. Nothing below it
imports node/ (the entry points do). broker_node.py takes what it shares
with supervisor.py from processes.py; supervisor.py's ``serve()`` turns
into a broker node when another node holds the lease.
"""
