"""Time on inputs built to be slow: 5 MB markdown, code and log files through the chunker, and
megabyte-long adversarial strings through secret redaction (catastrophic regex backtracking would
show here as seconds or minutes). The tests check what these inputs give; this prints how long
they take. Prints JSON (``--out`` also writes it).

    python -m bench.ingest.large_inputs
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from nbmemory.eval.report import write_json
from nbmemory.ingest.chunking import chunk_file
from nbmemory.ingest.redact import redact
from tests.ingest.test_chunking import large_files
from tests.ingest.test_redact import ADVERSARIAL


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    args = parser.parse_args()
    chunking = {}
    for path, data in large_files():
        started = time.process_time()
        chunks = chunk_file(path, data)
        chunking[path] = {
            "mb": round(len(data) / 1e6, 1),
            "chunks": len(chunks),
            "cpu_s": time.process_time() - started,
        }
    redaction = {}
    for name, text in sorted(ADVERSARIAL.items()):
        started = time.perf_counter()
        redact(text)
        redaction[name] = {"chars": len(text), "wall_s": time.perf_counter() - started}
    result = {
        "command": "python -m bench.ingest.large_inputs",
        "load_1min": os.getloadavg()[0],
        "chunking": chunking,
        "redaction": redaction,
    }
    print(json.dumps(result, indent=2))
    if args.out:
        write_json(args.out, result)


if __name__ == "__main__":
    main()
