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
* ``bench/secret_corpus.py`` is the labelled benchmark (hundreds of fake keys across vendors,
  look-alikes); ``bench/secrets_bench.py`` prints recall per vendor and the false-positive rate.

Patterns are precompiled, bounded, and anchored on literals where possible; no input makes
matching super-linear. Nothing here logs, and no exception message contains any part of the input.
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

__all__ = ["KINDS", "Redaction", "redact"]

KINDS: tuple[str, ...] = (
    "aws-access-key-id",
    "aws-secret-access-key",
    "github-token",
    "gitlab-token",
    "openai-api-key",
    "anthropic-api-key",
    "slack-token",
    "slack-webhook",
    "stripe-key",
    "google-api-key",
    "google-oauth-client-secret",
    "google-oauth-token",
    "gcp-service-account-key",
    "azure-storage-key",
    "azure-sas-token",
    "azure-client-secret",
    "twilio-api-key",
    "sendgrid-api-key",
    "mailgun-api-key",
    "npm-token",
    "pypi-token",
    "huggingface-token",
    "digitalocean-token",
    "shopify-token",
    "docker-token",
    "atlassian-api-token",
    "databricks-token",
    "discord-bot-token",
    "telegram-bot-token",
    "datadog-api-key",
    "heroku-api-key",
    "kaggle-api-key",
    "api-token",
    "jwt",
    "private-key",
    "bearer-token",
    "basic-auth",
    "url-password",
    "password-assignment",
    "high-entropy",
)


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


_VENDOR, _STRUCTURAL, _GENERIC = 0, 1, 2
_TIER = dict.fromkeys(KINDS, _VENDOR) | {
    "bearer-token": _STRUCTURAL,
    "basic-auth": _STRUCTURAL,
    "url-password": _STRUCTURAL,
    "password-assignment": _STRUCTURAL,
    "high-entropy": _GENERIC,
}
_ORDER = {kind: i for i, kind in enumerate(KINDS)}

# A candidate: (start, end, kind).
_Cand = tuple[int, int, str]
_Finder = Callable[[str, str], Iterable[_Cand]]

_ALNUM = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
_KEY_CHARS = _ALNUM | frozenset("_.-")
_MARKER_RE = re.compile(r"\[REDACTED:[a-z0-9-]{1,40}\]")
_FILLER_RE = re.compile(r"(.)\1{5,}|x{4}|X{4}|\*{3}|\.\.\.|\u2026|(?i:your)")


def _rx(pattern: str, flags: int = 0) -> re.Pattern[str]:
    return re.compile(pattern, re.ASCII | flags)


def _is_digit(c: str) -> bool:
    return "0" <= c <= "9"


def _classes(value: str) -> int:
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


def _mixed_case(value: str) -> bool:
    return any("a" <= c <= "z" for c in value) and any("A" <= c <= "Z" for c in value)


def _not_filler(value: str) -> bool:
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


def _is_placeholder(value: str) -> bool:
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


def _not_placeholder(value: str) -> bool:
    return not _is_placeholder(value)


# --- rules expressed as one regex each -------------------------------------------------------


def _not_alnum(c: str) -> bool:
    return c not in _ALNUM


@dataclass(frozen=True)
class _Rule:
    """A regex rule. ``group`` holds the secret; ``check`` vets it.

    ``needs``: substrings of which one must occur for the rule to run (checked against the
    lower-cased text when the needle is lower case). ``before``: predicate on the character
    preceding the match ("" at the start). ``low``: match against the lower-cased text (for
    case-insensitive keys; every value class used with it is closed under case).
    """

    kind: str
    regex: re.Pattern[str]
    group: str | int = 0
    check: Callable[[str], bool] | None = None
    needs: tuple[str, ...] = ()
    before: Callable[[str], bool] | None = _not_alnum
    low: bool = False

    def find(self, text: str, low: str) -> Iterator[_Cand]:
        if self.needs and not any(n in (low if n.islower() else text) for n in self.needs):
            return
        for m in self.regex.finditer(low if self.low else text):
            if self.before is not None and not self.before(text[m.start() - 1 : m.start()]):
                continue
            s, e = m.span(self.group)
            if s < 0 or e <= s:
                continue
            if self.check is not None and not self.check(text[s:e]):
                continue
            yield s, e, self.kind


# The separator of `key = value`, `key: value`, `"key": "value"`, `key => value`,
# `os.environ["KEY"] = "value"`.
_SEP = r"[\"']?\]?[ \t]*(?:=>|=|:)[ \t]*[\"']?"
_UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_B64_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_B64_VALUE = {c: i for i, c in enumerate(_B64_ALPHABET)} | {"-": 62, "_": 63}


def _b64decode(value: str) -> bytes | None:
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


def _discord_check(token: str) -> bool:
    # The first part of a Discord bot token is the bot's numeric id, base64-encoded.
    head = _b64decode(token.split(".", 1)[0])
    return head is not None and 17 <= len(head) <= 20 and head.isdigit()


def _sas_signature(value: str) -> bool:
    # The signature is base64 of an HMAC-SHA256, usually URL-encoded: 32 bytes once decoded.
    raw = value.replace("%2B", "+").replace("%2b", "+").replace("%2F", "/").replace("%2f", "/")
    raw = raw.replace("%3D", "=").replace("%3d", "=")
    decoded = _b64decode(raw)
    return decoded is not None and len(decoded) == 32


def _random_body(prefix_len: int) -> Callable[[str], bool]:
    # For short prefixes whose body could be an identifier: 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.
    def check(value: str) -> bool:
        body = value[prefix_len:]
        # Random letters have short runs between case changes, or consonant runs no word has.
        return _not_filler(body) and (
            _avg_piece(body) < 3.5 or _CONSONANTS_RE.search(body.lower()) is not None
        )

    return check


def _after_scheme(c: str) -> bool:
    return c in _ALNUM


def _after_space(c: str) -> bool:
    return c in ("", " ", "\t", "\n", "\r")


def _auth_password(value: str) -> bool:
    return len(value) >= 6 and " " not in value and not _is_placeholder(value)


def _shape(kind: str, pattern: str, check: Callable[[str], bool] = _not_filler) -> _Rule:
    """A credential known by its own shape: prefix, alphabet, length."""
    return _Rule(kind, _rx(pattern), check=check)


def _keyed(kind: str, key: str, value: str, check: Callable[[str], bool] | None = None) -> _Rule:
    """A credential known by the key it is assigned to; key and value are matched lower-cased."""
    return _Rule(kind, _rx(rf"(?:{key}){_SEP}(?P<s>{value})"), "s", check=check, low=True)


# A look-behind right after a literal prefix keeps the fast literal search and stops a rescan
# from every prefix inside a long run ("glpat-glpat-...").
_RULES: tuple[_Rule, ...] = (
    _Rule(
        "gcp-service-account-key",
        _rx(
            r"(?P<q>[\"'])private_key(?P=q)[ \t]*:[ \t]*(?P=q)"
            r"(?P<s>-----BEGIN[A-Z ]{0,40}PRIVATE KEY-----[^\"'\n]{0,16384})(?P=q)"
        ),
        "s",
        needs=("private_key",),
        before=None,
    ),
    _Rule(
        "private-key",
        _rx(
            r"-{4,5} ?BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)? ?-{4,5}"
            # Key material (or a PEM header) must follow: a prose mention is not a key.
            r"(?=(?:\s|\\[nr])*(?:[A-Za-z0-9+/=]{16}|[A-Za-z-]{2,40}:|-{4,5} ?END))"
            # Up to the END line, or to the end of the text when it is missing.
            r"(?:[\s\S]*?-{4,5} ?END[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)? ?-{4,5}|[\s\S]*)"
        ),
        needs=("PRIVATE KEY",),
        before=None,
    ),
    _shape(
        "aws-access-key-id",
        r"(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AIPA|ANPA|ANVA|APKA|AROA|ASCA)[A-Z0-9]{16}"
        r"(?![A-Za-z0-9])",
    ),
    *(
        _keyed(
            "aws-secret-access-key",
            key,
            r"[a-z0-9/+]{40}(?![a-z0-9/+=])",
            check=lambda v: _mixed_case(v) and _not_filler(v),
        )
        for key in (r"aws[_.-]?secret[_.-]?(?:access[_.-]?)?key", r"secret[_.-]?access[_.-]?key")
    ),
    _shape("github-token", r"gh[pousr]_[A-Za-z0-9]{36,251}(?![A-Za-z0-9_])"),
    _shape("github-token", r"github_pat_[A-Za-z0-9]{20,40}_[A-Za-z0-9]{40,120}(?![A-Za-z0-9_])"),
    _shape(
        "gitlab-token",
        r"gl(?<![A-Za-z0-9_-]gl)(?:pat|dt|rt|ptt|cbt|soat|ft|imt|oas|agent|ffct)-[A-Za-z0-9_-]{20,255}"
        r"(?:\.[0-9a-z]{2}\.[0-9a-z]{7,9})?(?![A-Za-z0-9_-])",
    ),
    # Runner registration tokens (deprecated, still in old .gitlab-ci configs).
    _shape("gitlab-token", r"GR1348941[A-Za-z0-9_-]{20}(?![A-Za-z0-9_-])"),
    _shape(
        "anthropic-api-key",
        r"sk-(?<![A-Za-z0-9_-]sk-)ant-[a-z]{2,8}[0-9]{2}-[A-Za-z0-9_-]{32,300}(?![A-Za-z0-9_-])",
    ),
    _shape(
        "openai-api-key",
        r"sk-(?<![A-Za-z0-9_-]sk-)(?!ant-)(?:(?:proj|svcacct|admin)-[A-Za-z0-9_-]{40,300}"
        r"|[A-Za-z0-9_-]{20,150}T3BlbkFJ[A-Za-z0-9_-]{20,150}|[A-Za-z0-9]{48})(?![A-Za-z0-9_-])",
    ),
    _shape(
        "slack-token",
        r"x(?<![A-Za-z0-9-]x)(?:ox[abposr]-[0-9]{1,20}-[A-Za-z0-9-]{8,250}"
        r"|oxe(?:\.xox[bp])?-[0-9]-[A-Za-z0-9-]{20,250}"
        r"|app-[0-9]-[A-Z0-9]{6,20}-[0-9]{6,20}-[A-Za-z0-9]{20,100})(?![A-Za-z0-9-])",
    ),
    _Rule(
        "slack-webhook",
        _rx(r"hooks\.slack\.com/(?:services|workflows|triggers)/(?P<s>[A-Za-z0-9_/+-]{20,300})"),
        "s",
        check=_not_filler,
    ),
    _shape("stripe-key", r"sk_(?:live|test)_[A-Za-z0-9]{16,247}(?![A-Za-z0-9])"),
    _shape("stripe-key", r"rk_(?:live|test)_[A-Za-z0-9]{16,247}(?![A-Za-z0-9])"),
    _shape("stripe-key", r"whsec_[A-Za-z0-9+/=]{32,100}(?![A-Za-z0-9+/=])"),
    _shape("google-api-key", r"AIza[0-9A-Za-z_-]{35}(?![0-9A-Za-z_-])"),
    _shape(
        "google-oauth-client-secret",
        r"GOCSPX-(?<![A-Za-z0-9_-]GOCSPX-)[A-Za-z0-9_-]{24,40}(?![A-Za-z0-9_-])",
    ),
    _shape("google-oauth-token", r"ya29\.[0-9A-Za-z_-]{20,2048}(?![0-9A-Za-z_-])"),
    # Account keys of Azure Storage and Cosmos DB (512 bits) and the shared access keys of
    # Service Bus, Event Hubs and IoT Hub (256 bits), base64, in connection strings or settings.
    _keyed(
        "azure-storage-key",
        r"(?:azure[_.-]?(?:storage|cosmos(?:[_.-]?db)?)[_.-]?(?:account[_.-]?)?(?:access[_.-]?|primary[_.-]?)?key"
        r"|accountkey|sharedaccesskey)",
        r"(?:[a-z0-9+/]{86}==|[a-z0-9+/]{43}=)(?![a-z0-9+/=])",
    ),
    # A SAS token's signature, URL-encoded: HMAC-SHA256 in base64 (the other fields are public).
    _Rule(
        "azure-sas-token",
        _rx(r"[?&;]sig=(?P<s>[A-Za-z0-9%+/=]{40,120})(?![A-Za-z0-9%+/=])"),
        "s",
        check=lambda v: _sas_signature(v),
        needs=("sig=",),
        before=None,
    ),
    # Entra ID (Azure AD) application client secrets: 3 characters, a digit, "Q~", 31-34 more.
    _Rule(
        "azure-client-secret",
        _rx(r"[A-Za-z0-9_~.]{3}[0-9]Q~[A-Za-z0-9_~.-]{31,34}(?![A-Za-z0-9_~.-])"),
        check=_not_filler,
        needs=("Q~",),
        before=lambda c: c not in _ALNUM and c not in "_~.-",
    ),
    _shape("twilio-api-key", r"SK[0-9a-f]{32}(?![A-Za-z0-9])"),
    _keyed(
        "twilio-api-key",
        r"twilio[_.-]?(?:auth[_.-]?token|api[_.-]?secret|secret)",
        r"[a-z0-9]{32}(?![a-z0-9])",
    ),
    _shape("sendgrid-api-key", r"SG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}(?![A-Za-z0-9_-])"),
    _shape("mailgun-api-key", r"key-[0-9a-f]{32}(?![A-Za-z0-9])"),
    _Rule(
        "mailgun-api-key",
        _rx(r"[0-9a-f]{32}-[0-9a-f]{8}-[0-9a-f]{8}(?![A-Za-z0-9-])"),
        needs=("mailgun",),
    ),
    _shape("npm-token", r"npm_[A-Za-z0-9]{36}(?![A-Za-z0-9])"),
    _Rule(
        "npm-token",
        _rx(r"_authToken[ \t]*=[ \t]*[\"']?(?P<s>[A-Za-z0-9_.+/=-]{8,512})"),
        "s",
        check=_not_placeholder,
        before=None,
    ),
    _shape("pypi-token", r"pypi-Ag(?<![A-Za-z0-9_-]pypi-Ag)[A-Za-z0-9_-]{50,1000}(?![A-Za-z0-9_-])"),
    _shape("huggingface-token", r"hf_[A-Za-z0-9]{34,40}(?![A-Za-z0-9_])", check=_random_body(3)),
    _shape("huggingface-token", r"api_org_[A-Za-z0-9]{34}(?![A-Za-z0-9_])", check=_random_body(8)),
    _shape("digitalocean-token", r"do[opr]_v1_[a-f0-9]{64}(?![A-Za-z0-9])"),
    _shape("shopify-token", r"shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}(?![A-Za-z0-9])"),
    _shape("docker-token", r"dckr_(?:pat|oat)_[A-Za-z0-9_-]{27,40}(?![A-Za-z0-9_-])"),
    # Atlassian API tokens (ATATT3...), admin keys (ATCTT3...), Bitbucket app passwords (ATBB...).
    _shape("atlassian-api-token", r"AT[AC]TT3[A-Za-z0-9_=-]{100,300}(?![A-Za-z0-9_=-])"),
    _shape("atlassian-api-token", r"ATBB[A-Za-z0-9]{32}(?![A-Za-z0-9])"),
    # Databricks personal access tokens (dapi..., "-2" suffix on some clouds) and OAuth secrets.
    _shape("databricks-token", r"dapi[0-9a-f]{32}(?:-[0-9]{1,2})?(?![A-Za-z0-9-])"),
    _shape("databricks-token", r"dose[0-9a-f]{32}(?![A-Za-z0-9])"),
    # Other vendors' tokens, each known by the prefix and body its vendor documents.
    _Rule(
        "api-token",
        _rx(
            r"(?:glsa_[A-Za-z0-9]{32}_[0-9a-f]{8}"  # Grafana service account
            r"|glc_[A-Za-z0-9+/]{32,400}={0,2}"  # Grafana Cloud
            r"|hv[sbr]\.[A-Za-z0-9_-]{24,400}"  # HashiCorp Vault
            r"|[A-Za-z0-9]{14}\.atlasv1\.[A-Za-z0-9_-]{60,70}"  # Terraform Cloud
            r"|lin_api_[A-Za-z0-9]{40}"  # Linear
            r"|ntn_[0-9]{11}[A-Za-z0-9]{35}"  # Notion
            r"|PMAK-[0-9a-f]{24}-[0-9a-f]{34}"  # Postman
            r"|dp\.(?:pt|st|sa|ct|scim|audit)\.[A-Za-z0-9]{40,44}"  # Doppler
            r"|NRAK-[A-Z0-9]{27}"  # New Relic
            r"|sntry[us]_[A-Za-z0-9+/=_-]{64,400}"  # Sentry
            r"|sbp_[0-9a-f]{40}|sb_secret_[A-Za-z0-9_-]{20,80}"  # Supabase
            r"|pul-[0-9a-f]{40}"  # Pulumi
            r"|gsk_[A-Za-z0-9]{52}"  # Groq
            r"|r8_[A-Za-z0-9]{37}"  # Replicate
            r"|xai-[A-Za-z0-9]{80}"  # xAI
            r"|pplx-[A-Za-z0-9]{48}"  # Perplexity
            r"|[0-9a-f]{32}-us[0-9]{1,2}"  # Mailchimp
            r"|sq0(?:atp|csp)-[A-Za-z0-9_-]{22,43}"  # Square
            r"|AGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}"  # age
            r"|tskey-[a-z]{3,8}-[A-Za-z0-9]{6,40}-[A-Za-z0-9]{16,64}"  # Tailscale
            r"|CFPAT-[A-Za-z0-9_-]{43}"  # Contentful
            r"|dt0c01\.[A-Z0-9]{24}\.[A-Z0-9]{64}"  # Dynatrace
            r"|shippo_(?:live|test)_[0-9a-f]{40}"  # Shippo
            r"|figd_[A-Za-z0-9_-]{40}"  # Figma
            r"|pat[A-Za-z0-9]{14}\.[0-9a-f]{64}"  # Airtable
            r"|LTAI[A-Za-z0-9]{20}"  # Alibaba Cloud access key id
            r")(?![A-Za-z0-9_+/=-])"
        ),
        check=_not_filler,
        needs=(
            "glsa_",
            "glc_",
            "hvs.",
            "hvb.",
            "hvr.",
            ".atlasv1.",
            "lin_api_",
            "ntn_",
            "PMAK-",
            "dp.",
            "NRAK-",
            "sntry",
            "sbp_",
            "sb_secret_",
            "pul-",
            "gsk_",
            "r8_",
            "xai-",
            "pplx-",
            "-us",
            "sq0",
            "AGE-SECRET-KEY-1",
            "tskey-",
            "CFPAT-",
            "dt0c01.",
            "shippo_",
            "figd_",
            "pat",
            "LTAI",
        ),
    ),
    _shape(
        "discord-bot-token",
        # The id's base64 starts with M, N or O, then D, T, j or z (ASCII digits).
        r"[MNO][DTjz](?<![A-Za-z0-9_-][MNO][DTjz])[A-Za-z0-9_-]{22,26}\.[A-Za-z0-9_-]{6}\."
        r"[A-Za-z0-9_-]{27,40}"
        r"(?![A-Za-z0-9_-])",
        check=_discord_check,
    ),
    _keyed(
        "datadog-api-key",
        r"(?:datadog|dd)[_.-]?(?:api|app)[_.-]?key",
        r"(?:[a-f0-9]{40}|[a-f0-9]{32})(?![a-z0-9])",
    ),
    _keyed(
        "heroku-api-key",
        r"heroku[a-z0-9_.-]{0,30}?(?:api[_.-]?key|token|key|secret|password)",
        rf"{_UUID}(?![a-z0-9-])",
    ),
    _shape("heroku-api-key", r"HRKU-(?<![A-Za-z0-9_-]HRKU-)[A-Za-z0-9_-]{60}(?![A-Za-z0-9_-])"),
    _keyed("kaggle-api-key", r"kaggle[_.-]?key", r"[a-f0-9]{32}(?![a-z0-9])"),
    _Rule(
        "kaggle-api-key",
        # kaggle.json: {"username": "...", "key": "..."}
        _rx(r"\"key\"[ \t]*:[ \t]*\"(?P<s>[a-f0-9]{32})\""),
        "s",
        needs=("username", "kaggle"),
        before=None,
    ),
    _Rule(
        "jwt",
        _rx(
            # The signature may be missing: a token cut at a chunk boundary, or unsigned.
            r"eyJ(?<![A-Za-z0-9_-]eyJ)[A-Za-z0-9_-]{8,8192}\.eyJ[A-Za-z0-9_-]{8,8192}"
            r"(?:\.[A-Za-z0-9_-]{0,8192})?(?![A-Za-z0-9_.-])"
        ),
    ),
    _Rule(
        "bearer-token",
        _rx(
            # Bearer (RFC 6750), "Token" (GitHub, Django REST framework), SSWS (Okta), ApiKey.
            r"authorization[\"']?[ \t]*[:=][ \t]*[\"']?[ \t]*(?:bearer|token|ssws|apikey)[ \t]+"
            r"(?P<s>[a-z0-9._~+/=-]{8,8192})(?![a-z0-9._~+/=-])"
        ),
        "s",
        check=_not_placeholder,
        low=True,
    ),
    _Rule(
        "bearer-token",
        # The value in a headers dict: {"Authorization": "Bearer ..."}
        _rx(r"bearer[ \t]+(?P<s>[a-z0-9._~+/=-]{8,8192})(?![a-z0-9._~+/=-])"),
        "s",
        check=_not_placeholder,
        before=lambda c: c in ('"', "'", "`"),
        low=True,
    ),
    _Rule(
        "basic-auth",
        _rx(
            r"authorization[\"']?[ \t]*[:=][ \t]*[\"']?[ \t]*basic[ \t]+"
            r"(?P<s>[a-z0-9+/]{6,4096}={0,2})(?![a-z0-9+/=])"
        ),
        "s",
        check=_not_placeholder,
        low=True,
    ),
    *(
        _Rule(
            "basic-auth",
            # curl -u user:password, curl --user user:password
            _rx(rf"{flag}[ \t]+[\"']?[^\s:\"']{{1,256}}:(?P<s>[^\s\"']{{1,256}})"),
            "s",
            check=_not_placeholder,
            before=_after_space,
        )
        for flag in ("-u", "--user")
    ),
    *(
        _Rule(
            "basic-auth",
            # requests' auth=("user", "password"), HTTPBasicAuth("user", "password")
            _rx(rf"{call}[ \t]*[\"'][^\"'\n]{{1,256}}[\"'][ \t]*,[ \t]*[\"'](?P<s>[^\"'\n]{{1,256}})[\"']"),
            "s",
            check=_auth_password,
            before=None,
        )
        for call in (r"auth[ \t]*=[ \t]*\(?", r"BasicAuth\(", r"DigestAuth\(")
    ),
    _Rule(
        "password-assignment",
        # .netrc: machine api.example.com login ada password s3cret
        _rx(r"login\s{1,64}\S{1,256}\s{1,64}password\s{1,64}(?P<s>\S{1,256})"),
        "s",
        # "login with password reset" is prose: a netrc password is not a plain word.
        check=lambda v: len(v) >= 6 and _classes(v) >= 2 and not _is_placeholder(v),
    ),
    _Rule(
        "password-assignment",
        # Password options of command-line tools: docker/podman/helm login -p, sshpass -p,
        # redis-cli -a, mysql -pPASSWORD (glued), and --password / --token VALUE in any command.
        _rx(
            r"(?:(?:docker|podman|nerdctl|buildah|skopeo|helm|oras)(?:[ \t]+registry)?[ \t]+login[^\n]{0,200}?[ \t]-p"
            r"|sshpass[ \t]+-p|redis-cli[^\n]{0,200}?[ \t]-a|mysql(?:dump|admin)?[^\n]{0,200}?[ \t]-p(?=[^\s-])"
            r"|--(?:password|passwd|pass|token|api-key)(?=[ \t]))"
            r"[ \t]*[\"']?(?P<s>[^\s\"'$-][^\s\"']{5,255})"
        ),
        "s",
        check=lambda v: not _is_placeholder(v) and not v.startswith(("<", "{", "%")),
        needs=("-p", "-a", "--pass", "--token", "--api-key"),
    ),
    _Rule(
        "api-token",
        # Weights & Biases: wandb.login(key="..."), 40 hex characters (or 86 on dedicated hosts).
        _rx(r"wandb\.login\([^)]{0,200}?key[ \t]*=[ \t]*[\"'](?P<s>[0-9a-f]{40}|[A-Za-z0-9_-]{40,100})[\"']"),
        "s",
        needs=("wandb.login",),
        before=None,
    ),
    _Rule(
        "basic-auth",
        # ~/.docker/config.json: {"auths": {"registry": {"auth": base64("user:password")}}}
        _rx(r"\"auth\"[ \t]*:[ \t]*\"(?P<s>[A-Za-z0-9+/]{8,4096}={0,2})\""),
        "s",
        check=lambda v: b":" in (_b64decode(v) or b""),
        needs=('"auth"',),
        before=None,
    ),
    _Rule(
        "password-assignment",
        # XML settings (Maven settings.xml, NuGet.config, .NET app.config): <password>...</password>
        _rx(
            r"<(?P<tag>(?i:password|passwd|secret|token|api[_-]?key|apikey|client[_-]?secret|access[_-]?key"
            r"|secret[_-]?key|private[_-]?key|auth[_-]?token))>[ \t]*(?P<s>[^<>\s]{6,512})[ \t]*</(?P=tag)>"
        ),
        "s",
        check=lambda v: _common_ok(v, True) and not _is_placeholder(v),
        needs=("<",),
        before=None,
    ),
    _Rule(
        "password-assignment",
        # Kubernetes and compose env lists: the name on one line, the value on the next.
        _rx(
            r"name:[ \t]*[\"']?(?P<k>[A-Za-z0-9_.-]{0,64}(?i:pass(?:word|wd)?|pwd|secret|token|api[_-]?key|apikey"
            r"|access[_-]?key|private[_-]?key|auth[_-]?key|credentials?|[a-z0-9][_-]key)[A-Za-z0-9_.-]{0,64})[\"']?"
            r"[ \t]*\r?\n"
            r"[ \t]*value:[ \t]*[\"']?(?P<s>[^\s\"']{6,512})"
        ),
        "s",
        check=lambda v: _common_ok(v, False) and not v.startswith(("$", "{{")),
        needs=("value:",),
    ),
    _Rule(
        "url-password",
        # "#" is not valid in a URL password, but pasted passwords hold it unencoded.
        _rx(r"://[^\s:/@?#\[\]\"'<>]{0,256}:(?P<s>[^\s/?\"'<>]{1,256})@"),
        "s",
        check=_not_placeholder,
        before=_after_scheme,
    ),
)

# Telegram bot tokens: 8-10 digit bot id, colon, 34-35 character secret.
_TELEGRAM_RE = _rx(r":[A-Za-z0-9_-]{34,35}(?![A-Za-z0-9_-])")


def _telegram_candidates(text: str, low: str) -> Iterator[_Cand]:
    if ":" not in text:
        return
    for m in _TELEGRAM_RE.finditer(text):
        colon = start = m.start()
        while start > 0 and colon - start <= 10 and _is_digit(text[start - 1]):
            start -= 1
        secret = m.group()[1:]
        if 8 <= colon - start <= 10 and _mixed_case(secret) and _not_filler(secret):
            yield start, m.end(), "telegram-bot-token"


# The tail of a PEM block whose BEGIN line is in another chunk: key lines, then the END line.
_KEY_END_RE = _rx(r"-{4,5} ?END[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)? ?-{4,5}")
_KEY_LINE_RE = _rx(r"[ \t]*(?:[A-Za-z0-9+/=]{16,}|[A-Za-z-]{2,40}:.*|=[A-Za-z0-9+/]{4})[ \t]*\r?")
_KEY_LAST_LINE_RE = _rx(r"[ \t]*[A-Za-z0-9+/]{2,}={0,2}[ \t]*\r?")


def _key_tail_candidates(text: str, low: str) -> Iterator[_Cand]:
    if "PRIVATE KEY" not in text:
        return
    for m in _KEY_END_RE.finditer(text):
        start = line_end = m.start()
        # Walk back over key material, at most 200 lines, to the first line that is not one.
        for i in range(200):
            if line_end == 0 or text[line_end - 1] != "\n":
                break
            line_start = text.rfind("\n", max(0, line_end - 1 - 4096), line_end - 1) + 1
            # The last line of the key material may be short: "AbCd==".
            if not (
                _KEY_LINE_RE.fullmatch(text, line_start, line_end - 1)
                or (i == 0 and _KEY_LAST_LINE_RE.fullmatch(text, line_start, line_end - 1))
            ):
                break
            start = line_end = line_start
        if start < m.start():
            yield start, m.end(), "private-key"


# --- password / token / api_key / secret assignments -----------------------------------------

_ASSIGN_RE = _rx(
    r"(?P<kw>pass(?:word|wd|phrase)?|pwd|secret(?:[_.-]?key)?|token|api[_.-]?key|apikey"
    r"|access[_.-]?key|private[_.-]?key|auth[_.-]?key|signing[_.-]?key|encryption[_.-]?key"
    r"|master[_.-]?key)(?P<kq>[\"']?)\]?(?P<sep>[ \t]*(?:=>|=|:)[ \t]*)"
)
_VALUE_RE = _rx(
    r"(?P<pre>[rRbBuU]{0,2})(?:\"(?P<dq>(?:[^\"\\\n]|\\.){0,512})\""
    r"|'(?P<sq>(?:[^'\\\n]|\\.){0,512})')"
    # A bare value stops at brackets: `token = client.login(password="...")` has two keys.
    r"|(?P<bare>[^\s\"'`=()\[\]{}][^\s\"'`()\[\]{}]{0,255})"
)
_ASSIGN_NEEDS = ("pass", "pwd", "secret", "token", "key")
# Keys that end in a keyword but never hold a credential: tokenizer special tokens, paging.
_DENY_KEY_RE = _rx(
    r"(?:.*[_-])?(?:bos|eos|pad|unk|sep|cls|mask|start|end|eot|special|page|next|nextpage"
    r"|continuation|sync|max|min|num|image|audio|video|begin|stop|ignore|newline)[_-]?token"
    r"|.*public.*"
)
_IDENT_RE = _rx(r"[A-Za-z_][A-Za-z0-9_]*")
# An attribute or import path: config.password, process.env.TOKEN, pkg.module:Class
_DOTTED_RE = _rx(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+(?::[A-Za-z_][A-Za-z0-9_.]*)?")
# `password: SecretStr` is a type annotation, not YAML.
_TYPE_NAME_RE = _rx(r"(?:[A-Z]+[a-z]+)+[A-Z]*")
# What may precede KEY=value at the start of a line in .env, shell, Dockerfile, compose files.
_LINE_PREFIX_RE = _rx(
    r"[ \t]*-[ \t]+[\"']?"
    r"|[ \t]*(?:export|set|setx|ENV|env|declare -x|local|readonly)[ \t]+"
    r"|[\"']?"
)
_VOWEL_RE = _rx(r"[AEIOUYaeiouy]")
_SECTION_RE = _rx(r"\[\[?[A-Za-z0-9_. :\"'-]{1,100}\]\]?")
_INI_LINE_RE = _rx(r"[A-Za-z0-9_.\"'-]{1,100}[ \t]*[=:][ \t]*\S.{0,1000}")
# Another key=value pair before this one on the line: a libpq or ODBC connection string.
_KV_BEFORE_RE = _rx(r"(?:^|[ \t\"'])[A-Za-z_][A-Za-z0-9_]*=[^\s=,()]+[ \t]+$")
_CODE_START = tuple("$%@*&!|>\\<")
_PATH_RE = _rx(r"~?/|\.\.?/|[A-Za-z]:\\")
_NAME_WORD_RE = _rx(r"(?i:token|secret|api[_.-]?key|password)")
# Publishable keys are public by design.
_PUBLIC_RE = _rx(r"pk_(?:live|test)_")


def _assignment_candidates(text: str, low: str) -> Iterator[_Cand]:
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


def _common_ok(value: str, strong: bool) -> bool:
    if len(value) < (6 if strong else 8) or "://" in value or "==" in value:
        return False
    if _PATH_RE.match(value) or _PUBLIC_RE.match(value) or _is_placeholder(value):
        return False
    if strong:
        return True
    # Weak keys (token, secret, api_key) need a value that reads neither as a plain word nor as
    # the name of a setting ("s3.session-token").
    return _classes(value) >= 2 and _NAME_WORD_RE.search(value) is None


def _quoted_ok(value: str, strong: bool) -> bool:
    if any(c.isspace() for c in value) or "${" in value or "%(" in value:
        return False
    if ("{" in value and "}" in value) or ("[" in value and "]" in value):
        return False  # a format template or a regex
    return not _code_path(value) and _common_ok(value, strong)


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
    if not (_mixed_case(value) or _classes(value) >= 3):
        return True  # self.pw2, foo.bar
    # Names are made of words: long pieces, each with a vowel ("CxecLjqp96.nw" is not).
    pieces = [p for p in _PIECE_RE.findall(value) if len(p) >= 3 and p.isalpha()]
    return _avg_piece(value) >= _MAX_AVG_PIECE and all(_VOWEL_RE.search(p) for p in pieces)


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
    return len(value) >= 16 and _classes(value) >= 3 and _avg_piece(value) < _MAX_AVG_PIECE


def _password_like(value: str) -> bool:
    """Letters of both cases and digits, in short runs: ``Velvet2325_``, ``t9BDc63ZgCJ.n2``."""
    return _classes(value) >= 3 and _avg_piece(value) < _MAX_AVG_PIECE + 1


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
    if not _common_ok(value, strong):
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


# --- generic high-entropy tokens -------------------------------------------------------------

# A token ends at a non-token character or after base64 padding.
_TOKEN_RE = _rx(r"(?<![A-Za-z0-9+/_-])[A-Za-z0-9+/_-]{32,}(?:={1,3}|(?![A-Za-z0-9+/=_-]))")
_HEXISH_RE = _rx(r"[0-9a-fA-F-]+")
_PIECE_RE = _rx(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|[0-9]+")
# Parts of a name: word, Word, WORD, CamelCase, hex, number with unit, short code ("8B", "v0").
_SIMPLE_PART_RE = _rx(
    r"[A-Za-z][a-z]*[0-9]*|[A-Z]+[0-9]*|(?:[A-Z][a-z]+)+[A-Z0-9]*|[0-9]+[A-Za-z]{0,3}|[0-9a-f]+"
    r"|[0-9A-F]+|[A-Za-z0-9]{0,8}"
)
_PATH_WORD_RE = _rx(r"[a-z][a-z0-9]*(?:[._-][a-z0-9]+)*|[A-Z][a-z]+")
# What may precede a token that is a labelled hash or inline image data, not a secret.
_HASH_CONTEXT_RE = _rx(
    r"(?i:sha(?:1|224|256|384|512)|sha3[_-]?[0-9]+|md5|blake2[bs]?|h1|hash|digest|checksum"
    r"|integrity|etag)[\"']?[ \t]*[:=][ \t]*[\"']?$"
    r"|;base64,$"
    r"|\"image/[a-z0-9.+-]+\"[ \t]*:[ \t]*\[?[ \t]*\"$"
)
_CONSONANTS_RE = _rx(r"[bcdfghjklmnpqrstvwxz]{5}")
_SRI_RE = _rx(r"(?i:sha(?:1|256|384|512)|md5)-")
# Base64 of PNG, JPEG, GIF, WebP, SVG, XML, PDF headers.
_IMAGE_MAGIC = ("iVBORw0KGgo", "/9j/", "R0lGOD", "UklGR", "PHN2Zy", "PD94bWwg", "JVBERi0")
_AWS_NEAR_RE = _rx(r"(?:AKIA|ASIA)[A-Z0-9]{16}|(?<![A-Za-z])(?i:aws)")
_AWS_SECRET_RE = _rx(r"[A-Za-z0-9/+]{40}")

_SAMPLE = 1024
_MAX_PATH = 4096
_MIN_ENTROPY = 4.0
_MAX_AVG_PIECE = 3.0
_MIN_TRANSITIONS = 0.3


def _entropy(value: str) -> float:
    """Shannon entropy of the characters of value, in bits per character."""
    counts: dict[str, int] = {}
    for c in value:
        counts[c] = counts.get(c, 0) + 1
    n = len(value)
    return -sum(k / n * math.log2(k / n) for k in counts.values())


def _avg_piece(value: str) -> float:
    """Mean length of the words, acronyms and numbers in value (camelCase and snake_case aware)."""
    pieces = _PIECE_RE.findall(value)
    return sum(map(len, pieces)) / len(pieces) if pieces else 0.0


def _transitions(value: str) -> float:
    """Share of adjacent alphanumeric pairs that switch between lower, upper and digit."""
    prev = ""
    pairs = switches = 0
    for c in value:
        kind = "l" if "a" <= c <= "z" else "u" if "A" <= c <= "Z" else "d" if _is_digit(c) else ""
        if kind and prev:
            pairs += 1
            switches += kind != prev
        prev = kind
    return switches / pairs if pairs else 0.0


def _base64_prose(value: str) -> bool:
    """True if value is base64 of ordinary text (words and spaces)."""
    raw = _b64decode(value)
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
    has_digit = any(_is_digit(c) for c in value)
    if has_lower + has_upper + has_digit < 2 or _entropy(value) < _MIN_ENTROPY:
        return False
    parts = re.split(r"[-_+/]", value)
    if all(_SIMPLE_PART_RE.fullmatch(p) for p in parts):
        return False  # test-8000Hz-le-3ch, climate-64f99dc2a5067f6b65531bab, Org/Model-8B-v0
    if has_lower and has_upper:
        # Random data switches case every other character and has no long words.
        if _avg_piece(value) >= _MAX_AVG_PIECE or _transitions(value) < _MIN_TRANSITIONS:
            return False
    else:
        # One case and digits: random data has few vowels and is not snake_case or kebab-case.
        if len(parts) > 2:
            return False
        letters = "".join(c for c in value.lower() if "a" <= c <= "z")
        vowels = sum(c in "aeiouy" for c in letters) / max(len(letters), 1)
        # Words have vowels and short consonant clusters; random letters have neither.
        if vowels >= 0.4 or (vowels >= 0.25 and _CONSONANTS_RE.search(letters) is None):
            return False
        if sum(len(p) for p in parts if len(p) >= 3 and p.isalpha()) >= 0.5 * len(value):
            return False
    sequential = sum(ord(value[i + 1]) - ord(value[i]) == 1 for i in range(len(value) - 1))
    if sequential > 0.3 * len(value):
        return False  # ABCDEFGHIJ...
    return not _base64_prose(value)


# Blocks of public material: certificates, public keys, signatures (BEGIN and END found apart,
# then paired, so that a text of many BEGIN lines stays linear).
_PUBLIC_BEGIN_RE = _rx(
    r"-{4,5} ?BEGIN (?P<label>CERTIFICATE|TRUSTED CERTIFICATE|X509 CRL|(?:NEW )?CERTIFICATE REQUEST"
    r"|(?:RSA |SSH2 )?PUBLIC KEY|PGP PUBLIC KEY BLOCK|PGP SIGNATURE) ?-{4,5}"
)
_PUBLIC_END_RE = _rx(
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
    head = _b64decode(token[:48])
    if head is None or len(head) < 8:
        return False
    size = int.from_bytes(head[:4], "big")
    return 3 <= size <= 40 and head[4 : 4 + size].startswith(_SSH_KEY_TYPES)


def _entropy_candidates(text: str, low: str) -> Iterator[_Cand]:
    public = _public_blocks(text)
    for m in _TOKEN_RE.finditer(text):
        start = m.start()
        token = m.group().rstrip("=")
        end = start + len(token)
        if token.startswith(_IMAGE_MAGIC) or _SRI_RE.match(token) or _PUBLIC_RE.match(token):
            continue
        if _ssh_public_key(token) or _inside(public, start):
            continue  # public keys and certificates are public
        if _HASH_CONTEXT_RE.search(text, max(0, start - 40), start):
            continue
        if (
            len(token) == 40
            and _AWS_SECRET_RE.fullmatch(token)
            and _mixed_case(token)
            and _not_filler(token)
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


# --- resolution ------------------------------------------------------------------------------

_FINDERS: tuple[_Finder, ...] = (
    *(rule.find for rule in _RULES),
    _telegram_candidates,
    _key_tail_candidates,
    _assignment_candidates,
    _entropy_candidates,
)
_ECHO_MIN = 8
_MAX_PASSES = 8
_ECHO_MAX = 200


def _drop_marker_overlaps(cands: list[_Cand], markers: list[tuple[int, int]]) -> list[_Cand]:
    """Drop candidates that overlap an existing ``[REDACTED:...]`` marker."""
    if not markers:
        return cands
    cands.sort()
    kept: list[_Cand] = []
    j = 0
    for cand in cands:
        while j < len(markers) and markers[j][1] <= cand[0]:
            j += 1
        if j == len(markers) or markers[j][0] >= cand[1]:
            kept.append(cand)
    return kept


def _merge(cands: list[_Cand]) -> list[_Cand]:
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
        and _classes(secret) >= 2
    )


def _lower(text: str) -> str:
    low = text.lower()
    if len(low) != len(text):
        # U+0130 lower-cases to two characters; keep offsets aligned by lowering ASCII only.
        low = text.translate(_ASCII_LOWER)
    return low


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def _spans(text: str) -> list[_Cand]:
    """Return the (start, end, kind) spans that :func:`redact` replaces, in order."""
    low = _lower(text)
    markers = [m.span() for m in _MARKER_RE.finditer(text)]
    cands: list[_Cand] = []
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
        echoes: list[_Cand] = []
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
