"""Character-level checks every family of redaction rules shares: character classes, fillers,
placeholders, base64, and the candidate span type."""

from __future__ import annotations

import re

# A candidate: (start, end, kind).
Cand = tuple[int, int, str]

ALNUM = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
_FILLER_RE = re.compile(r"(.)\1{5,}|x{4}|X{4}|\*{3}|\.\.\.|\u2026|(?i:your)")


def rx(pattern: str, flags: int = 0) -> re.Pattern[str]:
    """Compile an ASCII-only pattern (``\\w``, ``\\d`` and case folding never match beyond ASCII)."""
    return re.compile(pattern, re.ASCII | flags)


def is_digit(c: str) -> bool:
    """True for an ASCII digit."""
    return "0" <= c <= "9"


def classes(value: str) -> int:
    """Count the character classes in value: lower, upper, digit, other ASCII symbol."""
    lower = upper = digit = other = 0
    for c in value:
        if "a" <= c <= "z":
            lower = 1
        elif "A" <= c <= "Z":
            upper = 1
        elif "0" <= c <= "9":
            digit = 1
        elif c not in "-_. " and c.isascii():
            other = 1
    return lower + upper + digit + other


def mixed_case(value: str) -> bool:
    """True if value has both lower- and upper-case ASCII letters."""
    return any("a" <= c <= "z" for c in value) and any("A" <= c <= "Z" for c in value)


def not_filler(value: str) -> bool:
    """False for documentation fillers such as ``ghp_xxxxxxxx`` or ``T000/B000/XXXXXXXX``."""
    return _FILLER_RE.search(value) is None


# --- placeholders ----------------------------------------------------------------------------

# Values that name a secret instead of being one (compared lower-cased, letters and digits only).
_PLACEHOLDER_TEXT = (
    "changeme changeit password passwd passphrase pass pw pwd mypassword mypass secret secrets "
    "token apitoken authtoken accesstoken apikey accesskey secretkey privatekey clientsecret "
    "credential credentials example sample placeholder redacted masked hidden dummy fake test "
    "testing none null nil undefined true false yes default empty notset unset todo tbd fixme "
    "required optional string str bytes secretstr secretbytes value foo bar baz foobar "
    "attribute property field parameter argument variable"
)
_PLACEHOLDER_WORDS = frozenset(_PLACEHOLDER_TEXT.split())
_PLACEHOLDER_RE = re.compile(
    r"""
    (?: <[^<>]*>                       # <your-password>
      | \{\{.*\}\} | \{%.*%\}          # {{ jinja }}
      | \$\{.*\} | \$\(.*\)            # ${VAR} $(cmd)
      | \$[A-Za-z_][A-Za-z0-9_]*       # $VAR
      | %\([A-Za-z_0-9]*\)[sdr] | %[sdr]
      | \{[A-Za-z_0-9.]*\}             # {name}
      | \[[A-Za-z_ |-]*\]              # [MASK] [PAD]
      | \|[A-Za-z_ -]*\|               # |NEWLINE|
      | [A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+  # DB_PASSWORD: the name of a secret, not its value
      | (.)\1*                         # xxxx ****
    )""",
    re.ASCII | re.VERBOSE,
)


def is_placeholder(value: str) -> bool:
    """True for values that stand for a secret without being one."""
    if not value or value.startswith("[REDACTED:") or _PLACEHOLDER_RE.fullmatch(value):
        return True
    norm = re.sub(r"[^a-z0-9]", "", value.lower())
    if not norm or norm in _PLACEHOLDER_WORDS:
        return True
    if norm.startswith(("your", "insert", "enter", "replace", "change", "put")):
        return True
    if norm.endswith("here") or "example" in norm or "placeholder" in norm:
        return True
    return _FILLER_RE.search(value) is not None


def not_placeholder(value: str) -> bool:
    """The negation of :func:`is_placeholder`, as a rule check."""
    return not is_placeholder(value)


# --- base64 ----------------------------------------------------------------------------------

_B64_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_B64_VALUE = {c: i for i, c in enumerate(_B64_ALPHABET)} | {"-": 62, "_": 63}


def b64decode(value: str) -> bytes | None:
    """Decode standard or URL-safe base64, ignoring padding; None if value is not base64."""
    out = bytearray()
    acc = bits = 0
    for c in value.rstrip("="):
        v = _B64_VALUE.get(c)
        if v is None:
            return None
        acc = ((acc << 6) | v) & 0xFFFF
        bits += 6
        if bits >= 8:
            bits -= 8
            out.append((acc >> bits) & 0xFF)
    return bytes(out)


# Publishable keys are public by design.
PUBLIC_RE = rx(r"pk_(?:live|test)_")
