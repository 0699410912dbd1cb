"""A node's processes: their main loops, their lives, and the wiring of
every other folder of server/ into them.

What it holds:

- roles.py: ``serve()``, a node's main process (``kafkalite server``) in
  its roles: the supervisor, or a cluster's broker node, changing as the
  controller lease changes hands;
- supervisor.py: the supervisor process: its state, the loop that runs the
  controller, the coordinators, the relay's server and the HTTP ports, and
  its stop; the class is made of one module a job:
  supervisor_start.py (its start), control_channel.py (the control
  channel to the workers), worker_lives.py (spawning, restarting and
  adopting the workers and the ingest gateway) and http_services.py (the
  HTTP ports through the one HTTP stack, ``server.json``, the ready line);
- worker.py: a partition worker process (``python -m
  kafkalite.server.node.worker``): the loop around one broker's replica
  manager, fetcher and ring gateway;
- broker_node.py: the main process of a broker node of a cluster, in
  place of the supervisor when another node holds the controller lease:
  this host's workers only;
- processes.py: spawning the workers and the ingest gateway early, and
  the workers' locks (used by the supervisor, a broker node and workers);
- http_apps.py: the HTTP apps' doors (schema registry, REST proxy, Iceberg
  REST catalog), shared by the supervisor and a broker node;
- loop_clock.py: the time the supervisor's loop was able to look.

(The launcher that starts a server in child processes for tests, benchmarks
and tools is kafkalite/launcher.py, outside the broker.)

What it may import: every other folder of server/ (it sits at their top)
and kafkalite.protocol, kafkalite.storage and the bottom. Nothing below it
imports node/ (the entry points do). broker_node.py takes what it shares
with supervisor.py from processes.py and http_apps.py; roles.py's
``serve()`` turns into a broker node when another node holds the lease.
"""
