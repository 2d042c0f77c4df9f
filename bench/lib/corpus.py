"""Deterministic benchmark text: 2-sentence chunks of BEIR SciFact + NFCorpus, and their test queries.

Each document is ``title + ". " + text``, split into sentences with a simple regex. The first
pass takes sentences (1-2), (3-4), ... of every document (~43k chunks); if more are asked for, a
second pass adds the windows offset by one sentence, (2-3), (4-5), ..., in the same document
order. Documents of the two datasets are interleaved (scifact, nfcorpus, scifact, ...), so any
prefix of the chunk list mixes both. The datasets are read from ``$NBMEMORY_BEIR``, else from
``shared/datasets/beir`` beside the repository.

    python -m bench.lib.corpus      # how many chunks there are, the first ones, the queries
"""

from __future__ import annotations

import csv
import json
import os
import re
from functools import lru_cache
from pathlib import Path

from bench.lib.paths import BEIR as SHARED_BEIR

BEIR = Path(os.environ.get("NBMEMORY_BEIR", SHARED_BEIR))
DATASETS = ("scifact", "nfcorpus")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[A-Z0-9])")


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text``: split after . ! ? followed by space and an upper-case letter/digit."""
    flat = " ".join(text.split())
    return [s for s in _SENTENCE_END.split(flat) if s.strip()]


def _documents(dataset: str) -> list[tuple[str, list[str]]]:
    docs = []
    with (BEIR / dataset / "corpus.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            if not line.strip():
                continue
            row = json.loads(line)
            title = (row.get("title") or "").strip().rstrip(".")
            body = (row.get("text") or "").strip()
            full = f"{title}. {body}" if title else body
            sentences = split_sentences(full)
            if sentences:
                docs.append((f"{dataset}/{row['_id']}", sentences))
    return docs


@lru_cache(maxsize=1)
def _interleaved_documents() -> tuple[tuple[str, tuple[str, ...]], ...]:
    per = [_documents(d) for d in DATASETS]
    out = []
    for i in range(max(len(p) for p in per)):
        for docs in per:
            if i < len(docs):
                out.append((docs[i][0], tuple(docs[i][1])))
    return tuple(out)


def _pass(offset: int) -> list[tuple[str, str]]:
    chunks = []
    for doc_id, sentences in _interleaved_documents():
        n = len(sentences)
        # The offset pass takes only full two-sentence windows.
        starts = range(0, n, 2) if offset == 0 else range(1, n - 1, 2)
        for j, s in enumerate(starts):
            suffix = f"#{j}" if offset == 0 else f"#{j}b"
            chunks.append((doc_id + suffix, " ".join(sentences[s : s + 2])))
    return chunks


@lru_cache(maxsize=1)
def _all_chunks() -> tuple[tuple[str, str], ...]:
    return tuple(_pass(0) + _pass(1))


def max_chunks() -> int:
    return len(_all_chunks())


def load_chunks(n: int) -> list[tuple[str, str]]:
    """The first ``n`` (source_id, text) chunks, e.g. ``("scifact/4983#2", "...")``."""
    chunks = _all_chunks()
    if n > len(chunks):
        raise ValueError(f"only {len(chunks)} chunks are available, {n} were asked for")
    return list(chunks[:n])


def load_queries() -> list[str]:
    """Test-split queries of both datasets, interleaved, distinct, in a fixed order."""
    per: list[list[str]] = []
    for dataset in DATASETS:
        texts = {}
        with (BEIR / dataset / "queries.jsonl").open(encoding="utf-8") as fh:
            for line in fh:
                if line.strip():
                    row = json.loads(line)
                    texts[str(row["_id"])] = " ".join(row["text"].split())
        ids: list[str] = []
        with (BEIR / dataset / "qrels" / "test.tsv").open(encoding="utf-8", newline="") as fh:
            reader = csv.reader(fh, delimiter="\t")
            next(reader, None)  # header
            for row in reader:
                if row and row[0].strip() and row[0].strip() not in ids:
                    ids.append(row[0].strip())
        per.append([texts[i] for i in ids if texts.get(i)])
    out: list[str] = []
    seen: set[str] = set()
    for i in range(max(len(p) for p in per)):
        for queries in per:
            if i < len(queries) and queries[i] not in seen:
                seen.add(queries[i])
                out.append(queries[i])
    return out


if __name__ == "__main__":
    print("chunks available:", max_chunks(), " first pass:", len(_pass(0)))
    for cid, text in load_chunks(4):
        print(cid, "|", text[:100])
    q = load_queries()
    print("queries:", len(q), q[:3])
