"""The generic ``high-entropy`` rule: long random-looking tokens that no other rule named, and the
checks that tell random data from words, identifiers, hashes, images and public keys."""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Iterator

from nbmemory.ingest.redact.checks import PUBLIC_RE, Cand, b64decode, is_digit, mixed_case, not_filler, rx

# A token ends at a non-token character or after base64 padding.
_TOKEN_RE = rx(r"(?<![A-Za-z0-9+/_-])[A-Za-z0-9+/_-]{32,}(?:={1,3}|(?![A-Za-z0-9+/=_-]))")
_HEXISH_RE = rx(r"[0-9a-fA-F-]+")
PIECE_RE = rx(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|[0-9]+")
# Parts of a name: word, Word, WORD, CamelCase, hex, number with unit, short code ("8B", "v0").
_SIMPLE_PART_RE = rx(
    r"[A-Za-z][a-z]*[0-9]*|[A-Z]+[0-9]*|(?:[A-Z][a-z]+)+[A-Z0-9]*|[0-9]+[A-Za-z]{0,3}|[0-9a-f]+"
    r"|[0-9A-F]+|[A-Za-z0-9]{0,8}"
)
_PATH_WORD_RE = rx(r"[a-z][a-z0-9]*(?:[._-][a-z0-9]+)*|[A-Z][a-z]+")
# What may precede a token that is a labelled hash or inline image data, not a secret.
_HASH_CONTEXT_RE = rx(
    r"(?i:sha(?:1|224|256|384|512)|sha3[_-]?[0-9]+|md5|blake2[bs]?|h1|hash|digest|checksum"
    r"|integrity|etag)[\"']?[ \t]*[:=][ \t]*[\"']?$"
    r"|;base64,$"
    r"|\"image/[a-z0-9.+-]+\"[ \t]*:[ \t]*\[?[ \t]*\"$"
)
CONSONANTS_RE = rx(r"[bcdfghjklmnpqrstvwxz]{5}")
_SRI_RE = rx(r"(?i:sha(?:1|256|384|512)|md5)-")
# Base64 of PNG, JPEG, GIF, WebP, SVG, XML, PDF headers.
_IMAGE_MAGIC = ("iVBORw0KGgo", "/9j/", "R0lGOD", "UklGR", "PHN2Zy", "PD94bWwg", "JVBERi0")
_AWS_NEAR_RE = rx(r"(?:AKIA|ASIA)[A-Z0-9]{16}|(?<![A-Za-z])(?i:aws)")
_AWS_SECRET_RE = rx(r"[A-Za-z0-9/+]{40}")

_SAMPLE = 1024
_MAX_PATH = 4096
_MIN_ENTROPY = 4.0
MAX_AVG_PIECE = 3.0
_MIN_TRANSITIONS = 0.3


def _entropy(value: str) -> float:
    """Shannon entropy of the characters of value, in bits per character."""
    counts: dict[str, int] = {}
    for c in value:
        counts[c] = counts.get(c, 0) + 1
    n = len(value)
    return -sum(k / n * math.log2(k / n) for k in counts.values())


def avg_piece(value: str) -> float:
    """Mean length of the words, acronyms and numbers in value (camelCase and snake_case aware)."""
    pieces = PIECE_RE.findall(value)
    return sum(map(len, pieces)) / len(pieces) if pieces else 0.0


def _transitions(value: str) -> float:
    """Share of adjacent alphanumeric pairs that switch between lower, upper and digit."""
    prev = ""
    pairs = switches = 0
    for c in value:
        kind = "l" if "a" <= c <= "z" else "u" if "A" <= c <= "Z" else "d" if is_digit(c) else ""
        if kind and prev:
            pairs += 1
            switches += kind != prev
        prev = kind
    return switches / pairs if pairs else 0.0


def _base64_prose(value: str) -> bool:
    """True if value is base64 of ordinary text (words and spaces)."""
    raw = b64decode(value)
    if not raw or len(raw) < 16:
        return False
    decoded = raw.decode("latin-1")
    letters = sum(c.isalpha() or c == " " for c in decoded)
    return (
        decoded.isascii()
        and decoded.isprintable()
        and decoded.count(" ") >= 2
        and letters >= 0.8 * len(decoded)
    )


def _looks_random(value: str) -> bool:
    """True for a token that reads as random data rather than words, identifiers or hashes."""
    if len(value) < 32:
        return False
    # The statistics of a long blob are those of its start; keep the work bounded.
    value = value[:_SAMPLE]
    if _HEXISH_RE.fullmatch(value):
        return False
    has_lower = any("a" <= c <= "z" for c in value)
    has_upper = any("A" <= c <= "Z" for c in value)
    has_digit = any(is_digit(c) for c in value)
    if has_lower + has_upper + has_digit < 2 or _entropy(value) < _MIN_ENTROPY:
        return False
    parts = re.split(r"[-_+/]", value)
    if all(_SIMPLE_PART_RE.fullmatch(p) for p in parts):
        return False  # test-8000Hz-le-3ch, climate-64f99dc2a5067f6b65531bab, Org/Model-8B-v0
    if has_lower and has_upper:
        # Random data switches case every other character and has no long words.
        if avg_piece(value) >= MAX_AVG_PIECE or _transitions(value) < _MIN_TRANSITIONS:
            return False
    else:
        # One case and digits: random data has few vowels and is not snake_case or kebab-case.
        if len(parts) > 2:
            return False
        letters = "".join(c for c in value.lower() if "a" <= c <= "z")
        vowels = sum(c in "aeiouy" for c in letters) / max(len(letters), 1)
        # Words have vowels and short consonant clusters; random letters have neither.
        if vowels >= 0.4 or (vowels >= 0.25 and CONSONANTS_RE.search(letters) is None):
            return False
        if sum(len(p) for p in parts if len(p) >= 3 and p.isalpha()) >= 0.5 * len(value):
            return False
    sequential = sum(ord(value[i + 1]) - ord(value[i]) == 1 for i in range(len(value) - 1))
    if sequential > 0.3 * len(value):
        return False  # ABCDEFGHIJ...
    return not _base64_prose(value)


# Blocks of public material: certificates, public keys, signatures (BEGIN and END found apart,
# then paired, so that a text of many BEGIN lines stays linear).
_PUBLIC_BEGIN_RE = rx(
    r"-{4,5} ?BEGIN (?P<label>CERTIFICATE|TRUSTED CERTIFICATE|X509 CRL|(?:NEW )?CERTIFICATE REQUEST"
    r"|(?:RSA |SSH2 )?PUBLIC KEY|PGP PUBLIC KEY BLOCK|PGP SIGNATURE) ?-{4,5}"
)
_PUBLIC_END_RE = rx(
    r"-{4,5} ?END (?P<label>CERTIFICATE|TRUSTED CERTIFICATE|X509 CRL|(?:NEW )?CERTIFICATE REQUEST"
    r"|(?:RSA |SSH2 )?PUBLIC KEY|PGP PUBLIC KEY BLOCK|PGP SIGNATURE) ?-{4,5}"
)
# The key types an OpenSSH public key blob names first (base64 of a length-prefixed string).
_SSH_KEY_TYPES = (b"ssh-", b"ecdsa-sha2-", b"sk-ssh-", b"sk-ecdsa-", b"rsa-sha2-")


def _public_blocks(text: str) -> list[tuple[int, int]]:
    """Spans of certificate and public-key blocks in text."""
    if "BEGIN" not in text:
        return []
    ends: dict[str, list[int]] = {}
    for m in _PUBLIC_END_RE.finditer(text):
        ends.setdefault(m.group("label"), []).append(m.end())
    spans: list[tuple[int, int]] = []
    for m in _PUBLIC_BEGIN_RE.finditer(text):
        positions = ends.get(m.group("label"), [])
        at = bisect.bisect_left(positions, m.end())
        if at < len(positions) and (not spans or m.start() >= spans[-1][1]):
            spans.append((m.start(), positions[at]))
    return spans


def _inside(spans: list[tuple[int, int]], pos: int) -> bool:
    """True if pos lies in one of the sorted, disjoint spans."""
    at = bisect.bisect_right(spans, (pos, len(spans) and spans[-1][1] + 1)) - 1
    return at >= 0 and spans[at][0] <= pos < spans[at][1]


def _ssh_public_key(token: str) -> bool:
    """True for the base64 blob of an OpenSSH public key (``AAAAC3NzaC1lZDI1NTE5...``)."""
    if not token.startswith("AAAA"):
        return False
    head = b64decode(token[:48])
    if head is None or len(head) < 8:
        return False
    size = int.from_bytes(head[:4], "big")
    return 3 <= size <= 40 and head[4 : 4 + size].startswith(_SSH_KEY_TYPES)


def entropy_candidates(text: str, low: str) -> Iterator[Cand]:
    """Random-looking tokens as ``high-entropy`` (or an AWS secret key next to an AWS key or name)."""
    public = _public_blocks(text)
    for m in _TOKEN_RE.finditer(text):
        start = m.start()
        token = m.group().rstrip("=")
        end = start + len(token)
        if token.startswith(_IMAGE_MAGIC) or _SRI_RE.match(token) or PUBLIC_RE.match(token):
            continue
        if _ssh_public_key(token) or _inside(public, start):
            continue  # public keys and certificates are public
        if _HASH_CONTEXT_RE.search(text, max(0, start - 40), start):
            continue
        if (
            len(token) == 40
            and _AWS_SECRET_RE.fullmatch(token)
            and mixed_case(token)
            and not_filler(token)
            and _AWS_NEAR_RE.search(text, max(0, start - 300), min(len(text), end + 300))
        ):
            yield start, end, "aws-secret-access-key"
            continue
        pieces = [(start, token)]
        if "/" in token and len(token) <= _MAX_PATH:
            parts = token.split("/")
            if any(len(p) >= 3 and _PATH_WORD_RE.fullmatch(p) for p in parts):
                # A path or URL: only a random segment of it can be a secret.
                pieces = []
                offset = start
                for part in parts:
                    pieces.append((offset, part))
                    offset += len(part) + 1
        for offset, piece in pieces:
            if _looks_random(piece):
                yield offset, offset + len(piece), "high-entropy"
