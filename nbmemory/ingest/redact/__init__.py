"""Secret redaction: every text passes through :func:`redact` before it is stored or embedded.

Design
------
Detection is a list of rules in three tiers. Each rule yields candidate spans that cover only the
secret (key names, URL users and hosts, header names stay):

1. vendor rules: credentials with a recognisable shape (``ghp_...``, ``AKIA...``, ``xoxb-...``,
   ``dckr_pat_...``, ``dapi...``, ``ATATT3...``, Entra ``...Q~...`` secrets, Azure SAS ``sig=``,
   JWTs, PEM private-key blocks), each to its vendor's documented prefix, alphabet and length, or
   whose key names the vendor (``DD_API_KEY=...``); tokens of vendors without a kind of their own
   (Grafana, Vault, Linear, Notion, Doppler, age, ...) are ``api-token``;
2. structural rules: ``scheme://user:PASSWORD@host``, ``Authorization: Bearer|Basic ...``, the
   ``auth`` of a Docker ``config.json``, and ``password`` / ``token`` / ``api_key`` / ``secret``
   assignments in Python, YAML, JSON, .env, shell, INI/TOML sections, XML elements, Kubernetes
   ``name:``/``value:`` pairs, libpq/ODBC/JDBC connection strings and .netrc;
3. the generic ``high-entropy`` rule: long random-looking tokens that no other rule named.

Overlaps are resolved in one place, :func:`_merge`: overlapping candidates become one span (their
union), so the output never holds half a secret or nested markers, and the span is labelled by its
most specific member: lowest tier (vendor before structural before generic), then earliest start,
then longest match, then the order of :data:`KINDS`. Every other verbatim occurrence of a detected
secret (8+ characters, not only letters) is redacted too, e.g. a password echoed in a cell output.
Candidates touching an existing ``[REDACTED:<kind>]`` marker are dropped, and :func:`redact`
repeats until nothing more is found, so redacting its output changes nothing.

Decisions
---------
* Not redacted, as obviously not a secret: empty values and values containing whitespace;
  placeholders (``<your-password>``, ``xxx``, ``***``, ``${VAR}``, ``{{ var }}``, ``%(pw)s``,
  ``your_api_key_here``, ``DB_PASSWORD``, ``None``, ``null``); code (``os.environ[...]``,
  ``getenv(...)``, calls, attribute and variable references, raw-string regexes); file paths;
  values under 6 characters, and for the weaker keys (``token``, ``secret``, ``api_key``...)
  values under 8 characters or of one character class. ``changeme`` (like ``changeit`` and
  ``password``) counts as a placeholder: it is a published default, so hiding it protects nothing.
* Hexadecimal strings are never ``high-entropy``: git SHAs, UUIDs, digests and lock-file hashes
  are hex, and hex carries at most 4 bits per character, the entropy threshold. A hex secret is
  caught when its key names it (``token=...``, ``DD_API_KEY=...``). Tokens of one letter case
  need few vowels to count as random, so concatenated words (BibTeX keys) are not flagged.
* Base64 images (``data:image/png;base64,...``, bare PNG/JPEG/GIF/WebP/SVG/PDF base64, notebook
  ``"image/png": "..."``), labelled hashes (``sha256=``, ``sha512-``, ``h1:``, ``integrity``)
  and base64 of ordinary prose are left untouched: they are not secrets, and dropping bulky image
  payloads is the caller's job. A random segment of a URL path (a Google Docs id) is redacted:
  such links grant access.
* Stripe publishable keys (``pk_live_...``) are public by design and are not redacted; nor are
  OpenSSH public keys (``ssh-ed25519 AAAA...``) and the bodies of certificate, public-key and
  PGP-signature PEM blocks.
* AWS's documented example keys (``AKIAIOSFODNN7EXAMPLE``) are redacted like any key of that
  format: an allow-list of "example" values is a hole a real key could fall through.
* A ``#`` inside a URL password (invalid, but pasted) belongs to the password.
* ``tests/reliability/secret_corpus.py`` is the labelled benchmark (hundreds of fake keys across
  vendors, look-alikes); ``bench/ingest/secrets_bench.py`` prints recall per vendor and the
  false-positive rate.

Layout
------
:mod:`.rules` holds :data:`KINDS` and the rule table (vendor and structural rules),
:mod:`.assignments` the password/token assignment heuristics, :mod:`.entropy` the generic
high-entropy rule, :mod:`.checks` the character-level checks they share; this module resolves
their candidates into the spans :func:`redact` replaces.

Patterns are precompiled, bounded, and anchored on literals where possible; no input makes
matching super-linear. Nothing here logs, and no exception message contains any part of the input.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from nbmemory.ingest.redact.assignments import assignment_candidates
from nbmemory.ingest.redact.checks import Cand, classes
from nbmemory.ingest.redact.entropy import entropy_candidates
from nbmemory.ingest.redact.rules import KINDS, RULES, key_tail_candidates, telegram_candidates

__all__ = ["KINDS", "Redaction", "redact"]


@dataclass(frozen=True)
class Redaction:
    """The result of :func:`redact`.

    Parameters
    ----------
    text:
        The input with every secret replaced by ``[REDACTED:<kind>]``.
    counts:
        Number of replacements per kind (see :data:`KINDS`); empty when nothing was found.
    """

    text: str
    counts: dict[str, int]

    @property
    def total(self) -> int:
        """Number of replacements of all kinds."""
        return sum(self.counts.values())


# --- resolution ------------------------------------------------------------------------------

_VENDOR, _STRUCTURAL, _GENERIC = 0, 1, 2
_TIER = dict.fromkeys(KINDS, _VENDOR) | {
    "bearer-token": _STRUCTURAL,
    "basic-auth": _STRUCTURAL,
    "url-password": _STRUCTURAL,
    "password-assignment": _STRUCTURAL,
    "high-entropy": _GENERIC,
}
_ORDER = {kind: i for i, kind in enumerate(KINDS)}

_Finder = Callable[[str, str], Iterable[Cand]]
_MARKER_RE = re.compile(r"\[REDACTED:[a-z0-9-]{1,40}\]")

_FINDERS: tuple[_Finder, ...] = (
    *(rule.find for rule in RULES),
    telegram_candidates,
    key_tail_candidates,
    assignment_candidates,
    entropy_candidates,
)
_ECHO_MIN = 8
_MAX_PASSES = 8
_ECHO_MAX = 200


def _drop_marker_overlaps(cands: list[Cand], markers: list[tuple[int, int]]) -> list[Cand]:
    """Drop candidates that overlap an existing ``[REDACTED:...]`` marker."""
    if not markers:
        return cands
    cands.sort()
    kept: list[Cand] = []
    j = 0
    for cand in cands:
        while j < len(markers) and markers[j][1] <= cand[0]:
            j += 1
        if j == len(markers) or markers[j][0] >= cand[1]:
            kept.append(cand)
    return kept


def _merge(cands: list[Cand]) -> list[Cand]:
    """Merge overlapping candidates; label each union by its most specific member."""
    cands.sort(key=lambda c: (c[0], -c[1]))
    merged: list[tuple[int, int, str, tuple[int, int, int, int]]] = []
    for s, e, kind in cands:
        rank = (_TIER[kind], s, s - e, _ORDER[kind])
        if merged and s < merged[-1][1]:
            ms, me, mkind, mrank = merged[-1]
            if rank < mrank:
                mkind, mrank = kind, rank
            merged[-1] = (ms, max(me, e), mkind, mrank)
        else:
            merged.append((s, e, kind, rank))
    return [(s, e, kind) for s, e, kind, _ in merged]


def _echo_eligible(secret: str) -> bool:
    # Letters-only values could be ordinary words elsewhere in the text.
    return (
        len(secret) >= _ECHO_MIN
        and any(c.isalpha() for c in secret)
        and not secret.isalpha()
        and classes(secret) >= 2
    )


def _lower(text: str) -> str:
    low = text.lower()
    if len(low) != len(text):
        # U+0130 lower-cases to two characters; keep offsets aligned by lowering ASCII only.
        low = text.translate(_ASCII_LOWER)
    return low


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def _spans(text: str) -> list[Cand]:
    """Return the (start, end, kind) spans that :func:`redact` replaces, in order."""
    low = _lower(text)
    markers = [m.span() for m in _MARKER_RE.finditer(text)]
    cands: list[Cand] = []
    for finder in _FINDERS:
        cands.extend(finder(text, low))
    cands = _drop_marker_overlaps(cands, markers)
    if not cands:
        return []
    spans = _merge(cands)
    secrets: dict[str, str] = {}
    for s, e, kind in spans:
        if _echo_eligible(text[s:e]):
            secrets.setdefault(text[s:e], kind)
    if secrets:
        echoes: list[Cand] = []
        for secret, kind in list(secrets.items())[:_ECHO_MAX]:
            at = text.find(secret)
            while at >= 0:
                echoes.append((at, at + len(secret), kind))
                at = text.find(secret, at + len(secret))
        spans = _merge(_drop_marker_overlaps(cands + echoes, markers))
    return spans


def redact(text: str) -> Redaction:
    """Replace every secret in a text by ``[REDACTED:<kind>]``.

    Parameters
    ----------
    text:
        Any text: source code, notebook cells and outputs, markdown, configuration, logs.

    Returns
    -------
    Redaction
        The redacted text and the number of replacements per kind (see :data:`KINDS`).
        Only the secret is replaced: key names, URL users and hosts, header names stay.

    Raises
    ------
    TypeError
        If text is not a ``str``.

    Notes
    -----
    Vendor rules run first, then structural ones (URL passwords, Authorization headers,
    password/token assignments), then a generic high-entropy rule. Overlapping detections are
    merged into one replacement labelled by the most specific rule. Every other verbatim
    occurrence of a detected secret is replaced too. Redacting redacted text changes nothing.

    Examples
    --------
    >>> redact("postgres://admin:hunter2pass@db.internal:5432/app").text
    'postgres://admin:[REDACTED:url-password]@db.internal:5432/app'
    """
    if not isinstance(text, str):
        raise TypeError(f"redact() expects str, got {type(text).__name__}")
    counts: dict[str, int] = {}
    # Replacing a secret can complete another match next to it (a token glued to a key that is
    # now a marker): repeat until nothing changes, so that redaction is idempotent. Markers are
    # never matched again, so every pass shrinks the unredacted text and this ends.
    for _ in range(_MAX_PASSES):
        spans = _spans(text)
        if not spans:
            break
        out: list[str] = []
        pos = 0
        for s, e, kind in spans:
            out.append(text[pos:s])
            out.append(f"[REDACTED:{kind}]")
            counts[kind] = counts.get(kind, 0) + 1
            pos = e
        out.append(text[pos:])
        text = "".join(out)
    return Redaction(text, counts)
