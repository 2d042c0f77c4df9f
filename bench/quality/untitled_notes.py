"""The notes benchmark as an Obsidian-style vault: the same notes without their H1 title line.

Writes a copy of the notes corpus with each note's first ``# Title`` line (and the blank line
after it) removed, so a note's only title is its file name, as in Obsidian and similar tools.
Then evaluate it as the notes benchmark:

    python -m bench.quality.untitled_notes /tmp/untitled/corpus
    nbmemory eval notes --corpus /tmp/untitled/corpus --queries bench/data/notes-queries.jsonl \\
        --split all --configs default,bm25,vector --torch-threads 2 --json bench/results/notes-untitled-no-titles.json

A one-off kept because the README's "Ingest" paragraph cites it; writes notes, no results.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from bench.lib.paths import NOTES_CORPUS as CORPUS


def untitled(text: str) -> str:
    """``text`` without its first H1 line and the blank line after it."""
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if line.startswith("# "):
            del lines[i]
            if i < len(lines) and not lines[i].strip():
                del lines[i]
            break
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="folder to write the untitled copy to (replaced)")
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    args = parser.parse_args(argv)
    shutil.rmtree(args.out, ignore_errors=True)
    count = 0
    for src in sorted(args.corpus.rglob("*.md")):
        dst = args.out / src.relative_to(args.corpus)
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_text(untitled(src.read_text(encoding="utf-8")), encoding="utf-8")
        count += 1
    print(f"wrote {count} notes without their H1 to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
