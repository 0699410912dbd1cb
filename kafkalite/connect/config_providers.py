"""Config providers: connector configs that name a secret instead of
holding it (Kafka's ConfigProvider, KIP-297, KIP-887, KIP-993).

A connector config value may contain ``${provider:path:key}`` (or
``${provider:key}``): the worker replaces it with what the provider gives
when it starts the connector and its tasks, and only then. What is stored
(the config topic, the standalone worker's memory) and what the REST API
shows is the reference, never the value: ``GET /connectors/{name}/config``
answers the config as it was written, and task configs are stored with the
references put back wherever the connector passed a resolved value through
(Kafka's ``AbstractHerder.reverseTransform``).

The worker's config names the providers, as Kafka's does::

    config.providers=file,env,directory
    config.providers.file.class=org.apache.kafka.common.config.provider.FileConfigProvider
    config.providers.file.param.allowed.paths=/etc/kafka/secrets
    config.providers.env.class=org.apache.kafka.common.config.provider.EnvVarConfigProvider
    config.providers.env.param.allowlist.pattern=DB_.*
    config.providers.directory.class=org.apache.kafka.common.config.provider.DirectoryConfigProvider
    config.providers.directory.param.allowed.paths=/run/secrets

- ``FileConfigProvider``: ``${file:/path/to/file.properties:key}``, a key of
  a Java properties file.
- ``DirectoryConfigProvider``: ``${directory:/path/to/dir:name}``, the whole
  content of the file ``name`` in that directory.
- ``EnvVarConfigProvider``: ``${env:NAME}``, an environment variable of the
  worker.

Unlike Kafka's, whose ``allowed.paths`` and ``allowlist.pattern`` default
to everything, ours default to nothing: anyone who may create a connector
may name any reference, and a transform (``InsertField``'s static value)
copies its value into a topic the creator reads, so a provider left open
would hand every file and variable of the worker to every connector
author. The file providers open their files as file_access.py does (under
``allowed.paths`` only, no links below them, never a kafkalite data
directory). An unknown provider or a key the file or environment lacks
leaves the reference as it is (Kafka's behaviour); a refused path fails
the connector or task with the reason.

Who calls: worker.py (``Worker`` builds one ConfigTransformer from its
config; tasks transform their configs), herder.py (connector starts, the
reverse transform of task configs).
"""
from __future__ import annotations

import os
import re

from kafkalite.connect.config import ConfigException
from kafkalite.connect.errors import ConnectException
from kafkalite.connect.file_access import FileAccess, parse_paths

PROVIDERS = "config.providers"
# Kafka's ConfigTransformer.DEFAULT_PATTERN: ${provider:[path:]key}
_VARIABLE = re.compile(r"\$\{([^}]*?):(([^}]*?):)?([^}]*?)\}")
# the properties files and secrets a provider reads are small; a larger one is refused
# rather than read whole into the worker
MAX_SECRET_FILE_BYTES = 1 << 20


class _Provider:
    def __init__(self, name: str, params: dict):
        self.name = name

    def get(self, path: str, key: str) -> str | None:
        raise NotImplementedError


class _FileBacked(_Provider):
    def __init__(self, name: str, params: dict):
        super().__init__(name, params)
        self.access = FileAccess(parse_paths(params.get("allowed.paths")),
                                 setting=f"{PROVIDERS}.{name}.param.allowed.paths")

    def _read(self, path: str) -> str | None:
        try:
            fd = self.access.open(path)
        except FileNotFoundError:
            return None
        with os.fdopen(fd, "rb") as f:
            data = f.read(MAX_SECRET_FILE_BYTES + 1)
        if len(data) > MAX_SECRET_FILE_BYTES:
            raise ConnectException(f"{path}: over {MAX_SECRET_FILE_BYTES} bytes, not a secret "
                                   f"file")
        return data.decode("utf-8")


class FileConfigProvider(_FileBacked):
    """A key of a Java properties file."""

    def get(self, path, key):
        import javaproperties
        text = self._read(path)
        return None if text is None else javaproperties.loads(text).get(key)


class DirectoryConfigProvider(_FileBacked):
    """A file of a directory, whole (Kubernetes secrets mounted as files)."""

    def get(self, path, key):
        if not key or "/" in key or key in (".", ".."):
            raise ConnectException(f"{key!r}: a file name in {path}, without '/'")
        return self._read(os.path.join(path, key))


class EnvVarConfigProvider(_Provider):
    """An environment variable whose name ``allowlist.pattern`` matches
    whole (none when it is unset)."""

    def __init__(self, name, params):
        super().__init__(name, params)
        pattern = params.get("allowlist.pattern")
        try:
            self.allowed = re.compile(pattern) if pattern else None
        except re.error as e:
            raise ConfigException(f"{PROVIDERS}.{name}.param.allowlist.pattern",
                                  f"{pattern!r} is not a regular expression: {e}") from None

    def get(self, path, key):
        if path:
            raise ConnectException(f"${{{self.name}:{path}:{key}}}: environment variables "
                                   f"have no path; write ${{{self.name}:{key}}}")
        if self.allowed is None or not self.allowed.fullmatch(key):
            raise ConnectException(
                f"environment variable {key} is not matched by "
                f"{PROVIDERS}.{self.name}.param.allowlist.pattern "
                f"({self.allowed.pattern if self.allowed else 'unset: none may be read'})")
        return os.environ.get(key)


_CLASSES = {f"org.apache.kafka.common.config.provider.{cls.__name__}": cls
            for cls in (FileConfigProvider, DirectoryConfigProvider, EnvVarConfigProvider)}


class ConfigTransformer:
    """The worker's providers, and the transform of a config through them."""

    def __init__(self, providers: dict[str, _Provider]):
        self.providers = providers

    @classmethod
    def from_worker_config(cls, config: dict) -> "ConfigTransformer":
        """The providers ``config.providers`` names; ConfigException naming
        the setting for an unknown class or a bad parameter."""
        from kafkalite.connect.plugins import ClassNotFound, load_class
        providers = {}
        for name in parse_paths(config.get(PROVIDERS)):
            key = f"{PROVIDERS}.{name}.class"
            if not config.get(key):
                raise ConfigException(key, f"{PROVIDERS} names {name} but {key} is not set")
            try:
                klass = load_class(config[key], _CLASSES)
            except ClassNotFound:
                klass = None
            if klass not in _CLASSES.values():
                raise ConfigException(key, f"Invalid value {config[key]} for configuration "
                                           f"{key}: one of {', '.join(_CLASSES)}")
            prefix = f"{PROVIDERS}.{name}.param."
            params = {k[len(prefix):]: v for k, v in config.items() if k.startswith(prefix)}
            providers[name] = klass(name, params)
        return cls(providers)

    def transform(self, config: dict) -> dict:
        """``config`` with every reference to a known provider replaced by
        its value (a copy; ``config`` itself is untouched)."""
        if not self.providers:
            return dict(config)
        return {k: _VARIABLE.sub(self._value, v) if isinstance(v, str) and "${" in v else v
                for k, v in config.items()}

    def _value(self, match: re.Match) -> str:
        provider = self.providers.get(match.group(1))
        if provider is None:
            return match.group(0)
        value = provider.get(match.group(3) or "", match.group(4))
        return match.group(0) if value is None else value


def reverse_transform(raw_config: dict, task_configs: list[dict]) -> list[dict]:
    """Task configs with the raw connector config's references put back for
    each key that holds one (Kafka's reverseTransform): what a connector
    copied through from its resolved config is stored as the reference."""
    references = {k: v for k, v in raw_config.items()
                  if isinstance(v, str) and _VARIABLE.search(v)}
    if not references:
        return task_configs
    return [{k: references.get(k, v) for k, v in tc.items()} for tc in task_configs]
