"""pytester runs an inner pytest session that uses kafkalite.testing."""
pytest_plugins = ["pytester"]
