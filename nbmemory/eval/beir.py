"""BEIR test collections in the standard layout: load from a folder, download for users online.

A BEIR folder holds ``corpus.jsonl`` (``_id``, ``title``, ``text``), ``queries.jsonl`` (``_id``,
``text``; it may also hold train/dev queries) and ``qrels/<split>.tsv`` (header
``query-id<TAB>corpus-id<TAB>score``, CRLF line ends in the original release). Only the queries
judged in the split's qrels are evaluated.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import urllib.request
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from nbmemory.errors import ConfigError, NotFoundError

BEIR_URL = "https://public.ukp.informatik.tu-darmstadt.de/thakur/BEIR/datasets/{name}.zip"


@dataclass(frozen=True)
class Document:
    """One corpus document."""

    id: str
    title: str
    text: str


@dataclass
class BeirDataset:
    """A loaded BEIR collection (one split).

    Attributes
    ----------
    name:
        The folder's name (``scifact``), used in cache keys and reports.
    corpus:
        Documents by id, in file order.
    queries:
        Query text by id: only the queries judged in ``qrels``, in qrels order.
    qrels:
        ``{query_id: {doc_id: relevance}}`` as ``pytrec_eval`` reads it.
    """

    name: str
    path: Path
    corpus: dict[str, Document]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]
    split: str = "test"
    limits: dict[str, int | None] = field(default_factory=dict)

    def corpus_hash(self) -> str:
        """A short hash of every document's id, title and text (a cache key)."""
        digest = hashlib.sha256()
        for doc in self.corpus.values():
            digest.update(f"{doc.id}\x00{doc.title}\x00{doc.text}\x01".encode())
        return digest.hexdigest()[:16]

    def describe(self) -> str:
        """One line: name, documents, queries, judgements."""
        judged = sum(len(v) for v in self.qrels.values())
        return (
            f"{self.name}: {len(self.corpus)} documents, {len(self.queries)} {self.split} queries, "
            f"{judged} judgements"
        )


def read_qrels(path: str | os.PathLike[str]) -> dict[str, dict[str, int]]:
    """Read a BEIR qrels TSV (header line, CRLF or LF line ends) into ``{qid: {docid: rel}}``.

    Parameters
    ----------
    path:
        The ``qrels/<split>.tsv`` file.

    Returns
    -------
    dict
        Judgements in file order; rows with relevance 0 are kept (they count as judged, not
        relevant, exactly as ``trec_eval`` treats them).
    """
    qrels: dict[str, dict[str, int]] = {}
    with open(path, encoding="utf-8", newline="") as fh:
        for number, line in enumerate(fh):
            line = line.rstrip("\r\n")
            if not line:
                continue
            parts = line.split("\t")
            if number == 0 and parts[0] == "query-id":
                continue
            if len(parts) != 3:
                raise ConfigError(f"{path}: line {number + 1} has {len(parts)} columns, expected 3")
            qid, docid, score = parts
            qrels.setdefault(qid, {})[docid] = int(score)
    return qrels


def _read_jsonl(path: Path) -> list[dict[str, object]]:
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def load(
    path: str | os.PathLike[str],
    split: str = "test",
    limit_queries: int | None = None,
    limit_docs: int | None = None,
) -> BeirDataset:
    """Load a BEIR folder.

    Parameters
    ----------
    path:
        Folder with ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/<split>.tsv``.
    split:
        Which qrels file to evaluate (``test``).
    limit_queries:
        Keep only the first N judged queries (in qrels order), for quick runs.
    limit_docs:
        Keep at most N documents: every document judged for the kept queries first, then
        others in file order. A slice, so its numbers are not comparable with full runs.

    Returns
    -------
    BeirDataset
    """
    folder = Path(path).expanduser()
    files = {"corpus": folder / "corpus.jsonl", "queries": folder / "queries.jsonl"}
    files["qrels"] = folder / "qrels" / f"{split}.tsv"
    for what, file in files.items():
        if not file.exists():
            raise NotFoundError(
                f"{what} file {file} not found: {folder} is not a BEIR folder "
                f"(expected corpus.jsonl, queries.jsonl, qrels/{split}.tsv)"
            )
    for name, value in (("limit_queries", limit_queries), ("limit_docs", limit_docs)):
        if value is not None and value <= 0:
            raise ConfigError(f"{name} must be greater than 0, got {value}")

    qrels = read_qrels(files["qrels"])
    if limit_queries is not None:
        qrels = dict(list(qrels.items())[:limit_queries])
    all_queries = {str(q["_id"]): str(q["text"]) for q in _read_jsonl(files["queries"])}
    missing = [qid for qid in qrels if qid not in all_queries]
    if missing:
        raise ConfigError(f"{len(missing)} judged queries are not in queries.jsonl, e.g. {missing[0]!r}")
    queries = {qid: all_queries[qid] for qid in qrels}

    docs = [
        Document(str(d["_id"]), str(d.get("title") or ""), str(d.get("text") or ""))
        for d in _read_jsonl(files["corpus"])
    ]
    if limit_docs is not None and limit_docs < len(docs):
        judged = {docid for judgements in qrels.values() for docid in judgements}
        keep = [d for d in docs if d.id in judged][:limit_docs]
        kept = {d.id for d in keep}
        keep += [d for d in docs if d.id not in kept][: max(0, limit_docs - len(keep))]
        order = {d.id: i for i, d in enumerate(docs)}
        docs = sorted(keep, key=lambda d: order[d.id])
    corpus = {d.id: d for d in docs}
    return BeirDataset(
        name=folder.name,
        path=folder,
        corpus=corpus,
        queries=queries,
        qrels=qrels,
        split=split,
        limits={"queries": limit_queries, "docs": limit_docs},
    )


def download(name: str, dest: str | os.PathLike[str]) -> Path:
    """Download and unpack a BEIR dataset from its usual location (needs internet).

    Parameters
    ----------
    name:
        BEIR dataset name, e.g. ``"scifact"``, ``"nfcorpus"``, ``"fiqa"``.
    dest:
        Folder to unpack into; the dataset lands in ``dest / name``.

    Returns
    -------
    Path
        The dataset folder, ready for :func:`load`. An existing folder is returned as is.
    """
    target = Path(dest).expanduser() / name
    if (target / "corpus.jsonl").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    url = BEIR_URL.format(name=name)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        archive = Path(tmp) / f"{name}.zip"
        try:
            with urllib.request.urlopen(url, timeout=60) as response, archive.open("wb") as out:
                shutil.copyfileobj(response, out)
        except OSError as exc:
            raise NotFoundError(
                f"could not download {url} ({exc}): check the name and your connection, "
                "or unpack the zip yourself and pass the folder"
            ) from exc
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(tmp)
        unpacked = Path(tmp) / name
        if not (unpacked / "corpus.jsonl").exists():
            raise NotFoundError(f"{url} did not contain {name}/corpus.jsonl")
        shutil.move(str(unpacked), target)
    return target
