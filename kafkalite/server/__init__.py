"""The broker: a supervisor process (process management, the controller, the
group coordinator) and partition worker processes (the data path: a replica
manager each). Start one with ``kafkalite server``; docs/architecture.md
maps the modules."""
