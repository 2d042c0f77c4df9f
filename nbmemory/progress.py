"""Progress on stderr for long runs of the CLI and the Python API (magics draw their own)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def stderr_bar(desc: str, enabled: bool) -> Iterator[Callable[..., None]]:
    """A ``progress(done, total, *_)`` callback drawing a bar on stderr; silent when not ``enabled``."""
    from tqdm.auto import tqdm

    bar = tqdm(total=0, desc=desc, disable=not enabled, file=sys.stderr, leave=False)

    def progress(done: int, total: int, *_: object) -> None:
        bar.total, bar.n = total, done
        bar.refresh()

    try:
        yield progress
    finally:
        bar.close()
