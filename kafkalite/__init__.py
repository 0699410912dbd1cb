"""kafkalite: Kafka's model on one host, in Python with Cython hot paths."""
__version__ = "0.1.0"
