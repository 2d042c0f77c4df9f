"""How a magic's line becomes its arguments.

IPython hands each ``%mem*`` magic its line as one string; this module turns it into the
magic's arguments. Options come before or after the query (``%memsearch token rotation -k 5``
or ``%memsearch -k 5 token rotation``); a pasted command keeps the flags that are not the magic's
own, and after a ``--`` that comes before the query everything is the query (a ``--`` inside
the query is text: ``git checkout stash@{1} -- README.md``). Quotes around a value or a one-piece
query are dropped, an apostrophe inside a word (``don't``) is text, and the trailing ``;`` that
silences the output is not part of the query. ``%remember`` takes its options first and the rest
of the line, verbatim, as its text.

Here too: the option specs the searching magics share, the checks on ``-k`` and on queries that
are empty or hold no word (``?!...``), and :func:`as_usage_errors`, which shows nbmemory's
errors as a message, not a traceback.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic_arguments import parse_argstring

from nbmemory.errors import NbMemoryError
from nbmemory.options import CHUNKS, KINDS, RETRIEVERS, Option, check_k, filter_options, magic_options
from nbmemory.search.prefix import require_words

# A word-internal apostrophe ("don't") is text, not the start of a quoted string.
_APOSTROPHE = re.compile(r"(?<=\w)'(?=\w)")
# Leading "--opt value" / "--opt=value" pairs of a line whose rest is free text (%remember).
_LEADING_OPTION = re.compile(
    r"""\s*(--?[A-Za-z][\w-]*)(?:=(?:"[^"]*"|'[^']*'|\S+)|\s+(?:"[^"]*"|'[^']*'|\S+))"""
)


@contextmanager
def as_usage_errors() -> Iterator[None]:
    """Turn nbmemory's own errors into UsageErrors: IPython shows the message, not a traceback."""
    try:
        yield
    except NbMemoryError as exc:
        raise UsageError(str(exc)) from exc


def parse_line(magic: Callable[..., Any], line: str) -> Any:
    """``parse_argstring``, forgiving unbalanced apostrophes in words like ``don't``."""
    try:
        return _unquote(parse_argstring(magic, line))
    except ValueError:
        pass
    try:
        return _unquote(parse_argstring(magic, _APOSTROPHE.sub(r"\\'", line)))
    except ValueError as exc:
        raise UsageError(f"{exc} in {line!r}: close the quote, or put the words in double quotes") from None


def _unquote(args: Any) -> Any:
    """Drop the quotes around values: IPython splits non-POSIX, so ``--ns "my notes"`` arrives as
    ``'"my notes"'`` and would name a namespace with quotes in it."""

    def strip(value: Any) -> Any:
        if isinstance(value, str) and len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            return value[1:-1]
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    for name, value in vars(args).items():
        setattr(args, name, strip(value))
    return args


def without_semicolon(line: str) -> str:
    """The line without the trailing ``;`` that silences the output (IPython passes it on)."""
    stripped = line.rstrip()
    return stripped[:-1] if stripped.endswith(";") else line


def split_leading_options(line: str) -> tuple[str, str]:
    """``"--tag ops Some text"`` -> ``("--tag ops", "Some text")``; the text is kept verbatim."""
    pos = 0
    while True:
        match = _LEADING_OPTION.match(line, pos)
        if match is None:
            break
        pos = match.end()
    rest = line[pos:].strip()
    if rest.startswith("-- "):
        rest = rest[3:]
    return line[:pos].strip(), rest


# The search filters every searching magic takes, as one argument group.
_FILTERS = filter_options(namespace_default="MemoryMagics.namespace, else all")
filter_arguments = magic_options(*_FILTERS, group="filters")
K = Option("-k", type=int, default=None, help="number of hits (default: MemoryMagics.top_k)")
EXPLAIN = Option("--explain", action="store_true", help="also show the ranking trace, stage by stage")
JSON = Option("--json", action="store_true", help="print the hits as JSON instead of a table")
BUDGET = Option(
    "--budget", type=int, default=None, help="most tokens the block may take (default: MemoryMagics.context_budget)"
)
CONTEXT_K = Option("-k", type=int, default=None, help="hits considered (default: MemoryMagics.top_k)")
START_NS = Option("--ns", help="start with this namespace selected")
START_KIND = Option("--kind", action="append", choices=KINDS, help="start with this kind selected (repeatable)")
SEARCH_OPTIONS = (K, *_FILTERS, RETRIEVERS, CHUNKS, EXPLAIN, JSON)
CONTEXT_OPTIONS = (BUDGET, CONTEXT_K, *_FILTERS)
QUERY_HELP = (
    "words to search for, the rest of the line verbatim (quotes optional): a pasted command with "
    "its flags is searched as it is; options nbmemory knows are taken wherever they stand, and "
    "after a -- that comes before the query everything is the query"
)
# Actions whose option takes no value.
_NO_VALUE = ("store_true", "store_false", "count")


def _tokens(line: str) -> list[tuple[str, int, int]]:
    """``(text, start, end)`` of each blank-separated token; a quote that opens a token (or a
    value after ``=``) runs to its closing quote, blanks included; an unclosed one is a character."""
    out = []
    i, n = 0, len(line)
    while i < n:
        if line[i].isspace():
            i += 1
            continue
        start = i
        while i < n and not line[i].isspace():
            if line[i] in "\"'" and (i == start or line[i - 1] == "="):
                close = line.find(line[i], i + 1)
                if close != -1:
                    i = close + 1
                    continue
            i += 1
        out.append((line[start:i], start, i))
    return out


def _strip_quotes(text: str) -> str:
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1]
    return text


def parse_query_line(magic: Callable[..., Any], line: str, options: Iterable[Option]) -> Any:
    """A query magic's line: the options of ``options`` wherever they stand (and before ``--``),
    the rest of the line, verbatim, as ``args.query`` (a string).

    A pasted shell command keeps its flags (``git reset --hard HEAD~``): a token is an option
    only when it is one of the magic's own, spelled out; a query that is one quoted string loses
    its quotes. A ``--`` before any word of the query ends the options: everything after it is
    the query, options of the magic's own included. A ``--`` after a word of the query is a word
    of it (``git checkout stash@{1} -- README.md`` is searched whole).
    """
    takes_value = {flag: o.settings.get("action") not in _NO_VALUE for o in options for flag in o.flags}
    tokens = _tokens(line)
    argv: list[str] = []
    runs: list[list[int]] = []  # runs of consecutive query tokens, by index
    tail = ""
    i = 0
    while i < len(tokens):
        text = tokens[i][0]
        flag, eq, value = text.partition("=")
        short = text[:2] if len(text) > 2 and not text.startswith("--") and text[2].isdigit() else ""
        if text == "--" and not runs:
            tail = line[tokens[i][2] :].strip()
            break
        if flag in takes_value and (eq == "" or takes_value[flag]):
            argv.append(flag)
            if takes_value[flag]:
                if eq:
                    argv.append(_strip_quotes(value))
                elif i + 1 < len(tokens):
                    i += 1
                    argv.append(_strip_quotes(tokens[i][0]))
        elif short and takes_value.get(short):
            argv += [short, text[2:]]  # -k5
        elif runs and runs[-1][-1] == i - 1:
            runs[-1].append(i)
        else:
            runs.append([i])
        i += 1
    pieces = [line[tokens[run[0]][1] : tokens[run[-1]][2]] for run in runs] + ([tail] if tail else [])
    query = " ".join(pieces)
    only = _tokens(query)
    if len(only) == 1 and not tail:
        query = _strip_quotes(query)
    try:
        args = magic.parser.parse_args(argv)  # type: ignore[attr-defined]
    except UsageError as exc:
        raise UsageError(
            f"{exc}. To search for text that looks like an option, put it after -- "
            f"(%{magic.__name__} -k 5 -- {' '.join(argv) or '--flag'})"
        ) from None
    args.query = query
    return args


def checked_k(value: int | None, default: int) -> int:
    with as_usage_errors():
        return check_k(value, default)


def ids_line(ids: list[int], most: int = 20) -> str:
    """``12, 13, 14``; past ``most`` ids, ``... and 480 more``."""
    more = f" and {len(ids) - most} more" if len(ids) > most else ""
    return ", ".join(map(str, ids[:most])) + more


def joined_words(words: list[str] | str, what: str, example: str) -> str:
    """The words given, as one string; a UsageError when there are none, or (for a query) when
    they hold nothing to search for (no letter or digit)."""
    text = (words if isinstance(words, str) else " ".join(words)).strip()
    if not text:
        raise UsageError(f"no {what} given: try {example}")
    if what == "query":
        with as_usage_errors():
            require_words(text)
    return text


def plural(n: int, word: str) -> str:
    """``1 hit``, ``3 hits``."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"
