"""Index folders and files into the store: incremental, redacted, batched, crash-consistent.

A file is re-read only when its mtime or size changed, and re-chunked only when its content
hash changed. An indexed folder holds what a walk of it indexes: the items of its files that are
gone, or are now excluded (a ``.gitignore`` rule added since), are removed. Chunks whose text is unchanged keep their row (id, counters, forgotten state) and
their vector; only new text is embedded. Each batch of files is one transaction, so a killed
process leaves every earlier batch intact and none of the batch in flight. The batch's passages
(window vectors of long chunks of prose) follow its commit, or are left to the background
refiner (``defer_passages``, :mod:`nbmemory.refine`).
"""

from __future__ import annotations

import hashlib
import os
import stat
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from nbmemory.errors import BadFileError
from nbmemory.ingest import exclude
from nbmemory.ingest.chunking import chunk_file, kind_of
from nbmemory.ingest.redact import redact
from nbmemory.progress import IndexMeter
from nbmemory.store import chunks as chunk_rows
from nbmemory.store import documents, fts, passages, vectors
from nbmemory.store.db import Database, utcnow

if TYPE_CHECKING:
    from nbmemory.embed.base import Embedder

SKIP_DIRS = exclude.SKIP_DIRS
BATCH_CHUNKS = 512
#: Chunks per batch when the model runs on a GPU: the embedder sorts a batch's texts by length
#: and reads them in large batches (256 texts a pass), so a larger batch pads less; its commit
#: is one transaction, so searches beside it wait for a larger write.
GPU_BATCH_CHUNKS = 4096


def batch_chunks(embedder: Embedder) -> int:
    """Chunks of new text embedded and committed together by this embedder."""
    device = str(getattr(embedder, "device", "cpu"))
    return GPU_BATCH_CHUNKS if device.startswith("cuda") else BATCH_CHUNKS


@dataclass
class IndexReport:
    """What one ``index`` run did."""

    files_seen: int = 0
    files_changed: int = 0
    files_unchanged: int = 0
    files_removed: int = 0
    chunks_added: int = 0
    chunks_kept: int = 0
    chunks_removed: int = 0
    chunks_embedded: int = 0
    vectors_reused: int = 0
    #: Window vectors embedded for the chunks of prose written (:mod:`nbmemory.store.passages`).
    passages_embedded: int = 0
    #: Window vectors of the chunks written that are left to the background refiner
    #: (:mod:`nbmemory.refine`): the chunks are searchable now, their passages follow.
    passages_pending: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)
    redactions: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    def summary(self) -> str:
        red = sum(self.redactions.values())
        parts = [
            f"{self.files_seen} files seen: {self.files_changed} indexed, "
            f"{self.files_unchanged} unchanged, {self.files_removed} removed, "
            f"{len(self.skipped)} skipped",
            f"chunks: {self.chunks_added} added, {self.chunks_kept} kept, "
            f"{self.chunks_removed} removed; {self.chunks_embedded} embedded, "
            f"{self.vectors_reused} vectors reused",
        ]
        if red:
            kinds = ", ".join(f"{k}={v}" for k, v in sorted(self.redactions.items()))
            parts.append(f"secrets redacted: {red} ({kinds})")
        if self.passages_pending:
            parts.append(
                f"searchable now; {self.passages_pending:,} passages to refine in the background "
                "(progress: nbmemory status, %memstats)"
            )
        parts.append(f"{self.seconds:.1f} s")
        return "\n".join(parts)


#: A stored document's (content hash, mtime, whether it is forgotten).
_Stored = tuple[str, float | None, bool]
#: A batch's stored chunks: by document id, the ids of its chunks by content hash (oldest first).
_Chunks = dict[int, dict[str, list[int]]]
#: Why a file is skipped whose write found that another indexing's write of it removed a chunk
#: it meant to keep (the next indexing of the file writes it).
CHANGED_MEANWHILE = "changed while it was being indexed: index it again"


@dataclass
class _FilePlan:
    path: str
    kind: str
    digest: str
    mtime: float
    size: int
    rows: list[chunk_rows.NewChunk]
    doc_id: int | None
    #: Passage windows in the rows (0 when passages are off), counted for the progress.
    windows: int = 0
    #: The stored document as this plan found it: (content hash, mtime, forgotten); None: none.
    base: _Stored | None = None


def walk(root: Path, onerror: Callable[[OSError], None] | None = None) -> Iterator[Path]:
    """Files under ``root`` that have an ingestible kind; hidden and junk folders, virtualenvs,
    editor temp files and what ``.gitignore`` files ignore are skipped (:mod:`.exclude`).

    Symlinked folders are not followed (no loops); symlinked files are. A folder that cannot
    be listed is passed to ``onerror`` (and otherwise ignored).
    """
    if root.is_file():
        yield root
        return
    ignored = exclude.Ignored(root)
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False, onerror=onerror):
        dirnames[:] = sorted(
            d
            for d in dirnames
            if not exclude.skip_dir(dirpath, d) and not ignored.matches(os.path.join(dirpath, d), True)
        )
        for name in sorted(filenames):
            if exclude.skip_file(name) or kind_of(name) is None:
                continue
            if ignored.matches(os.path.join(dirpath, name)):
                continue
            yield Path(dirpath) / name


def shown_path(path: str) -> str:
    """``path`` as printable UTF-8: undecodable name bytes are shown as ``\\xNN`` escapes."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return os.fsencode(path).decode("utf-8", "backslashreplace")
    return path


def _file_type(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a plain file"


def _missing(path: Path) -> str | None:
    """Why ``path``, named to be indexed, cannot be read; None when it exists."""
    try:
        if path.exists():
            return None
        # Path.exists() is False for a dangling link and for a symlink loop alike.
        return "broken symlink or symlink loop" if path.is_symlink() else "no such file or folder"
    except OSError as exc:  # a name longer than the system allows
        return f"cannot be read: {exc.strerror}"


def _match(
    plans: Sequence[_FilePlan], stored: _Chunks
) -> tuple[list[tuple[_FilePlan, chunk_rows.NewChunk]], list[tuple[int, chunk_rows.NewChunk]], list[int]]:
    """The plans' rows against their files' stored chunks: the rows of new text, the stored
    chunks kept for rows of the same text (``(chunk id, row)``), and the stored chunks whose
    text no longer occurs in their file."""
    new_rows: list[tuple[_FilePlan, chunk_rows.NewChunk]] = []
    keep: list[tuple[int, chunk_rows.NewChunk]] = []
    gone: list[int] = []
    for plan in plans:
        held = stored.get(plan.doc_id, {}) if plan.doc_id is not None else {}
        existing = {digest: list(ids) for digest, ids in held.items()}
        for row in plan.rows:
            ids = existing.get(row.hash)
            if ids:
                keep.append((ids.pop(0), row))
            else:
                new_rows.append((plan, row))
        gone += [cid for ids in existing.values() for cid in ids]
    return new_rows, keep, gone


class Indexer:
    """Indexes paths into ``db`` with ``embedder``.

    Parameters
    ----------
    max_bytes:
        Files larger than this are skipped with a message.
    meter:
        Counts the run's progress (files read, chunks and passages embedded) and tells its
        listener; the caller owns it, so its clock covers what comes before and after.
    passages:
        Whether written chunks of prose get their window vectors (``Settings.passages``).
    defer_passages:
        Leave those window vectors to the background refiner (:mod:`nbmemory.refine`): each
        batch commits its chunks with their BM25 postings and own vectors only, and
        ``report.passages_pending`` counts the windows left.
    """

    def __init__(
        self,
        db: Database,
        embedder: Embedder,
        max_bytes: int,
        meter: IndexMeter | None = None,
        log: Callable[[str], None] | None = None,
        passages: bool = True,
        defer_passages: bool = False,
    ) -> None:
        self.db = db
        self.embedder = embedder
        self.max_bytes = max_bytes
        self.meter = meter or IndexMeter()
        self.log = log or (lambda message: None)
        #: Whether written chunks of prose also get their window vectors (``Settings.passages``).
        self.passages = passages
        self.defer_passages = defer_passages

    def run(self, paths: Iterable[str | os.PathLike[str]], namespace: str) -> IndexReport:
        report = IndexReport()
        start = time.perf_counter()
        roots = []
        for root in (Path(p).expanduser().absolute() for p in paths):
            reason = _missing(root)
            if reason is None:
                roots.append(root)
                continue
            report.skipped.append((shown_path(str(root)), reason))
            self.log(f"skipped {shown_path(str(root))}: {reason}")
        files: list[Path] = []
        unreadable: list[str] = []

        def unlisted(exc: OSError) -> None:
            unreadable.append(str(exc.filename) + os.sep)
            shown = shown_path(str(exc.filename))
            report.skipped.append((shown, f"cannot list folder: {exc.strerror}"))
            self.log(f"skipped {shown}: cannot list folder ({exc.strerror})")

        for root in roots:
            files.extend(walk(root, unlisted))
        names = [str(f) for f in files]
        # Files named one by one (a live batch): only theirs, not every document's. (A name
        # that is not UTF-8 cannot be a parameter; _plan skips that file with its reason.)
        one_by_one = not any(root.is_dir() for root in roots) and all(shown_path(name) == name for name in names)
        known = {
            path: (doc_id, digest, mtime, size, forgotten)
            for doc_id, path, digest, mtime, size, forgotten in documents.known(
                self.db, namespace, names if one_by_one else None
            )
        }
        with vectors.bulk_load(self.db, self._is_bulk(files, known)):
            self._index_files(files, namespace, known, report)
        self._remove_missing(roots, namespace, known, {str(f) for f in files}, report, unreadable)
        report.seconds = time.perf_counter() - start
        return report

    def _is_bulk(self, files: list[Path], known: dict[str, tuple[int, str, float, int, object]]) -> bool:
        # Cheap estimate from stat alone: new or touched files, at ~4 chunks each.
        touched = 0
        for file in files:
            entry = known.get(str(file))
            if entry is None:
                touched += 1
                continue
            try:
                st = file.stat()
            except OSError:
                continue
            touched += entry[2] != st.st_mtime or entry[3] != st.st_size
        return vectors.is_bulk(self.db, 4 * touched)

    def _index_files(
        self,
        files: list[Path],
        namespace: str,
        known: dict[str, tuple[int, str, float, int, object]],
        report: IndexReport,
    ) -> None:
        pending: list[_FilePlan] = []
        pending_chunks = 0
        # The meter counts files read, and chunks and passages embedded (what takes the time);
        # its listener also gets the files finished (unchanged, skipped, or embedded and
        # written). Each file's call comes before it is read: an interrupt or a cancel there
        # stops before the next file.
        meter = self.meter
        batch = batch_chunks(self.embedder)
        for file in files:
            path = str(file)
            report.files_seen += 1
            finished = report.files_seen - 1 - len(pending)
            meter.reading(report.files_seen, len(files), path, finished)
            plan = self._plan(file, namespace, known.get(path), report)
            if plan is None:
                continue
            meter.planned(len(plan.rows), plan.windows)
            pending.append(plan)
            pending_chunks += len(plan.rows)
            if pending_chunks >= batch:
                self._commit(pending, namespace, report, finished=report.files_seen - len(pending))
                pending, pending_chunks = [], 0
        if pending:
            self._commit(pending, namespace, report, finished=report.files_seen - len(pending))

    # -- planning: read, hash, chunk, redact ----------------------------------------------
    def read_file(self, file: Path, namespace: str, report: IndexReport) -> list[chunk_rows.NewChunk] | None:
        """``file``'s chunks as an index stores them (read, checked, chunked, secrets redacted),
        whatever this store holds of it; None when it is skipped (``report`` says why). A team
        index plans its files with it."""
        plan = self._plan(file, namespace, None, report)
        return None if plan is None else plan.rows

    def _plan(
        self,
        file: Path,
        namespace: str,
        known: tuple[int, str, float, int, object] | None,
        report: IndexReport,
    ) -> _FilePlan | None:
        path = str(file)
        if shown_path(path) != path:
            # Bytes that are not UTF-8 in a name (kept by Python as lone surrogates) cannot be
            # stored as the item's source; the rest of the batch must not fail with it.
            reason = "file name is not valid UTF-8: rename the file to index it"
            report.skipped.append((shown_path(path), reason))
            self.log(f"skipped {shown_path(path)}: {reason}")
            return None
        try:
            st = file.stat()
        except OSError as exc:
            report.skipped.append((path, f"cannot stat: {exc.strerror}"))
            self.log(f"skipped {path}: cannot stat ({exc.strerror})")
            return None
        if not stat.S_ISREG(st.st_mode):
            # A FIFO would block the read forever and a link to /dev/zero would never end.
            reason = f"not a regular file ({_file_type(st.st_mode)})"
            report.skipped.append((path, reason))
            self.log(f"skipped {path}: {reason}")
            return None
        if known is not None:
            _, _, mtime, size, forgotten = known
            if forgotten is not None:
                report.files_unchanged += 1
                return None
            if mtime == st.st_mtime and size == st.st_size:
                report.files_unchanged += 1
                return None
        if st.st_size > self.max_bytes:
            reason = (
                f"file is {st.st_size / 1e6:.1f} MB, over the {self.max_bytes / 1e6:.0f} MB "
                "limit (raise NBMEMORY_MAX_FILE_MB to index it)"
            )
            report.skipped.append((path, reason))
            self.log(f"skipped {path}: {reason}")
            return None
        try:
            # Read at most one byte past the cap: a file that grew after stat() is still refused.
            with file.open("rb") as fh:
                data = fh.read(self.max_bytes + 1)
        except OSError as exc:
            report.skipped.append((path, f"cannot read: {exc.strerror}"))
            self.log(f"skipped {path}: cannot read ({exc.strerror})")
            return None
        if len(data) > self.max_bytes:
            reason = (
                f"file grew past the {self.max_bytes / 1e6:.0f} MB limit while being read "
                "(raise NBMEMORY_MAX_FILE_MB to index it)"
            )
            report.skipped.append((path, reason))
            self.log(f"skipped {path}: {reason}")
            return None
        digest = hashlib.sha256(data).hexdigest()
        if known is not None and known[1] == digest:
            # Touched but not changed: remember the new mtime so the fast path works next time.
            documents.touch(self.db, known[0], st.st_mtime, st.st_size)
            report.files_unchanged += 1
            return None
        try:
            drafts = chunk_file(path, data)
        except BadFileError as exc:
            report.skipped.append((path, exc.reason))
            self.log(f"skipped {exc}")
            return None
        except RecursionError:
            report.skipped.append((path, "structure nested too deeply to parse"))
            self.log(f"skipped {path}: structure nested too deeply to parse")
            return None
        kind = kind_of(path) or "text"
        rows = []
        windows = 0
        for ordinal, draft in enumerate(drafts):
            text = redact(draft.text)
            heading = redact(draft.heading)
            for name, count in (text.counts | {}).items():
                report.redactions[name] = report.redactions.get(name, 0) + count
            for name, count in heading.counts.items():
                report.redactions[name] = report.redactions.get(name, 0) + count
            tags = [t.strip() for t in draft.meta.get("tags", "").split(",") if t.strip()]
            rows.append(
                chunk_rows.NewChunk(
                    namespace=namespace,
                    kind=draft.kind,
                    text=text.text,
                    heading=heading.text,
                    source=path,
                    ordinal=ordinal,
                    cell_id=draft.cell_id,
                    cell_index=draft.cell_index,
                    line_start=draft.line_start,
                    line_end=draft.line_end,
                    page=draft.page,
                    tags=tags,
                    event_at=draft.event_at,
                    speaker=draft.speaker,
                    conversation=draft.conversation,
                )
            )
            if self.passages and not self.defer_passages:
                windows += len(passages.texts_of(heading.text, text.text, draft.kind))
        return _FilePlan(
            path,
            kind,
            digest,
            st.st_mtime,
            st.st_size,
            rows,
            known[0] if known else None,
            windows,
            (known[1], known[2], known[4] is not None) if known else None,
        )

    # -- committing a batch -----------------------------------------------------------------
    def _stored_chunks(self, doc_ids: list[int]) -> _Chunks:
        stored: _Chunks = defaultdict(lambda: defaultdict(list))
        if doc_ids:
            for cid, doc_id, digest in documents.chunks_of(self.db, doc_ids):
                stored[int(doc_id)][digest].append(int(cid))
        return stored

    def _stored_vectors(self, hashes: Iterable[str]) -> dict[str, np.ndarray]:
        """A stored vector of each text among ``hashes`` that some chunk holds."""
        wanted = sorted(set(hashes))
        if not wanted:
            return {}
        return {
            digest: np.asarray(vec, dtype=np.float32)
            for digest, vec in documents.vector_of_each(self.db, wanted)
        }

    def _still_to_write(self, plans: list[_FilePlan], namespace: str, report: IndexReport) -> list[_FilePlan]:
        """The plans to write now (call inside the write's transaction), their document ids as
        stored now. Another indexing of the same file may have committed since a plan was made
        (the Jupyter server and ``nbmemory watch`` both hear a save, and index it through the
        memory's one owner at the same time): a file it wrote with the same content, or from a
        later save, or that was forgotten meanwhile, is left as it is."""
        current = {
            str(path): (int(doc_id), str(digest), mtime, forgotten is not None)
            for doc_id, path, digest, mtime, forgotten in documents.current(
                self.db, namespace, [plan.path for plan in plans]
            )
        }
        writing = []
        for plan in plans:
            cur = current.get(plan.path)
            stored = cur[1:] if cur is not None else None
            if cur is not None and stored != plan.base:
                _, digest, mtime, forgotten = cur
                if digest == plan.digest or forgotten or (mtime is not None and mtime > plan.mtime):
                    report.files_unchanged += 1
                    continue
            plan.doc_id = cur[0] if cur is not None else None
            writing.append(plan)
        return writing

    def _commit(self, plans: list[_FilePlan], namespace: str, report: IndexReport, finished: int = 0) -> None:
        """Embed and write one batch; ``finished`` files were done before it.

        The stored chunks of the batch's files are read twice: before embedding, to embed only
        new text, and inside the write's transaction, which matches the files' chunks against
        what is stored then (:meth:`_still_to_write`): a file's old chunks are replaced by its
        new ones in that one transaction, those of unchanged text kept, so however many
        indexings of one save run at once, its chunks are stored once.
        """
        old = self._stored_chunks([p.doc_id for p in plans if p.doc_id is not None])
        # Which rows are new text, and which can reuse a stored vector of identical text.
        new_rows, keep, gone = _match(plans, old)
        hashes = sorted({row.hash for _, row in new_rows})
        reusable = self._stored_vectors(hashes)
        to_embed = [row for _, row in new_rows if row.hash not in reusable]
        unique: dict[str, chunk_rows.NewChunk] = {}
        late: dict[str, list[np.ndarray | None]] = {}
        for row in to_embed:
            unique.setdefault(row.hash, row)
        meter = self.meter
        meter.reused(sum(len(plan.rows) for plan in plans) - len(unique))
        if unique:
            texts = [chunk_rows.embedding_text(r.heading, r.text) for r in unique.values()]
            embedded = 0
            meter.phase("embedding chunks")

            def step(count: int) -> None:
                # The batch's files count as finished in proportion to the chunks embedded so far.
                nonlocal embedded
                embedded += count
                share = len(plans) * embedded // len(texts)
                meter.chunks_step(count, finished + share, plans[max(share - 1, 0)].path)

            if self.passages and not self.defer_passages and passages.method(self.embedder) == passages.LATE:
                # One pass per chunk gives its vector and its passages' (late pooling).
                spans = [passages.plan(r.heading, r.text, r.kind) for r in unique.values()]
                vecs, pooled = passages.embed_with_late(self.embedder, texts, spans, progress=step)
                late.update({digest: p for digest, p in zip(unique, pooled, strict=True) if p})
            else:
                vecs = self.embedder.embed_documents(texts, progress=step)
            for digest, vec in zip(unique, vecs, strict=True):
                reusable[digest] = vec
        report.chunks_embedded += len(unique)
        report.vectors_reused += len(new_rows) - len(to_embed)
        now = utcnow()
        # Tokenized before the transaction: searches wait for it, not for this.
        postings = fts.postings_of(self.db, [(row.heading, row.text) for _, row in new_rows])
        with self.db.transaction():
            writing = self._still_to_write(plans, namespace, report)
            stored = self._stored_chunks([p.doc_id for p in writing if p.doc_id is not None])
            if len(writing) != len(plans) or stored != old:
                # Another indexing wrote some of these files meanwhile: match against what it wrote.
                new_rows, keep, gone = _match(writing, stored)
                reusable |= self._stored_vectors(r.hash for _, r in new_rows if r.hash not in reusable)
                # A chunk this plan kept that the other write removed, whose text no chunk holds
                # now: there is no vector for it, so the file waits for its next indexing.
                stale = {id(plan) for plan, row in new_rows if row.hash not in reusable}
                if stale:
                    report.skipped += [(p.path, CHANGED_MEANWHILE) for p in writing if id(p) in stale]
                    writing = [p for p in writing if id(p) not in stale]
                    new_rows, keep, gone = _match(writing, stored)
                postings = fts.postings_of(self.db, [(row.heading, row.text) for _, row in new_rows])
            fresh = [plan for plan in writing if plan.doc_id is None]
            fresh_ids = chunk_rows.allocate(self.db, "doc_ids", len(fresh))
            for plan, doc_id in zip(fresh, fresh_ids, strict=True):
                plan.doc_id = doc_id
            chunk_rows.write_documents(
                self.db,
                [
                    (plan.doc_id, namespace, plan.path, plan.kind, plan.digest, plan.mtime, plan.size)
                    for plan in writing
                    if plan.doc_id is not None
                ],
                new_ids=set(fresh_ids),
                now=now,
            )
            for plan in writing:
                for row in plan.rows:
                    row.doc_id = plan.doc_id
            # Old chunks whose text no longer occurs in their file.
            chunk_rows.purge(self.db, gone)
            chunk_rows.update_positions(self.db, keep)
            rows = [row for _, row in new_rows]
            vecs = (
                np.stack([reusable[r.hash] for r in rows])
                if rows
                else np.zeros((0, self.embedder.dim), np.float32)
            )
            chunk_rows.insert(self.db, rows, vecs, now, postings)
        if self.passages and self.defer_passages:
            todo = passages.pending(
                self.db, self.embedder, [(r.hash, r.heading, r.text, r.kind) for r in rows]
            )
            report.passages_pending += passages.window_count(todo)
        elif self.passages:
            todo = passages.pending(
                self.db, self.embedder, [(r.hash, r.heading, r.text, r.kind) for r in rows]
            )
            windows = passages.windows_to_embed(todo, late)
            meter.passages_found(sum(plan.windows for plan in writing), windows)
            if windows:
                meter.phase("embedding passages")
            report.passages_embedded += passages.fill(
                self.db, self.embedder, todo, progress=meter.passages_step, late=late
            )
        report.files_changed += len(writing)
        report.chunks_added += len(new_rows)
        report.chunks_kept += len(keep)
        report.chunks_removed += len(gone)

    def _remove_missing(
        self,
        roots: list[Path],
        namespace: str,
        known: dict[str, tuple[int, str, float, int, object]],
        seen: set[str],
        report: IndexReport,
        unreadable: Sequence[str] = (),
    ) -> None:
        folders = [(str(r), str(r) + os.sep, exclude.Ignored(r)) for r in roots if r.is_dir()]

        def gone(path: str) -> bool:
            # Deleted, or now excluded (a .gitignore rule added since it was indexed): the
            # folder holds what a walk of it indexes. A file in a folder that could not be
            # listed is not known to be gone: its chunks are kept.
            if path in seen or any(path.startswith(u) for u in unreadable):
                return False
            return any(
                path.startswith(prefix)
                and (not os.path.exists(path) or exclude.excluded(path, root, ignored))
                for root, prefix, ignored in folders
            )

        gone_docs = [doc_id for path, (doc_id, *_rest) in known.items() if gone(path)]
        if not gone_docs:
            return
        with self.db.transaction():
            ids = documents.chunk_ids_of(self.db, gone_docs)
            chunk_rows.purge(self.db, ids)
            documents.delete(self.db, gone_docs)
        report.files_removed += len(gone_docs)
        report.chunks_removed += len(ids)
