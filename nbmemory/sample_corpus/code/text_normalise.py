"""Text normalisation for search indexing and matching.

Shared by the BM25 indexer and query parser so both sides agree. Handles the
Polish/German/Swedish catalogue quirks: diacritics, ``ß``, ``ł`` (which NFKD
does *not* decompose), unit spellings and SKU-like tokens that must survive
untouched.
"""

from __future__ import annotations

import re
import unicodedata

# Characters that NFKD leaves alone but we want folded.
_EXTRA_FOLD = str.maketrans({"ł": "l", "Ł": "L", "ß": "ss", "ø": "o", "Ø": "O", "æ": "ae", "Æ": "AE", "đ": "d"})

_SKU_RE = re.compile(r"\b(?:sku[-\s]?)?\d{5,6}\b", re.IGNORECASE)
_UNIT_RE = re.compile(r"(\d+(?:[.,]\d+)?)\s*(l|ml|kg|g|cm|mm)\b", re.IGNORECASE)
_TOKEN_RE = re.compile(r"[a-z0-9]+(?:[.][0-9]+)?", re.IGNORECASE)
_WS_RE = re.compile(r"\s+")

STOPWORDS = frozenset(
    ["a", "an", "and", "are", "as", "at", "be", "by", "for", "from", "in", "is", "it", "of", "on", "or", "the", "to", "with", "i", "w", "z", "na", "do", "dla", "und", "der", "die", "das", "für"]
)


def strip_accents(text: str) -> str:
    """Remove combining marks: ``"Łódź Zürich"`` → ``"Lodz Zurich"``."""
    text = text.translate(_EXTRA_FOLD)
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch))


def normalise_units(text: str) -> str:
    """Canonicalise quantities: ``"3,5 L"`` / ``"3.5l"`` → ``"3.5l"``."""
    return _UNIT_RE.sub(lambda m: f"{m.group(1).replace(',', '.')}{m.group(2).lower()}", text)


def normalise(text: str) -> str:
    """Full normalisation used for indexing: NFC → unit canonicalisation → accent folding → lowercase → whitespace collapse."""
    if not text:
        return ""
    text = unicodedata.normalize("NFC", text)
    text = normalise_units(text)
    text = strip_accents(text).lower()
    return _WS_RE.sub(" ", text).strip()


def tokenize(text: str, drop_stopwords: bool = True) -> list[str]:
    """Split normalised text into tokens; SKU numbers and ``3.5l`` style units stay whole."""
    tokens = _TOKEN_RE.findall(normalise(text))
    if drop_stopwords:
        tokens = [t for t in tokens if t not in STOPWORDS]
    return tokens


def extract_skus(text: str) -> list[str]:
    """Find SKU references (``SKU 88213``, ``sku-88213``, bare ``88213``) → ``["88213"]``."""
    return [re.sub(r"\D", "", m.group(0)) for m in _SKU_RE.finditer(text)]


def normalise_city(name: str) -> str:
    """City names for joining store data from different systems."""
    return normalise(name).replace(" ", "-")


class Normaliser:
    """Configurable normaliser object for places that need per-index settings.

    Args:
        fold_accents: fold diacritics (True for BM25, False for display snippets).
        keep_stopwords: keep stopwords (phrase queries need them).
        synonyms: optional token → token mapping applied after tokenisation.
    """

    def __init__(self, fold_accents: bool = True, keep_stopwords: bool = False,
                 synonyms: dict[str, str] | None = None) -> None:
        self.fold_accents = fold_accents
        self.keep_stopwords = keep_stopwords
        self.synonyms = synonyms or {}

    def __call__(self, text: str) -> list[str]:
        if self.fold_accents:
            toks = tokenize(text, drop_stopwords=not self.keep_stopwords)
        else:
            toks = _TOKEN_RE.findall(_WS_RE.sub(" ", text.lower()))
        return [self.synonyms.get(t, t) for t in toks]
