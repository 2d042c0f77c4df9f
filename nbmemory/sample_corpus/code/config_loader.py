"""Layered configuration loader for data-etl services.

Precedence (later wins):

1. ``config/defaults.toml`` shipped with the package
2. ``config/{env}.toml`` (``staging`` / ``production`` / ``test``)
3. environment variables prefixed with ``FH_`` (``FH_KAFKA__BOOTSTRAP`` → ``kafka.bootstrap``)

Secrets are never read from TOML files. Fields listed in ``SECRET_FIELDS`` must
come from the environment (populated from SSM / Vault by the container entrypoint),
and are masked in ``repr``.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ENV_PREFIX = "FH_"
SECRET_FIELDS = frozenset({"postgres.password", "s3.secret_access_key", "kafka.sasl_password"})
CONFIG_DIR = Path(__file__).resolve().parent / "config"


class ConfigError(RuntimeError):
    """Raised for missing files, unknown environments, or secrets found in TOML."""


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Recursively merge ``override`` into a copy of ``base``."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def env_overrides(environ: dict[str, str] | None = None) -> dict[str, Any]:
    """Turn ``FH_SECTION__KEY=value`` variables into a nested dict.

    Double underscore separates levels; keys are lower-cased. Values stay strings;
    typing happens in :class:`Settings`.
    """
    environ = dict(os.environ if environ is None else environ)
    nested: dict[str, Any] = {}
    for name, value in environ.items():
        if not name.startswith(ENV_PREFIX):
            continue
        path = name[len(ENV_PREFIX):].lower().split("__")
        node = nested
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value
    return nested


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            flat.update(_flatten(v, key + "."))
        else:
            flat[key] = v
    return flat


def _read_toml(path: Path) -> dict[str, Any]:
    if not path.exists():
        raise ConfigError(f"config file not found: {path}")
    with path.open("rb") as fh:
        data = tomllib.load(fh)
    leaked = SECRET_FIELDS & set(_flatten(data))
    if leaked:
        raise ConfigError(f"secret field(s) {sorted(leaked)} must not be set in {path.name}")
    return data


@dataclass(frozen=True)
class Settings:
    """Typed view over the merged configuration."""

    env: str
    raw: dict[str, Any] = field(repr=False)

    def get(self, dotted: str, default: Any = None) -> Any:
        node: Any = self.raw
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                return default
            node = node[part]
        return node

    def get_int(self, dotted: str, default: int | None = None) -> int:
        value = self.get(dotted, default)
        if value is None:
            raise ConfigError(f"missing required integer setting {dotted!r}")
        return int(value)

    def get_bool(self, dotted: str, default: bool = False) -> bool:
        value = self.get(dotted, default)
        if isinstance(value, bool):
            return value
        return str(value).strip().lower() in {"1", "true", "yes", "on"}

    def __repr__(self) -> str:
        shown = {k: ("***" if k in SECRET_FIELDS else v) for k, v in _flatten(self.raw).items()}
        return f"Settings(env={self.env!r}, {shown})"


def load_settings(env: str | None = None, config_dir: Path = CONFIG_DIR) -> Settings:
    """Load and merge configuration for ``env`` (default: ``$FH_ENV`` or ``staging``)."""
    env = env or os.environ.get("FH_ENV", "staging")
    if env not in {"staging", "production", "test"}:
        raise ConfigError(f"unknown environment {env!r}")
    merged = _read_toml(config_dir / "defaults.toml")
    merged = deep_merge(merged, _read_toml(config_dir / f"{env}.toml"))
    merged = deep_merge(merged, env_overrides())
    return Settings(env=env, raw=merged)
