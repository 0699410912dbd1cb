"""The Consumer a Spark Python worker keeps from task to task
(kafkalite_spark.task_consumers): taken again only with the same client
settings, unassigned in between, closed when the settings change."""
import pytest

from kafkalite.client import TopicPartition
from kafkalite_spark import task_consumers


@pytest.fixture
def kept():
    yield
    task_consumers.close()


def test_a_consumer_is_taken_again_only_with_the_same_settings(server, kept):
    config = server.config(**{"isolation.level": "read_uncommitted"})
    first = task_consumers.borrow(config)
    first.assign([TopicPartition("any", 0, 5)])
    task_consumers.give_back(config, first)
    again = task_consumers.borrow(dict(config))
    assert again is first and again.assignment() == []
    task_consumers.give_back(config, again)
    # another isolation level (or server, or credentials): a new consumer, the old closed
    other = task_consumers.borrow({**config, "isolation.level": "read_committed"})
    assert other is not first and other.config["isolation.level"] == "read_committed"
    with pytest.raises(RuntimeError, match="closed"):
        first.assign([])
    task_consumers.give_back({**config, "isolation.level": "read_committed"}, other)
    # two lent out at once (never in a worker, which runs one task at a time): one kept
    a, b = task_consumers.borrow(config), task_consumers.borrow(config)
    task_consumers.give_back(config, a)
    task_consumers.give_back(config, b)
    with pytest.raises(RuntimeError, match="closed"):
        b.assign([])
    assert task_consumers.borrow(config) is a
    a.close()
