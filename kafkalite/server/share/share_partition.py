from kafkalite.server.share.share_partition_manager import SharePartitionManager

__all__ = ["SharePartitionManager"]
