"""Capture of the cells every kernel of this Jupyter server runs, when the person turns it on.

A kernel captures its cells once it loaded nbmemory (``%load_ext nbmemory``:
:mod:`nbmemory.jupyter.capture`). With *server-wide* capture on, every Python kernel this server
starts from then on loads it at start (IPython's ``--ext`` option on the kernel's command line)
and writes to this server's memory. Kernels already running are left as they are, and a kernel
that is not IPython's is never touched. It is off unless ``c.NbMemory.capture_kernels = True``,
``NBMEMORY_CAPTURE_KERNELS=1``, or the Lab setting turns it on (``PUT /nbmemory/capture``);
``NBMEMORY_CAPTURE=0`` in the server's environment still turns capture off in every kernel,
which inherit it.

Which kernels capture, this server's or not, is what they publish beside the memory
(:func:`nbmemory.runtime.published`): the sidebar lists them.
"""

from __future__ import annotations

import inspect
import os
from pathlib import Path
from typing import Any

from nbmemory.config import capture_enabled
from nbmemory.runtime import published

__all__ = ["KernelCapture", "capturing_kernels"]


def capturing_kernels(db_path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The kernels that capture into the memory at ``db_path`` now: ``pid``, ``kernel_id``,
    ``notebook`` (the last one a cell was captured from), ``since`` and ``runs``."""
    return published(db_path, "capture")


class KernelCapture:
    """Whether the kernels this server starts capture their cells, and the hook that makes them.

    Parameters
    ----------
    serverapp:
        The Jupyter server: its ``kernel_manager`` gets the hook, its config the default.
    memory_path:
        Returns the path of the server's memory (opening it if need be), for the kernels to
        write to the same memory; called off the event loop.
    """

    def __init__(self, serverapp: Any, memory_path: Any) -> None:
        setting = serverapp.config.get("NbMemory", {}).get("capture_kernels", False)
        env = os.environ.get("NBMEMORY_CAPTURE_KERNELS", "").strip()
        self.server_wide = env == "1" if env in ("0", "1") else bool(setting)
        self._memory_path = memory_path
        self._kernels = serverapp.kernel_manager
        self._start = self._kernels.start_kernel
        self._kernels.start_kernel = self._start_kernel

    @staticmethod
    def env_off() -> bool:
        """Whether ``NBMEMORY_CAPTURE=0`` turns capture off in the kernels this server starts."""
        return not capture_enabled()

    async def _start_kernel(self, *args: Any, **kwargs: Any) -> Any:
        if self.server_wide and not self.env_off() and await self._is_ipython(kwargs.get("kernel_name")):
            from tornado.ioloop import IOLoop

            path: Path = await IOLoop.current().run_in_executor(None, self._memory_path)
            extra = list(kwargs.get("extra_arguments") or [])
            # The memory the server uses, whatever the kernel's own settings would pick.
            kwargs["extra_arguments"] = [*extra, "--ext=nbmemory", f"--MemoryMagics.db={path}"]
        result = self._start(*args, **kwargs)
        return await result if inspect.isawaitable(result) else result

    async def _is_ipython(self, name: str | None) -> bool:
        specs = self._kernels.kernel_spec_manager
        try:
            spec = specs.get_kernel_spec(name or self._kernels.default_kernel_name)
            if inspect.isawaitable(spec):
                spec = await spec
        except Exception:  # an unknown kernel name: the start itself says so
            return False
        return any("ipykernel" in part for part in spec.argv)
