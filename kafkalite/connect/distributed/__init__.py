from kafkalite.connect.distributed.assignor import (CooperativeAssignor, connector_unit,
                                                    parse_unit, task_unit, unit_connector)
from kafkalite.connect.distributed.distributed_herder import DistributedHerder
from kafkalite.connect.distributed.group_member import ConnectGroup
from kafkalite.connect.distributed.internal_topics import InternalTopics

__all__ = ["ConnectGroup", "CooperativeAssignor", "DistributedHerder", "InternalTopics",
           "connector_unit", "parse_unit", "task_unit", "unit_connector"]
