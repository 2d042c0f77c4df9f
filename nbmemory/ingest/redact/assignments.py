"""``password`` / ``token`` / ``api_key`` / ``secret`` assignments: Python, YAML, JSON, .env, shell,
INI/TOML, connection strings, and the heuristics that tell a credential from code or prose."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from nbmemory.ingest.redact.checks import ALNUM, PUBLIC_RE, Cand, classes, is_placeholder, mixed_case, rx
from nbmemory.ingest.redact.entropy import MAX_AVG_PIECE, PIECE_RE, avg_piece

_KEY_CHARS = ALNUM | frozenset("_.-")
_ASSIGN_RE = rx(
    r"(?P<kw>pass(?:word|wd|phrase)?|pwd|secret(?:[_.-]?key)?|token|api[_.-]?key|apikey"
    r"|access[_.-]?key|private[_.-]?key|auth[_.-]?key|signing[_.-]?key|encryption[_.-]?key"
    r"|master[_.-]?key)(?P<kq>[\"']?)\]?(?P<sep>[ \t]*(?:=>|=|:)[ \t]*)"
)
_VALUE_RE = rx(
    r"(?P<pre>[rRbBuU]{0,2})(?:\"(?P<dq>(?:[^\"\\\n]|\\.){0,512})\""
    r"|'(?P<sq>(?:[^'\\\n]|\\.){0,512})')"
    # A bare value stops at brackets: `token = client.login(password="...")` has two keys.
    r"|(?P<bare>[^\s\"'`=()\[\]{}][^\s\"'`()\[\]{}]{0,255})"
)
_ASSIGN_NEEDS = ("pass", "pwd", "secret", "token", "key")
# Keys that end in a keyword but never hold a credential: tokenizer special tokens, paging.
_DENY_KEY_RE = rx(
    r"(?:.*[_-])?(?:bos|eos|pad|unk|sep|cls|mask|start|end|eot|special|page|next|nextpage"
    r"|continuation|sync|max|min|num|image|audio|video|begin|stop|ignore|newline)[_-]?token"
    r"|.*public.*"
)
_IDENT_RE = rx(r"[A-Za-z_][A-Za-z0-9_]*")
# An attribute or import path: config.password, process.env.TOKEN, pkg.module:Class
_DOTTED_RE = rx(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+(?::[A-Za-z_][A-Za-z0-9_.]*)?")
# `password: SecretStr` is a type annotation, not YAML.
_TYPE_NAME_RE = rx(r"(?:[A-Z]+[a-z]+)+[A-Z]*")
# What may precede KEY=value at the start of a line in .env, shell, Dockerfile, compose files.
_LINE_PREFIX_RE = rx(
    r"[ \t]*-[ \t]+[\"']?"
    r"|[ \t]*(?:export|set|setx|ENV|env|declare -x|local|readonly)[ \t]+"
    r"|[\"']?"
)
_VOWEL_RE = rx(r"[AEIOUYaeiouy]")
_SECTION_RE = rx(r"\[\[?[A-Za-z0-9_. :\"'-]{1,100}\]\]?")
_INI_LINE_RE = rx(r"[A-Za-z0-9_.\"'-]{1,100}[ \t]*[=:][ \t]*\S.{0,1000}")
# Another key=value pair before this one on the line: a libpq or ODBC connection string.
_KV_BEFORE_RE = rx(r"(?:^|[ \t\"'])[A-Za-z_][A-Za-z0-9_]*=[^\s=,()]+[ \t]+$")
_CODE_START = tuple("$%@*&!|>\\<")
_PATH_RE = rx(r"~?/|\.\.?/|[A-Za-z]:\\")
_NAME_WORD_RE = rx(r"(?i:token|secret|api[_.-]?key|password)")


def assignment_candidates(text: str, low: str) -> Iterator[Cand]:
    """Values assigned to password, token, api_key and secret keys, as ``password-assignment``."""
    if not any(n in low for n in _ASSIGN_NEEDS):
        return
    consumed = 0
    for m in _ASSIGN_RE.finditer(low):
        kw_start, kw_end = m.span("kw")
        if kw_start < consumed:
            continue  # inside the previous value: each character is examined once
        # The key is the identifier that ends with the keyword: DB_PASSWORD, --api-key, x.token.
        key_start = kw_start
        limit = max(0, kw_start - 64)
        while key_start > limit and text[key_start - 1] in _KEY_CHARS:
            key_start -= 1
        kw = m.group("kw")
        if kw in ("pass", "pwd"):
            if key_start == kw_start and kw == "pass" and not _pass_key(text, key_start, m.end()):
                continue  # "first pass: ..." is prose; DB_PASS, smtp_pass, `pass: "..."` are keys
            before = text[kw_start - 1] if key_start < kw_start else ""
            if before and not (before in "_.-" or (before.islower() and text[kw_start].isupper())):
                continue  # bypass, compass
        if _DENY_KEY_RE.fullmatch(low[key_start:kw_end].lstrip("-").rsplit(".", 1)[-1]):
            continue
        kq = m.group("kq")
        opener = text[key_start - 1] if key_start > 0 else ""
        key_quoted = bool(kq) and opener == kq
        raw_sep = m.group("sep")
        sep = raw_sep.strip()
        if sep == ":" and not key_quoted and not raw_sep.endswith((" ", "\t")):
            continue  # `token:abc` is a URL or a label, not a mapping
        vm = _VALUE_RE.match(text, m.end())
        if vm is None:
            continue
        consumed = vm.end()
        strong = kw.startswith("pass") or kw == "pwd"
        bare = vm.group("bare")
        if bare is None:
            group = "dq" if vm.group("dq") is not None else "sq"
            value = vm.group(group)
            if "r" in vm.group("pre").lower():
                continue  # a raw string: a regex, not a credential
            if _quoted_ok(value, strong):
                yield vm.start(group), vm.end(group), "password-assignment"
            continue
        if opener and opener in "?&;":
            bare = re.split(r"[&#]", bare, maxsplit=1)[0]
        value = bare.rstrip(",;")
        # `f(password=pw)`, `password=pw,`: a keyword argument, not a .env line ("pw;" ends a DSN pair)
        trailing = bare.endswith(",") or text[vm.end() : vm.end() + 1] in (")", "]", "}")
        context = _BareContext(text, key_start, key_quoted, sep, raw_sep != sep, trailing)
        if _bare_ok(value, strong, context, vm.start("bare")):
            yield vm.start("bare"), vm.start("bare") + len(value), "password-assignment"


@dataclass(frozen=True)
class _BareContext:
    text: str
    key_start: int
    key_quoted: bool
    sep: str
    spaced: bool
    trailing: bool


def common_ok(value: str, strong: bool) -> bool:
    """The checks every assigned value passes; ``strong`` keys (password, pwd) ask for less."""
    if len(value) < (6 if strong else 8) or "://" in value or "==" in value:
        return False
    if _PATH_RE.match(value) or PUBLIC_RE.match(value) or is_placeholder(value):
        return False
    if strong:
        return True
    # Weak keys (token, secret, api_key) need a value that reads neither as a plain word nor as
    # the name of a setting ("s3.session-token").
    return classes(value) >= 2 and _NAME_WORD_RE.search(value) is None


def _quoted_ok(value: str, strong: bool) -> bool:
    if any(c.isspace() for c in value) or "${" in value or "%(" in value:
        return False
    if ("{" in value and "}" in value) or ("[" in value and "]" in value):
        return False  # a format template or a regex
    return not _code_path(value) and common_ok(value, strong)


def _pass_key(text: str, key_start: int, value_start: int) -> bool:
    """True if a bare ``pass`` is a mapping key: its value is quoted, or it starts a YAML line."""
    if text[value_start : value_start + 1] in ("'", '"'):
        return True
    line_start = text.rfind("\n", max(0, key_start - 200), key_start) + 1
    return text[line_start:key_start].strip() in ("", "-") and text[key_start:value_start].rstrip().endswith(
        ":"
    )


def _code_path(value: str) -> bool:
    """True for an attribute or import path (``config.password``); False for ``hym1XyVo6Gc.BC``."""
    if _DOTTED_RE.fullmatch(value) is None:
        return False
    if not (mixed_case(value) or classes(value) >= 3):
        return True  # self.pw2, foo.bar
    # Names are made of words: long pieces, each with a vowel ("CxecLjqp96.nw" is not).
    pieces = [p for p in PIECE_RE.findall(value) if len(p) >= 3 and p.isalpha()]
    return avg_piece(value) >= MAX_AVG_PIECE and all(_VOWEL_RE.search(p) for p in pieces)


def _ini_section(text: str, line_start: int) -> bool:
    """True if the line at line_start is in an INI/TOML section: ``[name]`` above, then only
    ``key = value`` lines, comments and blank lines."""
    end = line_start
    for _ in range(30):
        if end <= 0:
            return False
        start = text.rfind("\n", max(0, end - 1 - 512), end - 1) + 1
        line = text[start : end - 1].strip()
        if _SECTION_RE.fullmatch(line):
            return True
        if line and not line.startswith(("#", ";")) and not _INI_LINE_RE.fullmatch(line):
            return False
        end = start
    return False


def _random_literal(value: str) -> bool:
    """An identifier no one would name a variable: long, mixed case with digits, no words."""
    return len(value) >= 16 and classes(value) >= 3 and avg_piece(value) < MAX_AVG_PIECE


def _password_like(value: str) -> bool:
    """Letters of both cases and digits, in short runs: ``Velvet2325_``, ``t9BDc63ZgCJ.n2``."""
    return classes(value) >= 3 and avg_piece(value) < MAX_AVG_PIECE + 1


def _bare_ok(value: str, strong: bool, ctx: _BareContext, start: int) -> bool:
    if not value or value.startswith(_CODE_START):
        return False
    if ctx.text[start + len(value) : start + len(value) + 1] in ("(", "["):
        return False  # a call or a subscript: os.getenv("X"), os.environ["X"]
    if not strong and value.isdigit():
        return False  # max_token = 1000000
    if _DOTTED_RE.fullmatch(value) and (
        _code_path(value) or ctx.trailing or (ctx.sep == "=" and ctx.spaced and not _password_like(value))
    ):
        return False  # config.password, process.env.TOKEN, f(password=self.pw)
    if not common_ok(value, strong):
        return False
    if not _IDENT_RE.fullmatch(value) or _random_literal(value):
        return True
    # An identifier is a variable reference in code, a literal in .env / YAML / shell.
    text, key_start = ctx.text, ctx.key_start
    if ctx.trailing:
        return False  # `api_key=api_key_value,` is a keyword argument
    if ctx.sep == "=":
        line_start = text.rfind("\n", max(0, key_start - 200), key_start) + 1
        if ctx.spaced:
            # `password = hunter2` is Python, unless the line is in an INI or TOML section.
            return _ini_section(text, line_start) and text[line_start:key_start].strip() == ""
        if text[key_start] == "-" or text[key_start - 1 : key_start] in ("?", "&", ";"):
            return True  # --password=..., ?token=...
        if line_start == 0 and key_start > 200:
            return False
        prefix = text[line_start:key_start]
        if _LINE_PREFIX_RE.fullmatch(prefix) or _KV_BEFORE_RE.search(prefix):
            return True  # .env and shell lines; libpq DSNs: "host=db user=app password=..."
        key = text[key_start:start].rstrip("= \t")
        # Mid-line after words: `docker run -e PASSWORD=...`, a log line `... password=Velvet2325_`.
        in_prose = prefix.endswith((" ", "\t")) and bool(prefix.strip())
        return in_prose and (key.isupper() or strong or _password_like(value))
    if ctx.sep == ":":
        if ctx.key_quoted or _TYPE_NAME_RE.fullmatch(value):
            return False
        end = start + len(value)
        newline = text.find("\n", end, end + 256)
        rest = text[end : newline if newline >= 0 else end + 256].strip()
        return not rest or rest.startswith("#")
    return False
