from kafkalite.client.producer.api import Producer, idempotence

__all__ = ["Producer", "idempotence"]
