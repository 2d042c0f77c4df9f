"""MkDocs hooks (mkdocs.yml `hooks:`): add the generated pages of tools/docs_pages.py to the site
at build time, so they are never stale and never committed."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def on_files(files: Files, config: Any) -> Files:
    from tools.docs_pages import generate

    for path, content in generate().items():
        files.append(File.generated(config, path, content=content))
    return files
