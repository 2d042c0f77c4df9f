"""Sharing one memory file between processes: an owner serves, the others are its clients."""

from nbmemory.remote.shared import SharedMemory, connect

__all__ = ["SharedMemory", "connect"]
