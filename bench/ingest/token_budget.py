"""How many tokens each way of making passage vectors must feed the model, against one bare pass
over the same chunks: the floor under the index-speed goal (issue 28: indexing at no more than
1.2 times one bare pass, passages included).

    python -m bench.ingest.token_budget [--corpus DIR] [--out FILE]

The notes are chunked as ``nbmemory index`` chunks them (into a new store, with the fake embedder:
no model pass), and every text the bundled model would read is tokenized by its own tokenizer
(word pieces with the two special tokens, cut at the model's ``max_seq_length``, as the model
cuts them). Counted:

* ``bare pass``: each chunk's embedding text (heading and text), cut at ``max_seq_length``: what
  ``index_speed``'s bare pass reads.
* ``every token once``: each chunk's whole embedding text, uncut. Any method that gives a window
  past the first ``max_seq_length`` tokens a vector made from that window's own tokens (late
  pooling included) reads at least this much; its ratio to the bare pass is the floor of such a
  method's model work.
* ``windows``: the default (``NBMEMORY_PASSAGE_METHOD=windows``): the bare pass plus each sentence
  window's own embedding text (:func:`nbmemory.store.passages.texts_of`), each cut at
  ``max_seq_length``.

Token counts, not seconds: a forward pass costs a little more than linear in its tokens
(attention), so the ratios of seconds (``bench/results/index-speed.json``) sit near these.
Writes ``--out`` (default ``bench/results/token-budget.json``).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from bench.lib.measure import log
from bench.lib.paths import NOTES_CORPUS, RESULTS
from nbmemory import Memory
from nbmemory.config import Settings
from nbmemory.embed import FakeEmbedder
from nbmemory.embed.sentence import bundled_model_path, quiet_transformers
from nbmemory.eval.report import write_json
from nbmemory.store import passages
from nbmemory.store.chunks import embedding_text

OUT = RESULTS / "token-budget.json"


def chunk_rows(corpus: Path) -> list[tuple[str, str, str]]:
    """(heading, text, kind) of every chunk ``nbmemory index`` makes of ``corpus``."""
    # Passages off: the fake embedder's windows are not what is counted here.
    fake, settings = FakeEmbedder(dim=32, tag="budget"), Settings(passages=False)
    with tempfile.TemporaryDirectory() as folder, Memory(Path(folder) / "m.duckdb", embedder=fake, settings=settings) as mem:
        mem.index(corpus)
        rows = mem.db.fetchall("SELECT heading, text, kind FROM chunks WHERE deleted_at IS NULL ORDER BY id")
    return [(h or "", t, k) for h, t, k in rows]


def budget(rows: list[tuple[str, str, str]]) -> dict[str, Any]:
    from sentence_transformers import SentenceTransformer

    with quiet_transformers():
        model = SentenceTransformer(str(bundled_model_path()), device="cpu")
    tokenizer, max_seq = model.tokenizer, int(model.max_seq_length)

    def lengths(texts: list[str]) -> list[int]:
        return [len(ids) for ids in tokenizer(texts, add_special_tokens=True, truncation=False)["input_ids"]]

    with quiet_transformers():  # not its notice that a text runs past the model's length
        chunks = lengths([embedding_text(h, t) for h, t, _ in rows])
        windows = lengths([w for h, t, k in rows for w in passages.texts_of(h, t, k)])
    bare = sum(min(n, max_seq) for n in chunks)
    every = sum(chunks)
    window_tokens = sum(min(n, max_seq) for n in windows)
    return {
        "max_seq_length": max_seq,
        "chunks": len(chunks),
        "chunks_past_max_seq_length": sum(n > max_seq for n in chunks),
        "windows": len(windows),
        "tokens": {
            "bare pass": bare,
            "every token once": every,
            "windows (default)": bare + window_tokens,
        },
        "ratio_to_bare_pass": {
            "every token once": round(every / bare, 3),
            "windows (default)": round((bare + window_tokens) / bare, 3),
        },
        "tokens_past_max_seq_length": every - bare,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", default=str(NOTES_CORPUS), help="notes folder (default %(default)s)")
    parser.add_argument("--out", default=str(OUT), help="write the JSON here (default %(default)s)")
    args = parser.parse_args()
    corpus = Path(args.corpus)
    log(f"chunking {corpus} (fake embedder: no model pass)")
    result = budget(chunk_rows(corpus))
    for name, tokens in result["tokens"].items():
        ratio = result["ratio_to_bare_pass"].get(name, 1.0)
        print(f"{name:<20} {tokens:>9,} tokens  {ratio:.3f}x the bare pass")
    print(f"{result['chunks_past_max_seq_length']} of {result['chunks']} chunks run past "
          f"{result['max_seq_length']} tokens; {result['windows']} windows")  # fmt: skip
    # Counts, not timings: no machine or load to record.
    write_json({"command": "python -m bench.ingest.token_budget", "corpus": str(corpus), **result}, args.out)
    log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
