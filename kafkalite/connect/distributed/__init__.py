from kafkalite.connect.distributed.assignor import (IncrementalCooperativeAssignor,
                                                    connector_unit, parse_unit, task_unit,
                                                    unit_connector)
from kafkalite.connect.distributed.distributed_herder import DistributedHerder
from kafkalite.connect.distributed.group_member import WorkerGroupMember
from kafkalite.connect.distributed.internal_topics import InternalTopics

__all__ = ["DistributedHerder", "IncrementalCooperativeAssignor", "InternalTopics",
           "WorkerGroupMember", "connector_unit", "parse_unit", "task_unit", "unit_connector"]
