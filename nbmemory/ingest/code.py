"""Source-code chunker: Python by its syntax tree, other languages by definition lines.

Python (``.py``/``.pyi``) is cut at top-level functions and classes found with `ast`;
the module-level code between them (docstring, imports, statements) forms chunks of
its own, so every non-blank line lands in exactly one chunk.  A class too long for
one chunk is cut at its methods, a function too long at blank lines.

Other languages, Python that does not parse, and Python files too big to parse fast
are cut at lines that start a definition at column 0 (regexes per language family)
and then at blank lines; tiny neighbouring definitions are packed together.
"""

from __future__ import annotations

import ast
import os
import re
from bisect import bisect_right
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from nbmemory.ingest.text import Piece, clean_lines, clean_text, span_pieces
from nbmemory.ingest.types import ChunkDraft

__all__ = ["AST_MAX_CHARS", "chunk_code"]

# ast.parse builds every node of the source into objects; bigger files use the regex path.
AST_MAX_CHARS = 1_000_000
SEP = " > "

_DEF_TYPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)

# Definition regexes, matched at column 0; "[ \t]" keeps every match on one line.
_COMMON = [
    # JavaScript / TypeScript / Lua / Julia / PHP functions.
    r"(?:export[ \t]+)?(?:default[ \t]+)?(?:local[ \t]+)?(?:async[ \t]+)?function\b"
    r"[ \t]*\*?[ \t]*([\w$.:]+)?",
    r"(?:export[ \t]+)?(?:default[ \t]+)?(?:declare[ \t]+)?(?:(?:abstract|final|sealed"
    r"|data|open|public|private|internal|static|partial)[ \t]+)*class[ \t]+([\w$]+)",
    r"(?:export[ \t]+)?(?:const|let|var)[ \t]+([\w$]+)[ \t]*(?::[^=\n]*)?=[ \t]*"
    r"(?:async[ \t]+)?(?:function\b|(?:\([^)\n]*\)|[\w$]+)[ \t]*(?::[^=\n]*)?=>)",
    r"(?:export[ \t]+)?(?:declare[ \t]+)?(?:interface|type|enum|namespace|module)"
    r"[ \t]+([\w$.]+)",
    r"export\b(?:[ \t]+default)?(?:[ \t]+[\w$]+)*?[ \t]+([\w$]+)?",
    # Python / Ruby / Scala.
    r"(?:async[ \t]+)?def[ \t]+([\w.?!]+)",
    # Go / Swift.
    r"func[ \t]+(?:\([^)\n]*\)[ \t]*)?(\w+)",
    # Rust.
    r"(?:pub(?:\([^)\n]*\))?[ \t]+)?(?:async[ \t]+)?(?:unsafe[ \t]+)?(?:const[ \t]+)?"
    r"(?:extern[ \t]+\"[^\"\n]*\"[ \t]+)?fn[ \t]+(\w+)",
    r"(?:pub(?:\([^)\n]*\))?[ \t]+)?(?:unsafe[ \t]+)?(?:struct|enum|trait|mod|union)"
    r"[ \t]+(\w+)",
    r"macro_rules![ \t]*(\w+)",
    r"(?:unsafe[ \t]+)?impl\b(?:<[^>\n]*>)?[ \t]*([\w:]+(?:<[^>\n]*>)?"
    r"(?:[ \t]+for[ \t]+[\w:]+)?)",
    # Kotlin / Swift / Scala / Java / C# type and function declarations.
    r"(?:(?:public|private|protected|internal|open|data|sealed|abstract|final|static"
    r"|inline|suspend|override|partial|case|fileprivate)[ \t]+)*"
    r"(?:fun|object|interface|struct|enum|record|trait|protocol|extension)[ \t]+(\w+)",
    r"(?:mutable[ \t]+)?struct[ \t]+(\w+)",
    r"macro[ \t]+(\w+)",
]
_C_LIKE = [
    r"(?:typedef[ \t]+)?(?:struct|union|enum|class|namespace)[ \t]+(\w+)",
    r"template[ \t]*<",
    # A function definition: a type, then a name and "(" on a line with no ";".
    r"(?!(?:if|for|while|switch|return|else|do|case|goto|typedef|using)\b)"
    r"[A-Za-z_][\w \t*&:<>,~\[\]]*?[ \t*&]\**(~?[A-Za-z_][\w:~]*)[ \t]*\([^;\n]*$",
]
_SQL = [
    r"(?i:(?:create|alter|drop)[ \t]+(?:or[ \t]+replace[ \t]+)?(?:temp(?:orary)?[ \t]+)?"
    r"(?:unique[ \t]+)?(?:materialized[ \t]+)?(?:table|view|function|procedure|index"
    r"|trigger|schema|type|sequence|extension|database)[ \t]+"
    r"(?:if[ \t]+(?:not[ \t]+)?exists[ \t]+)?([\w.\"`]+))",
    r"(?i:(?:insert[ \t]+into|update|delete[ \t]+from|select|with|begin|grant|copy)\b)",
]
_SHELL = [
    r"function[ \t]+([\w:.-]+)",
    r"([\w:.-]+)[ \t]*\(\)",
]
_R = [r"([\w.]+)[ \t]*(?:<-|=)[ \t]*function\b"]
_TOML = [r"\[\[?[ \t]*([^\]\n]+?)[ \t]*\]\]?"]
_YAML = [r"([A-Za-z_][\w.-]*)[ \t]*:(?:[ \t]|$)", r"---"]

_FAMILIES: dict[str, list[str]] = {
    ".c": _C_LIKE,
    ".h": _C_LIKE,
    ".cc": _C_LIKE,
    ".cpp": _C_LIKE,
    ".cxx": _C_LIKE,
    ".hh": _C_LIKE,
    ".hpp": _C_LIKE,
    ".hxx": _C_LIKE,
    ".cs": _C_LIKE,
    ".java": _C_LIKE,
    ".sql": _SQL,
    ".sh": _SHELL,
    ".bash": _SHELL,
    ".zsh": _SHELL,
    ".r": _R,
    ".toml": _TOML,
    ".yaml": _YAML,
    ".yml": _YAML,
}
# Languages whose column-0 lines are not code definitions of the common kinds.
_DATA_EXTS = frozenset({".sql", ".toml", ".yaml", ".yml"})
# Comment, doc-comment, decorator and attribute lines stay with the definition below.
_LEADING = ("#", "//", "/*", "*", "--", ";", "@")


# First words of the common definition forms; gating on them makes lines that start
# any other way fail after a character or two, so a scan stays linear in the file.
_KEYWORDS = [
    "export",
    "default",
    "local",
    "async",
    "function",
    "class",
    "declare",
    "abstract",
    "final",
    "sealed",
    "data",
    "open",
    "public",
    "private",
    "internal",
    "static",
    "partial",
    "const",
    "let",
    "var",
    "interface",
    "type",
    "enum",
    "namespace",
    "module",
    "def",
    "func",
    "pub",
    "unsafe",
    "fn",
    "struct",
    "trait",
    "mod",
    "union",
    "macro_rules",
    "impl",
    "protected",
    "inline",
    "suspend",
    "override",
    "case",
    "fileprivate",
    "fun",
    "object",
    "record",
    "protocol",
    "extension",
    "mutable",
    "macro",
]


def _trie(words: Sequence[str]) -> str:
    """A regex matching exactly ``words``, shaped as a trie so a miss fails fast."""
    root: dict[str, Any] = {}
    for word in words:
        node = root
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}

    def build(node: dict[str, Any]) -> str:
        alts = [re.escape(c) + build(child) for c, child in sorted(node.items()) if c]
        if not alts:
            return ""
        body = alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"
        return f"(?:{body})?" if "" in node else body

    return build(root)


@lru_cache(maxsize=32)
def _patterns(ext: str) -> tuple[re.Pattern[str], re.Pattern[str]]:
    """(match at a line start, find line starts) for the definitions of ``ext``."""
    parts = [f"(?:{p})" for p in _FAMILIES.get(ext, [])]
    if ext not in _DATA_EXTS:
        common = "|".join(f"(?:{p})" for p in _COMMON)
        parts.append(rf"(?={_trie(_KEYWORDS)}\b)(?:{common})")
    body = "(?:" + "|".join(parts) + ")"
    # A literal "\n" prefix lets the regex engine jump from line start to line start.
    return re.compile(body), re.compile("\n" + body)


def _is_comment(line: str) -> bool:
    return line.lstrip().startswith("#")


def _is_leading(line: str) -> bool:
    stripped = line.strip()
    return bool(stripped) and stripped.startswith(_LEADING)


def _heading(name: str, qual: str | None) -> str:
    return f"{name}{SEP}{qual}" if qual else name


def _drafts(pieces: Sequence[Piece], heading: str) -> list[ChunkDraft]:
    return [
        ChunkDraft(
            text=p.text,
            heading=heading,
            kind="code",
            line_start=p.line_start,
            line_end=p.line_end,
        )
        for p in pieces
    ]


def _python_chunks(name: str, lines: Sequence[str], tree: ast.Module, max_chars: int) -> list[ChunkDraft]:
    """Chunk parsed Python by top-level definitions (classes by method if too big)."""
    chunks: list[ChunkDraft] = []

    def run(lo: int, hi: int, qual: str | None) -> None:
        """Chunk lines lo..hi (inclusive) that belong to no definition."""
        if lo <= hi:
            pieces = span_pieces("\n".join(lines[lo : hi + 1]), lo + 1, max_chars)
            chunks.extend(_drafts(pieces, _heading(name, qual)))

    def definition(node: ast.stmt, lo: int, hi: int, qual: str) -> None:
        text = "\n".join(lines[lo : hi + 1])
        if len(text) <= max_chars:
            chunks.extend(_drafts([Piece(text, lo + 1, hi + 1)], _heading(name, qual)))
        elif isinstance(node, ast.ClassDef):
            container(node.body, lo, hi, qual)
        else:
            run(lo, hi, qual)

    def container(body: Sequence[ast.stmt], lo: int, hi: int, qual: str | None) -> None:
        """Chunk lines lo..hi holding ``body``: definitions apart, the rest in runs."""
        regions: list[tuple[int, int, ast.stmt, str]] = []
        prev_end = lo - 1
        for k, stmt in enumerate(body):
            end = (stmt.end_lineno or stmt.lineno) - 1
            if isinstance(stmt, _DEF_TYPES):
                start = min([stmt.lineno] + [d.lineno for d in stmt.decorator_list]) - 1
                start = max(start, prev_end + 1)
                # Comments right above a definition document it.
                while start - 1 > prev_end and _is_comment(lines[start - 1]):
                    start -= 1
                # Deeper-indented comments right after the body still belong to it.
                limit = _next_start(body, k, hi)
                j = end + 1
                while j <= limit and (
                    not lines[j] or (_is_comment(lines[j]) and _indent(lines[j]) > stmt.col_offset)
                ):
                    j += 1
                while j - 1 > end and not lines[j - 1]:
                    j -= 1
                end = j - 1
                child = f"{qual}.{stmt.name}" if qual else stmt.name
                regions.append((start, end, stmt, child))
            prev_end = max(prev_end, end)
        cursor = lo
        for start, end, stmt, child in regions:
            run(cursor, start - 1, qual)
            definition(stmt, start, end, child)
            cursor = end + 1
        run(cursor, hi, qual)

    container(tree.body, 0, len(lines) - 1, None)
    return chunks


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _next_start(body: Sequence[ast.stmt], k: int, hi: int) -> int:
    """Last line index a definition at ``body[k]`` may extend to."""
    if k + 1 >= len(body):
        return hi
    nxt = body[k + 1]
    first = nxt.lineno
    if isinstance(nxt, _DEF_TYPES) and nxt.decorator_list:
        first = min(first, *(d.lineno for d in nxt.decorator_list))
    return first - 2


class _Lines:
    """Turns increasing string offsets into 1-based line numbers in linear time."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.offset = 0
        self.line = 1

    def at(self, offset: int) -> int:
        self.line += self.text.count("\n", self.offset, offset)
        self.offset = offset
        return self.line


def _generic_chunks(name: str, text: str, ext: str, max_chars: int) -> list[ChunkDraft]:
    """Chunk at column-0 definition lines, then blank lines, packing tiny neighbours.

    Neighbouring definitions whose total stays under half the cap share a chunk, so
    YAML keys or one-line functions do not become one chunk each.
    """
    pattern, finder = _patterns(ext)
    n = len(text)
    bounds = [0]
    bounds.extend(m.start() + 1 for m in finder.finditer(text))
    count = len(bounds)
    half = max(1, max_chars // 2)
    lines = _Lines(text)
    chunks: list[ChunkDraft] = []

    def attached(k: int) -> int:
        """Start offset of boundary k, moved up over comment/decorator lines."""
        if k >= count:
            return n
        off = bounds[k]
        floor = bounds[k - 1] if k > 0 else 0
        while off > floor:
            prev = text.rfind("\n", 0, off - 1) + 1
            if prev <= floor or not _is_leading(text[prev : off - 1]):
                break
            off = prev
        return off

    def label(k: int) -> str | None:
        m = pattern.match(text, bounds[k])
        if m is None:
            return None
        return next((g.strip() for g in m.groups() if g and g.strip()), None)

    def emit(lo: int, hi: int, names: Sequence[str]) -> None:
        qual = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
        pieces = span_pieces(text[lo:hi], lines.at(lo), max_chars)
        chunks.extend(_drafts(pieces, _heading(name, qual)))

    k = 0
    start = 0
    while k < count:
        nxt = attached(k + 1)
        if nxt - start > half:
            # A definition of its own (split at blank lines if over the cap).
            first = label(k)
            emit(start, nxt, [first] if first else [])
            k, start = k + 1, nxt
            continue
        # Small definitions: take all that end within half the cap from here.
        e = bisect_right(bounds, start + half) - 1
        if e == count - 1 and n - start <= half:
            e = count
        e = max(e, k + 1)
        end = attached(e)
        names: list[str] = []
        for j in range(k, e):
            found = label(j)
            if found:
                names.append(found)
            if len(names) > 3:
                break
        emit(start, end, names)
        k, start = e, end
    return chunks


def chunk_code(path: str, text: str, max_chars: int) -> list[ChunkDraft]:
    """Chunk source code by definitions.

    Parameters
    ----------
    path:
        The file's path; its extension picks the language and its base name starts
        every heading.
    text:
        Decoded source with ``\\n`` line ends.
    max_chars:
        Size cap of each chunk's text.

    Returns
    -------
    list of ChunkDraft
        Chunks of kind ``"code"`` with 1-based inclusive line ranges.  Headings are
        ``"mod.py"`` for module-level code, ``"mod.py > name"`` for a definition and
        ``"mod.py > Class.method"`` for a method of a class that was split.  Python
        that does not parse (or is over `AST_MAX_CHARS`) goes to the regex chunker
        instead of raising.
    """
    name = os.path.basename(path)
    ext = os.path.splitext(name)[1].lower()
    # ast counts a lone "\r" as a line break, which would shift line numbers.
    if ext in (".py", ".pyi") and len(text) <= AST_MAX_CHARS and "\r" not in text:
        try:
            tree = ast.parse(text, filename=name)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            tree = None
        if tree is not None:
            return _python_chunks(name, clean_lines(text), tree, max_chars)
    return _generic_chunks(name, clean_text(text), ext, max_chars)
