"""The model a memory embeds with: loaded on first use, checked against the model the file's
vectors came from, and replaced in one step (re-embedding, tuning, ``use_model``).

Writes share the model from embedding to commit and a swap takes it alone
(:class:`~nbmemory.model_use.ModelUse`), so no write stores a vector of a model a swap just
replaced.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Literal

from nbmemory import long_lived
from nbmemory.config import Settings
from nbmemory.embed import loader
from nbmemory.embed.base import Embedder
from nbmemory.errors import ModelMismatchError, NotFoundError
from nbmemory.model_use import ModelUse
from nbmemory.progress import stderr_bar
from nbmemory.store import passages, reembed, vectors
from nbmemory.store.db import Database

if TYPE_CHECKING:
    from nbmemory.tune.versions import ModelVersion

ModelPolicy = Literal["reembed", "error", "defer"]


def load_for_store(
    db: Database,
    model: str,
    device: str | None = None,
    version: ModelVersion | None = None,
    log: Callable[[str], None] | None = None,
) -> Embedder:
    """The model the memory in ``db`` embeds with, configured as ``model``.

    With no ``version``, the active version is used while it descends from ``model`` (opening a
    memory with another model re-embeds with that one instead). A given ``version`` is loaded
    whatever it descends from. An active version whose weights are gone falls back to ``model``
    (said through ``log``); a chosen one raises :class:`NotFoundError`.
    """
    from nbmemory.tune import versions

    chosen = version if version is not None else versions.active(db)
    if chosen is not None and chosen.path is not None:
        base = chosen.base_model or model
        if version is not None or base == model:
            if chosen.path.is_dir():
                return loader.load_tuned(chosen.path, base, device)
            if version is not None:
                raise NotFoundError(
                    f"model version {chosen.version} has no weights at {chosen.path} "
                    "(refused versions keep only their scores): pick another with `nbmemory models`"
                )
            if log is not None:
                log(f"model version {chosen.version} is missing ({chosen.path}): using {base}")
            return loader.load_model(model, device)
    return loader.load_model(chosen.model if chosen is not None and version is not None else model, device)


class ActiveModel:
    """The embedder of one open memory file, and what changes it.

    Parameters
    ----------
    db, settings:
        The open file and its settings (model name, device, passages on or off).
    embedder:
        An embedder to use instead of loading ``settings.model``.
    on_model_change:
        What to do when the file's vectors come from another model (see :class:`~nbmemory.Memory`).
    log, show_progress:
        Where messages go, and whether long runs draw a progress bar on stderr.
    """

    def __init__(
        self,
        db: Database,
        settings: Settings,
        embedder: Embedder | None,
        on_model_change: ModelPolicy,
        log: Callable[[str], None],
        show_progress: bool,
    ) -> None:
        self.db = db
        self.settings = settings
        self.on_model_change = on_model_change
        self.log = log
        self.show_progress = show_progress
        self.use = ModelUse()
        self._loading = threading.RLock()
        self._embedder = embedder
        self._checked = False
        self._mismatch: str | None = None

    def loaded(self) -> Embedder:
        """The embedder, loaded if need be, not checked against the file."""
        # One load and one check, whichever threads ask first (a search, the refiner).
        with self._loading:
            if self._embedder is None:
                settings = self.settings
                self._embedder = load_for_store(self.db, settings.model, settings.device, log=self.log)
                long_lived.settle()  # the model's objects: no full collection walks them again
            return self._embedder

    def embedder(self) -> Embedder:
        """The embedder, loaded on first use and checked against the file's model."""
        embedder = self.loaded()
        if not self._checked:
            with self._loading:
                if not self._checked:
                    self._check(embedder)
        return embedder

    @contextmanager
    def writing(self) -> Iterator[Embedder]:
        """A write's embedder, held from its embedding to its commit: a model change re-embeds
        first (before the write begins), and no swap comes between (:meth:`ModelUse.writing`)."""
        self.matching()
        with self.use.writing():
            yield self.matching()

    def matching(self) -> Embedder:
        """The embedder, or a :class:`ModelMismatchError` when the file's vectors are another model's."""
        embedder = self.embedder()
        if self._mismatch:
            raise ModelMismatchError(
                f"{self._mismatch}: run Memory.reembed() or `nbmemory doctor --repair` first"
            )
        return embedder

    def set_state(self, checked: bool, mismatch: str | None = None) -> None:
        self._checked, self._mismatch = checked, mismatch

    def _check(self, embedder: Embedder) -> None:
        stored = self.db.get_meta("model_fingerprint")
        if stored is None:
            vectors.start(self.db, embedder)
            self._passages_made_as(embedder)
        elif stored == embedder.fingerprint:
            # A load killed while the index was dropped (vectors.bulk_load) left none: rebuild.
            vectors.ensure_index(self.db)
            self._passages_made_as(embedder)
        else:
            message = (
                f"memory file {self.settings.db_path} holds vectors from model "
                f"{self.db.get_meta('model_name')!r} ({stored}); the current model is {embedder.name!r} "
                f"({embedder.fingerprint})"
            )
            if self.on_model_change == "error":
                raise ModelMismatchError(
                    message + ": pass on_model_change='reembed' or run `nbmemory doctor --repair`"
                )
            if self.on_model_change == "defer":
                self.set_state(False, message)
                return
            self.log(message + ": re-embedding every item")
            self.reembed(embedder)
        self.set_state(True)

    def _passages_made_as(self, embedder: Embedder) -> None:
        # Passages made another way than this embedder makes them are made again, once.
        if self.settings.passages and not self.db.read_only:
            passages.upgrade(self.db, embedder, self.log)

    def fill_passages(self, embedder: Embedder, contents: list[passages.Content] | None = None) -> None:
        """Embed the passages of ``contents`` (None: of every chunk lacking them) for ``embedder``,
        unless passages are off (``Settings.passages``)."""
        if not self.settings.passages:
            return
        if contents is None:
            passages.fill_missing(self.db, embedder)
        else:
            passages.fill(self.db, embedder, contents)

    def reembed(self, embedder: Embedder, also: Callable[[], None] | None = None) -> int:
        """Re-embed every item with ``embedder`` (resumably), then make it the model; the live items.
        ``also`` runs in the swap's transaction (see :func:`nbmemory.store.reembed.swap`)."""
        with stderr_bar("re-embedding", self.show_progress) as progress:
            reembed.stage(self.db, embedder, progress)
            return self.swap(embedder, progress, also)

    def swap(
        self,
        embedder: Embedder,
        progress: Callable[[int, int], None] | None = None,
        also: Callable[[], None] | None = None,
    ) -> int:
        """Replace model and vectors in one step (staged vectors already in place); ``also`` runs
        in that step's transaction."""
        # The new model's passages first, while writes go on; then, after every write that
        # began with the old model has committed and before the next starts, what they added.
        self.fill_passages(embedder)
        with self.use.swapping():
            self.fill_passages(embedder)
            count = reembed.swap(self.db, embedder, self._switch, progress, also)
            passages.keep_only(self.db, [embedder.fingerprint])
            self._passages_made_as(embedder)
            return count

    def _switch(self, embedder: Embedder) -> None:
        # Called by reembed.swap under the database lock, in the same step as the swap.
        self._embedder = embedder
        self.set_state(True)
