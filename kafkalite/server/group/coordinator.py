from kafkalite.server.group.classic_group import GroupCoordinator

__all__ = ["GroupCoordinator"]
