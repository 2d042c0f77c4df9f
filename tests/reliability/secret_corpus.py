"""A labelled set of fake secrets for the secret redactor (:func:`nbmemory.ingest.redact.redact`).

Positives are fake credentials generated with a seeded RNG from each vendor's documented format
(prefix, alphabet, length, checksum-free), placed in the contexts they turn up in: code
assignments, YAML, JSON, ``.env`` and shell lines, URLs, prose, notebook outputs. None of them
is real. Negatives are look-alikes that are not secrets: UUIDs, git SHAs, lock-file hashes,
base64 images, public keys and certificates, documentation placeholders, version strings, long
identifiers.

Decisions
---------
* AWS's documented example keys (``AKIAIOSFODNN7EXAMPLE``,
  ``wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY``) are *positives*: they have the exact format of a
  real key, and an allow-list of "example" values is a hole a real key could fall through.
  Fillers that break the format (``AKIAXXXXXXXXXXXXXXXX``, ``ghp_xxxx…``, ``sk-...``) are
  negatives.
* A secret whose format is not self-identifying (40 base64 characters for an AWS secret key,
  32 hex characters for a Twilio auth token or a Datadog key, a UUID for Heroku) is generated
  only next to the key name the vendor documents (``AWS_SECRET_ACCESS_KEY=``,
  ``TWILIO_AUTH_TOKEN:``): alone in prose it cannot be told from a digest.
* A case counts as redacted when no piece of the secret of ``min(len, WINDOW)`` characters is
  left in the output (half a token is a leak). Key names, URL users and hosts may stay.
* The false-positive rate is the share of negative texts that :func:`redact` changes at all.

Run ``python -m bench.ingest.secrets_bench`` for the figures; ``tests/reliability/test_secrets.py``
asserts the bounds.
"""

from __future__ import annotations

import base64
import json
import os
import random
import string
import struct
import zlib
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from nbmemory.ingest.redact import redact

if TYPE_CHECKING:
    from nbmemory.embed.base import Embedder

__all__ = [
    "WINDOW",
    "LookAlike",
    "PipelineScore",
    "SecretCase",
    "SecretsScore",
    "leaked",
    "negatives",
    "notebook_cells",
    "pipeline_score",
    "positives",
    "score",
]

# A secret counts as leaked when any piece of this many characters survives.
WINDOW = 10
SEED = 20240611

LOWER, UPPER, DIGITS = string.ascii_lowercase, string.ascii_uppercase, string.digits
ALNUM = LOWER + UPPER + DIGITS
HEX = "0123456789abcdef"
B64 = ALNUM + "+/"
URLSAFE = ALNUM + "-_"
BASE32 = UPPER + "234567"


@dataclass(frozen=True)
class SecretCase:
    """One fake secret in one context.

    Parameters
    ----------
    vendor:
        Who issues it (``aws``, ``github``, ...) or its family (``connection-string``).
    format:
        Which of the vendor's formats (``access-key-id``, ``fine-grained-pat``, ...).
    kind:
        The :data:`~nbmemory.ingest.redact.KINDS` label the redactor should give it.
    secrets:
        The parts that must not survive (one value; each body line of a private key).
    text:
        The text the secret is embedded in.
    context:
        The shape of that text (``python``, ``yaml``, ``json``, ``env``, ``prose``, ...).
    also_ok:
        Other labels that count as right (a password in a URL is also a ``url-password``).
    """

    vendor: str
    format: str
    kind: str
    secrets: tuple[str, ...]
    text: str
    context: str
    also_ok: tuple[str, ...] = ()


@dataclass(frozen=True)
class LookAlike:
    """A text that holds no secret but looks like one (``family`` says how)."""

    family: str
    text: str


def _rand(rng: random.Random, alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _uuid(rng: random.Random) -> str:
    h = _rand(rng, HEX, 32)
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{rng.choice('89ab')}{h[17:20]}-{h[20:]}"


# --- vendor formats ---------------------------------------------------------------------------
# Each format: (vendor, format, kind, make(rng) -> secret, keys). keys = () means the value names
# itself (prefix or structure) and goes in every context; otherwise only next to those key names.

Maker = Callable[[random.Random], str]


@dataclass(frozen=True)
class _Format:
    vendor: str
    format: str
    kind: str
    make: Maker
    keys: tuple[str, ...] = ()
    also_ok: tuple[str, ...] = ()


def _prefixed(prefix: str, alphabet: str, n: int) -> Maker:
    """A maker of ``prefix`` + n random characters of ``alphabet``."""
    return lambda rng: prefix + _rand(rng, alphabet, n)


def _jwt(rng: random.Random, alg: str = "HS256") -> str:
    header = _b64url(json.dumps({"alg": alg, "typ": "JWT"}, separators=(",", ":")).encode())
    claims = {
        "sub": _rand(rng, DIGITS, 10),
        "iss": rng.choice(["https://auth.example.com/", "accounts.example.org", "svc-billing"]),
        "iat": 1718000000 + rng.randrange(10**6),
        "exp": 1719000000 + rng.randrange(10**6),
        "scope": rng.choice(["read", "read write", "admin"]),
    }
    payload = _b64url(json.dumps(claims, separators=(",", ":")).encode())
    sig_bytes = {"HS256": 32, "ES256": 64, "RS256": 256}[alg]
    return f"{header}.{payload}.{_b64url(rng.randbytes(sig_bytes))}"


def _discord(rng: random.Random) -> str:
    bot_id = str(rng.randrange(10**17, 10**19))
    return f"{_b64url(bot_id.encode())}.{_rand(rng, URLSAFE, 6)}.{_rand(rng, URLSAFE, 38)}"


def _atlassian(rng: random.Random) -> str:
    return "ATATT3xFfGF0" + _rand(rng, URLSAFE, 170) + "=" + _rand(rng, HEX.upper(), 8)


FORMATS: tuple[_Format, ...] = (
    # AWS: access key ids are base32 after a 4-letter prefix; secret keys are 40 base64 chars.
    _Format("aws", "access-key-id", "aws-access-key-id", lambda r: "AKIA" + _rand(r, BASE32, 16)),
    _Format("aws", "temporary-access-key-id", "aws-access-key-id", lambda r: "ASIA" + _rand(r, BASE32, 16)),
    _Format(
        "aws",
        "secret-access-key",
        "aws-secret-access-key",
        lambda r: _rand(r, B64, 38) + _rand(r, UPPER, 1) + _rand(r, LOWER, 1),
        keys=("AWS_SECRET_ACCESS_KEY", "aws_secret_access_key", "SecretAccessKey"),
    ),
    # GCP
    _Format("gcp", "api-key", "google-api-key", lambda r: "AIza" + _rand(r, URLSAFE, 35)),
    _Format(
        "gcp",
        "oauth-client-secret",
        "google-oauth-client-secret",
        lambda r: "GOCSPX-" + _rand(r, URLSAFE, 28),
    ),
    _Format("gcp", "oauth-access-token", "google-oauth-token", lambda r: "ya29.a0" + _rand(r, URLSAFE, 160)),
    # Azure
    _Format(
        "azure",
        "storage-account-key",
        "azure-storage-key",
        lambda r: _b64(r.randbytes(64)),
        keys=("AZURE_STORAGE_KEY", "AZURE_STORAGE_ACCOUNT_KEY", "AccountKey"),
    ),
    _Format(
        "azure",
        "entra-client-secret",
        "azure-client-secret",
        lambda r: _rand(r, ALNUM + "_~.", 3) + r.choice(DIGITS) + "Q~" + _rand(r, ALNUM + "_~.-", 34),
    ),
    _Format(
        "azure",
        "shared-access-key",
        "azure-storage-key",
        lambda r: _b64(r.randbytes(32)),
        keys=("SharedAccessKey",),
    ),
    # GitHub
    *(
        _Format("github", f"{p}-token", "github-token", _prefixed(f"{p}_", ALNUM, 36))
        for p in ("ghp", "gho", "ghu", "ghs", "ghr")
    ),
    _Format(
        "github",
        "fine-grained-pat",
        "github-token",
        lambda r: "github_pat_" + _rand(r, ALNUM, 22) + "_" + _rand(r, ALNUM, 59),
    ),
    # GitLab
    _Format("gitlab", "personal-access-token", "gitlab-token", lambda r: "glpat-" + _rand(r, URLSAFE, 20)),
    _Format(
        "gitlab",
        "routable-pat",
        "gitlab-token",
        lambda r: (
            "glpat-"
            + _rand(r, URLSAFE, 27)
            + "."
            + _rand(r, "0123456789abcdefghijklmnopqrstuvwxyz", 2)
            + "."
            + _rand(r, "0123456789abcdefghijklmnopqrstuvwxyz", 9)
        ),
    ),
    _Format("gitlab", "pipeline-trigger-token", "gitlab-token", lambda r: "glptt-" + _rand(r, HEX, 40)),
    _Format("gitlab", "deploy-token", "gitlab-token", lambda r: "gldt-" + _rand(r, URLSAFE, 20)),
    _Format("gitlab", "runner-token", "gitlab-token", lambda r: "glrt-" + _rand(r, URLSAFE, 20)),
    _Format(
        "gitlab", "runner-registration-token", "gitlab-token", lambda r: "GR1348941" + _rand(r, URLSAFE, 20)
    ),
    # Slack
    _Format(
        "slack",
        "bot-token",
        "slack-token",
        lambda r: f"xoxb-{_rand(r, DIGITS, 12)}-{_rand(r, DIGITS, 13)}-{_rand(r, ALNUM, 24)}",
    ),
    _Format(
        "slack",
        "user-token",
        "slack-token",
        lambda r: (
            f"xoxp-{_rand(r, DIGITS, 12)}-{_rand(r, DIGITS, 12)}-{_rand(r, DIGITS, 13)}-{_rand(r, HEX, 32)}"
        ),
    ),
    _Format(
        "slack",
        "app-token",
        "slack-token",
        lambda r: f"xapp-1-A{_rand(r, UPPER + DIGITS, 10)}-{_rand(r, DIGITS, 13)}-{_rand(r, HEX, 64)}",
    ),
    _Format(
        "slack",
        "config-token",
        "slack-token",
        lambda r: f"xoxe.xoxp-1-{_rand(r, ALNUM, 140)}",
    ),
    # Stripe
    _Format("stripe", "secret-key", "stripe-key", lambda r: "sk_live_" + _rand(r, ALNUM, 99)),
    _Format("stripe", "test-secret-key", "stripe-key", lambda r: "sk_test_" + _rand(r, ALNUM, 24)),
    _Format("stripe", "restricted-key", "stripe-key", lambda r: "rk_live_" + _rand(r, ALNUM, 24)),
    _Format("stripe", "webhook-secret", "stripe-key", lambda r: "whsec_" + _rand(r, ALNUM, 32)),
    # OpenAI
    _Format(
        "openai",
        "project-key",
        "openai-api-key",
        lambda r: "sk-proj-" + _rand(r, URLSAFE, 74) + "T3BlbkFJ" + _rand(r, URLSAFE, 74),
    ),
    _Format(
        "openai", "service-account-key", "openai-api-key", lambda r: "sk-svcacct-" + _rand(r, URLSAFE, 120)
    ),
    _Format("openai", "admin-key", "openai-api-key", lambda r: "sk-admin-" + _rand(r, URLSAFE, 120)),
    _Format(
        "openai",
        "legacy-key",
        "openai-api-key",
        lambda r: "sk-" + _rand(r, ALNUM, 20) + "T3BlbkFJ" + _rand(r, ALNUM, 20),
    ),
    # Anthropic
    _Format(
        "anthropic", "api-key", "anthropic-api-key", lambda r: "sk-ant-api03-" + _rand(r, URLSAFE, 93) + "AA"
    ),
    _Format(
        "anthropic",
        "admin-key",
        "anthropic-api-key",
        lambda r: "sk-ant-admin01-" + _rand(r, URLSAFE, 93) + "AA",
    ),
    # Hugging Face
    _Format("huggingface", "user-token", "huggingface-token", lambda r: "hf_" + _rand(r, ALNUM, 34)),
    _Format("huggingface", "org-token", "huggingface-token", lambda r: "api_org_" + _rand(r, ALNUM, 34)),
    # Twilio
    _Format("twilio", "api-key-sid", "twilio-api-key", lambda r: "SK" + _rand(r, HEX, 32)),
    _Format(
        "twilio",
        "auth-token",
        "twilio-api-key",
        lambda r: _rand(r, HEX, 32),
        keys=("TWILIO_AUTH_TOKEN", "twilio_auth_token"),
        also_ok=("password-assignment",),
    ),
    # SendGrid, Mailgun
    _Format(
        "sendgrid",
        "api-key",
        "sendgrid-api-key",
        lambda r: f"SG.{_rand(r, URLSAFE, 22)}.{_rand(r, URLSAFE, 43)}",
    ),
    _Format("mailgun", "private-api-key", "mailgun-api-key", lambda r: "key-" + _rand(r, HEX, 32)),
    _Format(
        "mailgun",
        "api-key",
        "mailgun-api-key",
        lambda r: f"{_rand(r, HEX, 32)}-{_rand(r, HEX, 8)}-{_rand(r, HEX, 8)}",
        keys=("MAILGUN_API_KEY", "mailgun_api_key"),
        also_ok=("password-assignment",),
    ),
    # Package registries
    _Format("npm", "access-token", "npm-token", lambda r: "npm_" + _rand(r, ALNUM, 36)),
    _Format("pypi", "api-token", "pypi-token", lambda r: "pypi-AgEIcHlwaS5vcmc" + _rand(r, URLSAFE, 150)),
    _Format(
        "pypi",
        "test-api-token",
        "pypi-token",
        lambda r: "pypi-AgENdGVzdC5weXBpLm9yZw" + _rand(r, URLSAFE, 120),
    ),
    _Format("docker", "personal-access-token", "docker-token", lambda r: "dckr_pat_" + _rand(r, URLSAFE, 27)),
    _Format("docker", "org-access-token", "docker-token", lambda r: "dckr_oat_" + _rand(r, URLSAFE, 32)),
    # Cloud and SaaS
    *(
        _Format("digitalocean", f"{p}-token", "digitalocean-token", _prefixed(f"{p}_v1_", HEX, 64))
        for p in ("dop", "doo", "dor")
    ),
    *(
        _Format("shopify", f"{p}-token", "shopify-token", _prefixed(f"{p}_", HEX, 32))
        for p in ("shpat", "shpca", "shppa", "shpss")
    ),
    _Format("atlassian", "api-token", "atlassian-api-token", _atlassian),
    _Format(
        "atlassian", "bitbucket-app-password", "atlassian-api-token", lambda r: "ATBB" + _rand(r, ALNUM, 32)
    ),
    _Format(
        "atlassian",
        "legacy-api-token",
        "password-assignment",
        lambda r: _rand(r, ALNUM, 24),
        keys=("JIRA_API_TOKEN", "CONFLUENCE_API_TOKEN", "ATLASSIAN_API_TOKEN"),
    ),
    _Format("databricks", "personal-access-token", "databricks-token", lambda r: "dapi" + _rand(r, HEX, 32)),
    _Format("databricks", "workspace-token", "databricks-token", lambda r: "dapi" + _rand(r, HEX, 32) + "-2"),
    _Format("databricks", "oauth-secret", "databricks-token", lambda r: "dose" + _rand(r, HEX, 32)),
    _Format(
        "telegram",
        "bot-token",
        "telegram-bot-token",
        lambda r: f"{r.randrange(10**8, 10**10)}:AA{_rand(r, URLSAFE, 33)}",
    ),
    _Format("discord", "bot-token", "discord-bot-token", _discord),
    _Format(
        "datadog",
        "api-key",
        "datadog-api-key",
        lambda r: _rand(r, HEX, 32),
        keys=("DD_API_KEY", "DATADOG_API_KEY", "dd_api_key"),
    ),
    _Format(
        "heroku",
        "api-key",
        "heroku-api-key",
        _uuid,
        keys=("HEROKU_API_KEY", "heroku_api_key"),
    ),
    _Format("heroku", "platform-token", "heroku-api-key", lambda r: "HRKU-" + _rand(r, URLSAFE, 60)),
    _Format("kaggle", "api-key", "kaggle-api-key", lambda r: _rand(r, HEX, 32), keys=("KAGGLE_KEY",)),
    # Prefixed tokens of other vendors, by their documented prefix.
    _Format(
        "grafana",
        "service-account-token",
        "api-token",
        lambda r: f"glsa_{_rand(r, ALNUM, 32)}_{_rand(r, HEX, 8)}",
    ),
    _Format("hashicorp", "vault-token", "api-token", lambda r: "hvs." + _rand(r, URLSAFE, 90)),
    _Format(
        "hashicorp",
        "terraform-cloud-token",
        "api-token",
        lambda r: f"{_rand(r, ALNUM, 14)}.atlasv1.{_rand(r, ALNUM, 67)}",
    ),
    _Format("linear", "api-key", "api-token", lambda r: "lin_api_" + _rand(r, ALNUM, 40)),
    _Format(
        "notion",
        "integration-token",
        "api-token",
        lambda r: "ntn_" + _rand(r, DIGITS, 11) + _rand(r, ALNUM, 35),
    ),
    _Format("postman", "api-key", "api-token", lambda r: f"PMAK-{_rand(r, HEX, 24)}-{_rand(r, HEX, 34)}"),
    _Format("doppler", "personal-token", "api-token", lambda r: "dp.pt." + _rand(r, ALNUM, 43)),
    _Format("newrelic", "user-api-key", "api-token", lambda r: "NRAK-" + _rand(r, UPPER + DIGITS, 27)),
    _Format("sentry", "user-auth-token", "api-token", lambda r: "sntryu_" + _rand(r, HEX, 64)),
    _Format("supabase", "access-token", "api-token", lambda r: "sbp_" + _rand(r, HEX, 40)),
    _Format("pulumi", "access-token", "api-token", lambda r: "pul-" + _rand(r, HEX, 40)),
    _Format("groq", "api-key", "api-token", lambda r: "gsk_" + _rand(r, ALNUM, 52)),
    _Format("replicate", "api-token", "api-token", lambda r: "r8_" + _rand(r, ALNUM, 37)),
    _Format("mailchimp", "api-key", "api-token", lambda r: f"{_rand(r, HEX, 32)}-us{r.randrange(1, 22)}"),
    _Format("square", "access-token", "api-token", lambda r: "sq0atp-" + _rand(r, URLSAFE, 22)),
    _Format(
        "age",
        "secret-key",
        "api-token",
        lambda r: "AGE-SECRET-KEY-1" + _rand(r, "QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L", 58),
    ),
    _Format(
        "tailscale",
        "auth-key",
        "api-token",
        lambda r: f"tskey-auth-k{_rand(r, ALNUM, 11)}CNTRL-{_rand(r, ALNUM, 33)}",
    ),
    # Tokens with a structure of their own
    _Format("jwt", "hs256", "jwt", lambda r: _jwt(r, "HS256")),
    _Format("jwt", "rs256", "jwt", lambda r: _jwt(r, "RS256")),
    _Format("jwt", "es256", "jwt", lambda r: _jwt(r, "ES256")),
)

# Contexts where only the value's shape can give it away: no key name says "secret".
SHAPE_CONTEXTS: tuple[tuple[str, str], ...] = (
    ("python", 'client = ServiceClient(credential="{s}")'),
    ("python", "CREDENTIAL = '{s}'"),
    ("env", "SERVICE_CREDENTIAL={s}"),
    ("yaml", "service:\n  region: eu-west-1\n  credential: {s}\n"),
    ("json", '{{"service": "billing", "credential": "{s}"}}'),
    ("shell", 'export SERVICE_CREDENTIAL="{s}"'),
    ("url", "https://api.example.com/v1/items?auth={s}&page=2"),
    ("prose", "Rotate the credential {s} before Friday."),
    ("markdown", "| env | credential |\n|---|---|\n| prod | `{s}` |"),
    ("notebook-output", "Out[3]: '{s}'"),
    ("notebook-output", "{{'credential': '{s}', 'expires_in': 3600}}"),
    ("log", "2024-06-11 10:00:03 INFO client ready (credential={s})"),
    ("curl", 'curl -s -H "X-Service-Credential: {s}" https://api.example.com/v1/items'),
    ("toml", '[service]\ncredential = "{s}"\n'),
    ("javascript", "const credential = '{s}';"),
    ("dockerfile", "ENV SERVICE_CREDENTIAL={s}"),
    ("xml", "<credential>{s}</credential>"),
    ("csv", "svc-billing,{s},2024-06-11"),
    ("r", 'Sys.setenv(SERVICE_CREDENTIAL = "{s}")'),
)

# Contexts that name the key: {k} is the vendor's documented key name.
KEYED_CONTEXTS: tuple[tuple[str, str], ...] = (
    ("env", "{k}={s}"),
    ("shell", 'export {k}="{s}"'),
    ("yaml", "credentials:\n  {k}: {s}\n"),
    ("json", '{{"{k}": "{s}", "region": "eu-west-1"}}'),
    ("python", 'os.environ["{k}"] = "{s}"'),
    ("python", '{k} = "{s}"'),
    ("ini", "[default]\n{k} = {s}\n"),
    ("dockerfile", "ENV {k}={s}"),
    ("compose", "    environment:\n      - {k}={s}\n"),
    ("kubernetes", '        env:\n          - name: {k}\n            value: "{s}"\n'),
    ("notebook-output", "{{'{k}': '{s}'}}"),
    ("toml", '{k} = "{s}"'),
)


def _key_name(fmt: _Format, context: str, rng: random.Random) -> str:
    key = rng.choice(fmt.keys)
    if context in ("yaml", "toml", "ini", "python") and key.isupper() and rng.random() < 0.5:
        key = key.lower()
    return key


def _pem_key(rng: random.Random, label: str, lines: int) -> tuple[str, list[str]]:
    """A PEM block with realistic DER/OpenSSH framing; returns it and its body lines."""
    if label == "OPENSSH PRIVATE KEY":
        raw = b"openssh-key-v1\x00" + rng.randbytes(48 * lines - 15)
    else:
        raw = b"\x30\x82" + rng.randbytes(48 * lines - 2)
    body = _b64(raw)
    rows = [body[i : i + 64] for i in range(0, len(body), 64)]
    return f"-----BEGIN {label}-----\n" + "\n".join(rows) + f"\n-----END {label}-----", rows


def _private_keys(rng: random.Random, per_format: int) -> list[SecretCase]:
    cases: list[SecretCase] = []
    labels = (
        "RSA PRIVATE KEY",
        "EC PRIVATE KEY",
        "DSA PRIVATE KEY",
        "OPENSSH PRIVATE KEY",
        "PRIVATE KEY",
        "ENCRYPTED PRIVATE KEY",
    )
    wrappers = (
        ("pem-file", "{key}\n"),
        ("markdown", "Deploy key for the runner:\n\n```\n{key}\n```\n\nKeep it out of git."),
        ("python", 'KEY = """{key}"""'),
        ("yaml", "ssh:\n  private_key: |\n{indented}\n"),
        ("notebook-output", "{key}"),
    )
    for label in labels:
        for i in range(per_format):
            key, rows = _pem_key(rng, label, rng.randrange(4, 26))
            context, template = wrappers[i % len(wrappers)]
            indented = "\n".join("    " + line for line in key.split("\n"))
            text = template.format(key=key, indented=indented)
            cases.append(
                SecretCase(
                    "private-key", label.lower().replace(" ", "-"), "private-key", tuple(rows), text, context
                )
            )
    # PEM in JSON with escaped newlines: a GCP service account file, and a key printed as a repr.
    for i in range(per_format):
        key, rows = _pem_key(rng, "PRIVATE KEY", rng.randrange(10, 26))
        account = {
            "type": "service_account",
            "project_id": f"demo-{_rand(rng, LOWER, 6)}",
            "private_key_id": _rand(rng, HEX, 40),
            "private_key": key + "\n",
            "client_email": "svc@demo.iam.gserviceaccount.com",
            "client_id": _rand(rng, DIGITS, 21),
        }
        text = json.dumps(account, indent=2 if i % 2 else None)
        cases.append(
            SecretCase(
                "gcp",
                "service-account-json",
                "gcp-service-account-key",
                tuple(rows),
                text,
                "json",
                also_ok=("private-key",),
            )
        )
    for _ in range(per_format):
        key, rows = _pem_key(rng, "RSA PRIVATE KEY", 8)
        cases.append(
            SecretCase(
                "private-key",
                "repr-in-output",
                "private-key",
                tuple(rows),
                f"Out[7]: {key!r}",
                "notebook-output",
            )
        )
    # A key cut by a chunk boundary: no END line, or no BEGIN line.
    for i in range(per_format):
        key, rows = _pem_key(rng, "OPENSSH PRIVATE KEY", 12)
        lines = key.split("\n")
        text = "\n".join(lines[:-3]) if i % 2 else "\n".join(lines[5:])
        kept = tuple(r for r in rows if r in text)
        cases.append(
            SecretCase("private-key", "cut-at-chunk-boundary", "private-key", kept, text, "pem-file")
        )
    # PGP private key block with armor headers.
    for _ in range(per_format):
        body = _b64(rng.randbytes(48 * 10))
        rows = [body[i : i + 64] for i in range(0, len(body), 64)]
        text = (
            "-----BEGIN PGP PRIVATE KEY BLOCK-----\nVersion: GnuPG v2\n\n"
            + "\n".join(rows)
            + "\n="
            + _rand(rng, B64, 4)
            + "\n-----END PGP PRIVATE KEY BLOCK-----"
        )
        cases.append(
            SecretCase("private-key", "pgp-private-key-block", "private-key", tuple(rows), text, "pem-file")
        )
    return cases


_PASSWORD_WORDS = ("Winter", "Falcon", "Copper", "Maple", "Orbit", "Nimbus", "Quartz", "Tango", "Velvet")


def _password(rng: random.Random) -> str:
    """A password people actually set: words, digits and a symbol, or random characters."""
    if rng.random() < 0.5:
        return rng.choice(_PASSWORD_WORDS) + _rand(rng, DIGITS, rng.randrange(2, 5)) + rng.choice("!#%*-_.@$")
    return _rand(rng, ALNUM, rng.randrange(8, 14)) + rng.choice("!#%*-_.") + _rand(rng, ALNUM, 2)


def _connection_strings(rng: random.Random, per_format: int) -> list[SecretCase]:
    """Passwords inside URLs and DSNs: the password is the secret, user and host stay."""
    url_templates = (
        ("postgres", "DATABASE_URL=postgres://app:{p}@db.internal:5432/app"),
        ("postgresql+psycopg2", 'engine = create_engine("postgresql+psycopg2://etl:{p}@10.0.3.7/warehouse")'),
        ("mysql", "mysql://root:{p}@localhost:3306/shop?charset=utf8mb4"),
        ("mongodb+srv", 'client = MongoClient("mongodb+srv://svc:{p}@cluster0.ab1cd.mongodb.net/test")'),
        ("redis", "cache:\n  url: redis://default:{p}@cache:6379/0\n"),
        ("amqp", "Connected to amqp://guest:{p}@rabbit:5672/ in 0.2s"),
        ("mssql+pyodbc", 'url = "mssql+pyodbc://sa:{p}@sqlserver:1433/db?driver=ODBC+Driver+18"'),
        ("snowflake", "snowflake://analyst:{p}@xy12345.eu-central-1/analytics/public"),
        ("clickhouse", "clickhouse://default:{p}@ch.internal:9000/default"),
    )
    dsn_templates = (
        (
            "ado.net",
            "Server=tcp:demo.database.windows.net,1433;Database=app;User ID=app;Password={p};Encrypt=true;",
        ),
        ("jdbc", "jdbc:postgresql://db:5432/app?user=app&password={p}&ssl=true"),
        ("jdbc-sqlserver", "jdbc:sqlserver://sql01:1433;databaseName=app;user=sa;password={p};"),
        ("libpq", 'conn = psycopg2.connect("host=db port=5432 dbname=app user=app password={p}")'),
        ("odbc", "DRIVER={{ODBC Driver 18 for SQL Server}};SERVER=sql01;UID=etl;PWD={p};"),
    )
    cases: list[SecretCase] = []
    for name, template in url_templates:
        for _ in range(per_format):
            p = _password(rng)
            cases.append(
                SecretCase(
                    "connection-string",
                    name,
                    "url-password",
                    (p,),
                    template.format(p=p),
                    "url",
                    also_ok=("password-assignment",),
                )
            )
    for name, template in dsn_templates:
        for _ in range(per_format):
            p = _password(rng)
            cases.append(
                SecretCase(
                    "connection-string",
                    name,
                    "password-assignment",
                    (p,),
                    template.format(p=p),
                    "dsn",
                    also_ok=("url-password",),
                )
            )
    return cases


def _basic_auth(rng: random.Random, per_format: int) -> list[SecretCase]:
    templates = (
        ("https-url", "git clone https://ada:{p}@git.example.com/team/repo.git", "url-password"),
        (
            "pip-index",
            "pip install --extra-index-url https://deploy:{p}@pypi.corp.example/simple private-pkg",
            "url-password",
        ),
        ("ftp-url", "wget ftp://backup:{p}@files.example.org/dump.sql.gz", "url-password"),
        ("curl-u", "curl -u admin:{p} https://ci.example.com/api/json", "basic-auth"),
        ("requests-auth", 'r = requests.get(url, auth=("admin", "{p}"))', "basic-auth"),
    )
    cases: list[SecretCase] = []
    for name, template, kind in templates:
        for _ in range(per_format):
            p = _password(rng)
            cases.append(
                SecretCase(
                    "basic-auth-url",
                    name,
                    kind,
                    (p,),
                    template.format(p=p),
                    "url",
                    also_ok=("url-password", "basic-auth", "password-assignment"),
                )
            )
    for _ in range(per_format):
        user, p = rng.choice(["admin", "ci", "deploy"]), _password(rng)
        header = _b64(f"{user}:{p}".encode())
        cases.append(
            SecretCase(
                "basic-auth-url",
                "authorization-basic",
                "basic-auth",
                (header,),
                f"Authorization: Basic {header}",
                "http",
            )
        )
    for _ in range(per_format):
        p = _password(rng)
        auth = _b64(f"ada:{p}".encode())
        text = json.dumps({"auths": {"https://index.docker.io/v1/": {"auth": auth}}}, indent=2)
        cases.append(SecretCase("docker", "config-json-auth", "basic-auth", (auth,), text, "json"))
    # Tokens as URL credentials: the vendor label wins over url-password.
    for _ in range(per_format):
        token = "ghs_" + _rand(rng, ALNUM, 36)
        cases.append(
            SecretCase(
                "github",
                "token-in-clone-url",
                "github-token",
                (token,),
                f"git clone https://x-access-token:{token}@github.com/org/repo.git",
                "url",
            )
        )
        token = "glpat-" + _rand(rng, URLSAFE, 20)
        cases.append(
            SecretCase(
                "gitlab",
                "token-in-clone-url",
                "gitlab-token",
                (token,),
                f"git remote add origin https://oauth2:{token}@gitlab.com/group/project.git",
                "url",
            )
        )
    return cases


def _passwords(rng: random.Random, per_format: int) -> list[SecretCase]:
    """``password=`` and friends in code, config, .env and shell."""
    templates = (
        ("python", 'DB_PASSWORD = "{p}"'),
        ("python-kwarg", 'conn = psycopg2.connect(host="db", user="app", password="{p}")'),
        ("python-dict", "settings = {{'user': 'svc', 'password': '{p}'}}"),
        ("env", "SMTP_PASSWORD={p}\nSMTP_PORT=587\n"),
        ("env-quoted", 'POSTGRES_PASSWORD="{p}"'),
        ("shell", "export PGPASSWORD='{p}'"),
        ("docker-run", "docker run -e MYSQL_ROOT_PASSWORD={p} -d mysql:8"),
        ("cli-flag", "mysql --password={p} analytics"),
        ("yaml", "database:\n  user: app\n  password: {p}\n"),
        ("yaml-quoted", 'smtp:\n  pass: "{p}"\n'),
        ("json", '{{"user": "svc", "password": "{p}"}}'),
        ("ini", "[smtp]\nhost = mail.example.com\npassword = {p}\n"),
        ("properties", "spring.datasource.password={p}"),
        (
            "xml",
            "<server>\n  <id>corp</id>\n  <username>ci</username>\n  <password>{p}</password>\n</server>",
        ),
        ("netrc", "machine api.example.com login ada password {p}"),
        ("prose", "The staging admin passwd: {p}"),
        ("log", "Connecting with password={p} ..."),
        ("javascript", "const config = {{ user: 'app', password: '{p}' }};"),
        ("r", 'con <- dbConnect(RPostgres::Postgres(), user = "app", password = "{p}")'),
        ("kubernetes", '        env:\n          - name: DB_PASSWORD\n            value: "{p}"\n'),
        ("terraform", 'resource "aws_db_instance" "db" {{\n  password = "{p}"\n}}'),
        ("secret-key", "SECRET_KEY = '{p}'"),
        ("client-secret", "CLIENT_SECRET={p}"),
    )
    cases: list[SecretCase] = []
    for name, template in templates:
        for _ in range(per_format):
            p = (
                _password(rng)
                if name not in ("secret-key", "client-secret")
                else _rand(rng, ALNUM + "!#%*-_", 40)
            )
            cases.append(
                SecretCase(
                    "password",
                    name,
                    "password-assignment",
                    (p,),
                    template.format(p=p),
                    {
                        "secret-key": "python",
                        "client-secret": "env",
                        "cli-flag": "shell",
                        "docker-run": "shell",
                    }.get(name, name.split("-")[0]),
                    also_ok=("high-entropy", "url-password"),
                )
            )
    return cases


def _webhooks(rng: random.Random, per_format: int) -> list[SecretCase]:
    cases: list[SecretCase] = []
    for _ in range(per_format):
        path = f"T{_rand(rng, UPPER + DIGITS, 10)}/B{_rand(rng, UPPER + DIGITS, 10)}/{_rand(rng, ALNUM, 24)}"
        url = f"https://hooks.slack.com/services/{path}"
        template = rng.choice(
            (
                'requests.post("{u}", json={{"text": "done"}})',
                "SLACK_WEBHOOK_URL={u}",
                "notify:\n  slack: {u}\n",
                "Post build results to {u} when the job ends.",
            )
        )
        cases.append(
            SecretCase("slack", "incoming-webhook", "slack-webhook", (path,), template.format(u=url), "url")
        )
    for _ in range(per_format):
        path = f"T{_rand(rng, UPPER + DIGITS, 10)}/A{_rand(rng, UPPER + DIGITS, 10)}/{_rand(rng, DIGITS, 18)}/{_rand(rng, ALNUM, 24)}"
        cases.append(
            SecretCase(
                "slack",
                "workflow-webhook",
                "slack-webhook",
                (path,),
                f"curl -X POST https://hooks.slack.com/workflows/{path} -d @payload.json",
                "url",
            )
        )
    # Azure SAS: the signature is the secret; the rest of the query is public.
    for _ in range(per_format):
        sig = _b64(rng.randbytes(32)).replace("+", "%2B").replace("/", "%2F").replace("=", "%3D")
        url = (
            "https://demo.blob.core.windows.net/data/report.csv?sv=2022-11-02&ss=b&srt=sco&sp=rl"
            f"&se=2024-07-01T00:00:00Z&st=2024-06-01T00:00:00Z&spr=https&sig={sig}"
        )
        cases.append(
            SecretCase("azure", "sas-token", "azure-sas-token", (sig,), f"df = pd.read_csv('{url}')", "url")
        )
    # Azure connection strings: storage account and service bus keys.
    for _ in range(per_format):
        key = _b64(rng.randbytes(64))
        text = (
            "DefaultEndpointsProtocol=https;AccountName=demo;AccountKey="
            + key
            + ";EndpointSuffix=core.windows.net"
        )
        cases.append(
            SecretCase("azure", "storage-connection-string", "azure-storage-key", (key,), text, "dsn")
        )
        key = _b64(rng.randbytes(32))
        text = (
            "Endpoint=sb://demo.servicebus.windows.net/;SharedAccessKeyName=RootManageSharedAccessKey;"
            f"SharedAccessKey={key}"
        )
        cases.append(
            SecretCase("azure", "service-bus-connection-string", "azure-storage-key", (key,), text, "dsn")
        )
    return cases


def _headers(rng: random.Random, per_format: int) -> list[SecretCase]:
    cases: list[SecretCase] = []
    for _ in range(per_format):
        token = _rand(rng, ALNUM, rng.randrange(32, 64))
        template = rng.choice(
            (
                'curl -H "Authorization: Bearer {t}" https://api.example.com/v1/me',
                'headers = {{"Authorization": "Bearer {t}"}}',
                "GET /v1/me HTTP/1.1\nHost: api.example.com\nAuthorization: Bearer {t}\n",
            )
        )
        cases.append(
            SecretCase(
                "http",
                "bearer-token",
                "bearer-token",
                (token,),
                template.format(t=token),
                "http",
                also_ok=("high-entropy",),
            )
        )
    for _ in range(per_format):
        jwt = _jwt(rng)
        template = rng.choice(
            (
                "Cookie: session={t}; theme=dark",
                '{{"id_token": "{t}", "token_type": "Bearer"}}',
                "https://app.example.com/callback#access_token={t}&expires_in=3600",
            )
        )
        cases.append(
            SecretCase("jwt", "in-cookie-json-or-url", "jwt", (jwt,), template.format(t=jwt), "http")
        )
    return cases


def _aws_special(rng: random.Random) -> list[SecretCase]:
    key_id, secret = "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    cases = [
        SecretCase(
            "aws",
            "documented-example-key-id",
            "aws-access-key-id",
            (key_id,),
            f"aws_access_key_id = {key_id}",
            "ini",
        ),
        SecretCase(
            "aws",
            "documented-example-secret",
            "aws-secret-access-key",
            (secret,),
            f"aws_secret_access_key = {secret}",
            "ini",
        ),
    ]
    for _ in range(4):
        kid, sec = "AKIA" + _rand(rng, BASE32, 16), _rand(rng, B64, 38) + "Qx"
        text = f"[default]\naws_access_key_id = {kid}\naws_secret_access_key = {sec}\nregion = eu-west-1\n"
        cases.append(
            SecretCase(
                "aws",
                "credentials-file",
                "aws-secret-access-key",
                (kid, sec),
                text,
                "ini",
                also_ok=("aws-access-key-id",),
            )
        )
        kid, sec = "ASIA" + _rand(rng, BASE32, 16), _rand(rng, B64, 38) + "kP"
        text = f"Created key {kid} with secret {sec} for the CI user."
        cases.append(
            SecretCase(
                "aws",
                "key-pair-in-prose",
                "aws-secret-access-key",
                (kid, sec),
                text,
                "prose",
                also_ok=("aws-access-key-id",),
            )
        )
        sec = _rand(rng, B64, 38) + "Zq"
        text = f's3 = boto3.client("s3", aws_access_key_id=key_id, aws_secret_access_key="{sec}")'
        cases.append(SecretCase("aws", "boto3-kwarg", "aws-secret-access-key", (sec,), text, "python"))
    return cases


def positives(seed: int = SEED, per_format: int = 6) -> list[SecretCase]:
    """The labelled fake secrets, generated from ``seed`` (same seed, same set).

    Parameters
    ----------
    seed:
        Seed of the RNG every value is drawn from.
    per_format:
        How many secrets of each vendor format, each in another context.
    """
    rng = random.Random(seed)
    cases: list[SecretCase] = []
    for fmt in FORMATS:
        pool = KEYED_CONTEXTS if fmt.keys else SHAPE_CONTEXTS
        picks = rng.sample(range(len(pool)), k=min(per_format, len(pool)))
        for i in picks:
            context, template = pool[i]
            secret = fmt.make(rng)
            values = {"s": secret}
            if fmt.keys:
                values["k"] = _key_name(fmt, context, rng)
            cases.append(
                SecretCase(
                    fmt.vendor,
                    fmt.format,
                    fmt.kind,
                    (secret,),
                    template.format(**values),
                    context,
                    fmt.also_ok,
                )
            )
    cases += _private_keys(rng, max(2, per_format // 2))
    cases += _connection_strings(rng, max(2, per_format // 2))
    cases += _basic_auth(rng, max(2, per_format // 2))
    cases += _passwords(rng, max(2, per_format // 2))
    cases += _webhooks(rng, max(2, per_format // 2))
    cases += _headers(rng, per_format)
    cases += _aws_special(rng)
    return cases


# --- look-alikes -------------------------------------------------------------------------------

_WORD_TEXT = (
    "user account session model config train eval data loader batch token embed vector index search "
    "query result cache client server request response handler manager factory builder service "
    "context layer attention output input hidden state weight bias norm dropout scheduler optimizer "
    "gradient checkpoint tensor device memory buffer stream reader writer parser encoder decoder "
    "pipeline stage trace report metric score rank fusion filter namespace document chunk notebook "
    "cell kernel widget explorer sidebar panel button label title status progress"
)
_WORDS = tuple(_WORD_TEXT.split())


def _identifier(rng: random.Random) -> str:
    words = rng.sample(_WORDS, rng.randrange(4, 9))
    style = rng.randrange(4)
    if style == 0:
        return "_".join(words)
    if style == 1:
        return words[0] + "".join(w.title() for w in words[1:])
    if style == 2:
        return "".join(w.title() for w in words)
    return "-".join(words)


def _png(rng: random.Random, size: int) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    raw = b"".join(b"\x00" + rng.randbytes(size * 3) for _ in range(size))
    header = struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


def _ssh_public_key(rng: random.Random) -> str:
    kind = rng.choice(["ssh-ed25519", "ssh-rsa", "ecdsa-sha2-nistp256"])
    name = kind.encode()
    if kind == "ssh-ed25519":
        blob = struct.pack(">I", len(name)) + name + struct.pack(">I", 32) + rng.randbytes(32)
    elif kind == "ssh-rsa":
        blob = (
            struct.pack(">I", len(name))
            + name
            + struct.pack(">I", 3)
            + b"\x01\x00\x01"
            + struct.pack(">I", 257)
            + b"\x00"
            + rng.randbytes(256)
        )
    else:
        curve = b"nistp256"
        blob = (
            struct.pack(">I", len(name))
            + name
            + struct.pack(">I", len(curve))
            + curve
            + struct.pack(">I", 65)
            + b"\x04"
            + rng.randbytes(64)
        )
    return f"{kind} {_b64(blob)} ada@laptop"


def _certificate(rng: random.Random, label: str = "CERTIFICATE") -> str:
    body = _b64(b"\x30\x82" + rng.randbytes(48 * rng.randrange(6, 20) - 2))
    rows = [body[i : i + 64] for i in range(0, len(body), 64)]
    return f"-----BEGIN {label}-----\n" + "\n".join(rows) + f"\n-----END {label}-----"


def negatives(seed: int = SEED, per_family: int = 12) -> list[LookAlike]:
    """Texts that hold no secret but look like they might, generated from ``seed``."""
    rng = random.Random(seed + 1)
    out: list[LookAlike] = []

    def add(family: str, texts: Iterable[str]) -> None:
        out.extend(LookAlike(family, t) for t in texts)

    n = per_family
    add(
        "uuid",
        (
            rng.choice(
                (
                    "run_id = '{u}'",
                    '{{"cell_type": "code", "id": "{u}", "metadata": {{}}}}',
                    "2024-06-11 10:00:03 INFO request {u} done in 12 ms",
                    '  uid: {u}\n  resourceVersion: "48213"',
                    'experiment = mlflow.get_run("{u}")',
                    "Trace-Id: {U}",
                )
            ).format(u=_uuid(rng), U=_uuid(rng).upper())
            for _ in range(n)
        ),
    )
    add(
        "git-sha",
        (
            rng.choice(
                (
                    "commit {h}\nAuthor: Ada <ada@example.com>\nDate:   Tue Jun 11 10:00:03 2024 +0200",
                    "git checkout {h} -- src/",
                    "pip install git+https://github.com/org/repo.git@{h}",
                    "Fixed in https://github.com/pandas-dev/pandas/commit/{h}",
                    "HEAD is now at {s} Merge pull request #4821 from ada/fix-cache",
                    '  "sha": "{h}",\n  "tree": {{"sha": "{h2}"}}',
                )
            ).format(h=_rand(rng, HEX, 40), h2=_rand(rng, HEX, 40), s=_rand(rng, HEX, 7))
            for _ in range(n)
        ),
    )
    add(
        "lockfile",
        (
            rng.choice(
                (
                    '{{file = "numpy-2.1.{v}-cp311-cp311-manylinux_2_17_x86_64.whl", hash = "sha256:{h64}"}},',
                    '"integrity": "sha512-{sri}",',
                    '  integrity sha512-{sri}\n  resolved "https://registry.yarnpkg.com/lodash/-/lodash-4.17.21.tgz#{h40}"',
                    "github.com/stretchr/testify v1.9.{v} h1:{b44}",
                    'checksum = "{h64}"',
                    "requests==2.32.{v} \\\n    --hash=sha256:{h64}",
                    '"narHash": "sha256-{b44}",',
                    "      resolution: {{integrity: sha512-{sri}}}",
                    '"reference": "{h40}",\n"shasum": ""',
                    "https://conda.anaconda.org/conda-forge/linux-64/numpy-1.26.{v}-py311h64a7726_0.conda#{h32}",
                    'source = {{ registry = "https://pypi.org/simple" }}\nsdist = {{ url = "https://files.pythonhosted.org/x.tar.gz", hash = "sha256:{h64}" }}',
                )
            ).format(
                v=rng.randrange(0, 9),
                h64=_rand(rng, HEX, 64),
                h40=_rand(rng, HEX, 40),
                h32=_rand(rng, HEX, 32),
                sri=_b64(rng.randbytes(64)),
                b44=_b64(rng.randbytes(32)),
            )
            for _ in range(2 * n)
        ),
    )
    add(
        "digest",
        (
            rng.choice(
                (
                    "FROM python:3.11-slim@sha256:{h64}",
                    "md5sum: {h32}  model.safetensors",
                    "sha1 = {h40}",
                    "Downloaded newer image for ghcr.io/org/app@sha256:{h64}",
                    'ETag: "{h32}"',
                    "x-amz-version-id: {h32}",
                )
            ).format(h64=_rand(rng, HEX, 64), h40=_rand(rng, HEX, 40), h32=_rand(rng, HEX, 32))
            for _ in range(n)
        ),
    )
    add(
        "base64-image",
        (
            rng.choice(
                (
                    "![plot](data:image/png;base64,{png})",
                    '"image/png": "{png}"',
                    '<img src="data:image/png;base64,{png}" width="320">',
                    "{png}",
                    "src: url(data:font/woff2;base64,{font}) format('woff2');",
                    "data:image/jpeg;base64,/9j/4AAQSkZJRgABAQAAAQABAAD{jpeg}",
                )
            ).format(
                png=_b64(_png(rng, rng.randrange(4, 12))),
                font=_b64(b"wOF2\x00\x01\x00\x00" + rng.randbytes(96)),
                jpeg=_b64(rng.randbytes(120)),
            )
            for _ in range(n)
        ),
    )
    add("public-key", [_ssh_public_key(rng) for _ in range(n)])
    add(
        "certificate",
        [_certificate(rng, rng.choice(["CERTIFICATE", "PUBLIC KEY"])) for _ in range(max(3, n // 2))],
    )
    add(
        "placeholder",
        [
            "AKIAXXXXXXXXXXXXXXXX",
            "aws_secret_access_key = <your-secret-key>",
            'GITHUB_TOKEN="ghp_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"',
            "OPENAI_API_KEY=sk-...",
            "export ANTHROPIC_API_KEY=sk-ant-...",
            'stripe.api_key = "sk_test_xxxxxxxxxxxxxxxxxxxxxxxx"',
            "SLACK_BOT_TOKEN=xoxb-your-bot-token",
            "HF_TOKEN=hf_********************************",
            "token: ${{ secrets.GITHUB_TOKEN }}",
            'password: "{{ .Values.db.password }}"',
            "password = os.environ['DB_PASSWORD']",
            "api_key = getpass.getpass('API key: ')",
            'DATABASE_URL="postgres://user:password@localhost:5432/db"',
            "password: ********",
            "client_secret: REDACTED",
            "api_key: <redacted>",
            "password = var.db_password",
            "valueFrom:\n  secretKeyRef:\n    name: db\n    key: password",
            "%env OPENAI_API_KEY",
            "AZURE_STORAGE_KEY=<storage-account-key>",
            "Authorization: Bearer <token>",
            "curl -u $USER:$PASSWORD https://ci.example.com",
            'token = "YOUR_TOKEN_HERE"',
            "SLACK_WEBHOOK=https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX",
            "dckr_pat_xxxxxxxxxxxxxxxxxxxxxxxxxxx",
            "DATABRICKS_TOKEN=dapi<your-token>",
            "password: str = Field(..., min_length=8)",
            "secret = None",
            "-----BEGIN RSA PRIVATE KEY-----\n...\n-----END RSA PRIVATE KEY-----",
            "mongodb+srv://<username>:<password>@cluster0.mongodb.net/",
        ],
    )
    add(
        "version",
        (
            rng.choice(
                (
                    "numpy=={a}.{b}.{c} torch=={a}.{b}.{c}+cpu scipy>={a}.{b}",
                    "v{a}.{b}.{c}-rc.{d}+build.{e}",
                    "Python 3.11.{c} (main, Jun 11 2024, 10:00:03) [GCC 12.2.0] on linux",
                    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.{e}.{d} Safari/537.36",
                    "cuda {a}.{b}.{e} cudnn 8.9.{c}.{d} driver 535.{e}.{d}",
                    "node v20.{b}.{c} npm 10.{a}.{c} pnpm 9.{b}.{d}",
                    "image: python:3.11.{c}-slim-bookworm",
                    'jupyterlab==4.{b}.{c}; python_version >= "3.9"',
                )
            ).format(
                a=rng.randrange(1, 5),
                b=rng.randrange(0, 30),
                c=rng.randrange(0, 20),
                d=rng.randrange(0, 99),
                e=rng.randrange(100, 9999),
            )
            for _ in range(n)
        ),
    )
    add(
        "identifier",
        (
            rng.choice(
                (
                    "result = {i}(batch)",
                    "def test_{i}():\n    assert True",
                    "from nbmemory.search import {i}",
                    ".{i} {{ color: var(--jp-ui-font-color1); }}",
                    "SELECT {i} FROM events LIMIT 10",
                    "class {I}(nn.Module): ...",
                )
            ).format(
                i=_identifier(rng),
                I="".join(w.title() for w in _identifier(rng).replace("-", "_").split("_")),
            )
            for _ in range(2 * n)
        ),
    )
    add(
        "model-id",
        [
            "SentenceTransformer('sentence-transformers/all-MiniLM-L6-v2')",
            "BAAI/bge-small-en-v1.5",
            'AutoModelForCausalLM.from_pretrained("meta-llama/Meta-Llama-3.1-8B-Instruct")',
            "mistralai/Mixtral-8x7B-Instruct-v0.1",
            "HuggingFaceH4/zephyr-orpo-141b-A35b-v0.1",
            "openai/clip-vit-large-patch14-336",
            "google/flan-t5-xxl",
            "TheBloke/Llama-2-13B-chat-GPTQ",
            "microsoft/Phi-3-mini-128k-instruct",
            "Qwen/Qwen2.5-Coder-32B-Instruct-AWQ",
        ],
    )
    add(
        "notebook-metadata",
        (
            rng.choice(
                (
                    '"model_id": "{h32}", "version_major": 2, "version_minor": 0',
                    '"execution": {{"iopub.execute_input": "2024-06-11T10:00:0{d}.123456Z", "shell.execute_reply": "2024-06-11T10:00:0{d}.654321Z"}}',
                    '"kernelspec": {{"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}}',
                    '"colab": {{"base_uri": "https://localhost:8080/"}}, "id": "{c}", "outputId": "{u}"',
                    "<Figure size 640x480 with 1 Axes>",
                    "<matplotlib.lines.Line2D at 0x7f{h10}>",
                )
            ).format(
                h32=_rand(rng, HEX, 32),
                d=rng.randrange(10),
                c=_rand(rng, ALNUM, 12),
                u=_uuid(rng),
                h10=_rand(rng, HEX, 10),
            )
            for _ in range(n)
        ),
    )
    add(
        "reference",
        (
            rng.choice(
                (
                    "arXiv:{y}{m:02d}.{n5}v{v}",
                    "doi:10.{n4}/{n7}.{n7b}",
                    "https://doi.org/10.1145/3397271.{n7}",
                    "ISBN 978-3-16-{n6}-{d}",
                    "ORCID 0000-000{d}-{n4}-{n4b}",
                    "Issue #{n4}: see PR #{n4b}",
                    "https://www.youtube.com/watch?v={yt}",
                    "s3://ml-datasets/beir/scifact/corpus-{n4}.jsonl",
                    "ipv6 2001:db8:{h4}:{h4b}::{h4c} mac {mac}",
                )
            ).format(
                y=rng.randrange(18, 25),
                m=rng.randrange(1, 13),
                n5=_rand(rng, DIGITS, 5),
                v=rng.randrange(1, 4),
                n4=_rand(rng, DIGITS, 4),
                n4b=_rand(rng, DIGITS, 4),
                n7=_rand(rng, DIGITS, 7),
                n7b=_rand(rng, DIGITS, 7),
                n6=_rand(rng, DIGITS, 6),
                d=rng.randrange(10),
                yt=_rand(rng, URLSAFE, 11),
                h4=_rand(rng, HEX, 4),
                h4b=_rand(rng, HEX, 4),
                h4c=_rand(rng, HEX, 4),
                mac=":".join(_rand(rng, HEX, 2) for _ in range(6)),
            )
            for _ in range(n)
        ),
    )
    add(
        "prose-base64",
        (
            _b64(
                rng.choice(
                    (
                        "the quick brown fox jumps over the lazy dog again and again",
                        "Deploys need the VPN on; staging uses the 10.2 subnet.",
                        "hello world, this is a perfectly ordinary sentence",
                    )
                ).encode()
            )
            for _ in range(max(3, n // 3))
        ),
    )
    add(
        "prose",
        (
            rng.choice(
                (
                    "Use the login form and password fields below, then reset the password from the email link.",
                    "The token budget of %memcontext is 800 tokens; the secret to good retrieval is good chunking.",
                    "We rotated the API keys on Monday; ask #ops for the new ones rather than pasting them here.",
                    "Set max_tokens = {d}000 and temperature = 0.{d} for the summariser.",
                    "First pass: decided_mask == 0, second pass: the rest. Passwords are hashed with argon2id.",
                )
            ).format(d=rng.randrange(1, 9))
            for _ in range(n)
        ),
    )
    add(
        "code",
        [
            "ids = tokenizer.encode(text)\ntoken = ids[0]\nmax_tokens = 1024",
            'pad_token = "[PAD]"\neos_token = "</s>"',
            "def login(user: str, password: str) -> bool:\n    return check(user, password)",
            "secret = Secret.from_env('DB')\npassword = secret.value",
            "conn = connect(password=password)",
            "client = OpenAI(\n    api_key=openai_api_key,\n    timeout=30,\n)",
            "hash = hashlib.sha256(payload).hexdigest()  # e3b0c44298fc1c149afbf4c8996fb924",
            'TOKEN_RE = r"[-!#$%&\'*+.^_`|~0-9a-zA-Z]+"',
            "x = torch.randn(8, 384)\nprint(x.shape)  # torch.Size([8, 384])",
            "var a=function(b,c){return b+c},d=a(1,2),_0x3f2a=_0x1b4c[0x12];",
            "B64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/'",
            "stripe.api_key = 'pk_test_TYooMQauvdEDq54NiTphI7jx'",
        ],
    )
    add(
        "cli",
        [
            "docker build --secret id=npmrc,src=$HOME/.npmrc -t app .",
            "mysql -u root -p analytics",
            "docker run -p 8080:80 -p 8443:443 nginx:1.27",
            "nbmemory-cli --token TOKEN --password PASSWORD",
            'sshpass -p "$SSH_PASS" ssh deploy@10.0.0.5',
            'redis-cli -a "$REDIS_PASSWORD" -h cache ping',
            "echo $CR_PAT | docker login ghcr.io -u ada --password-stdin",
            "pytest -p no:cacheprovider -k 'not slow' tests/",
            "ssh -p 2222 -i ~/.ssh/id_ed25519 ada@bastion",
        ],
    )
    return out


# --- scoring -----------------------------------------------------------------------------------


def leaked(secret: str, text: str, window: int = WINDOW) -> bool:
    """True if any piece of ``secret`` of ``min(len, window)`` characters occurs in ``text``."""
    w = min(len(secret), window)
    return any(secret[i : i + w] in text for i in range(len(secret) - w + 1))


@dataclass
class SecretsScore:
    """Recall per vendor and overall, the false-positive rate, and what went wrong."""

    positives: int
    negatives: int
    redacted: int
    labelled_right: int
    false_positives: int
    per_vendor: dict[str, tuple[int, int]] = field(default_factory=dict)
    per_context: dict[str, tuple[int, int]] = field(default_factory=dict)
    fp_per_family: dict[str, tuple[int, int]] = field(default_factory=dict)
    misses: list[SecretCase] = field(default_factory=list)
    mislabelled: list[tuple[SecretCase, dict[str, int]]] = field(default_factory=list)
    fp_texts: list[LookAlike] = field(default_factory=list)

    @property
    def recall(self) -> float:
        return self.redacted / self.positives if self.positives else 1.0

    @property
    def label_accuracy(self) -> float:
        return self.labelled_right / self.positives if self.positives else 1.0

    @property
    def fp_rate(self) -> float:
        return self.false_positives / self.negatives if self.negatives else 0.0

    def to_dict(self) -> dict[str, object]:
        """The figures as plain data (what the benchmark prints as JSON)."""

        def rate(pair: tuple[int, int]) -> float:
            return round(pair[0] / pair[1], 4) if pair[1] else 1.0

        return {
            "positives": self.positives,
            "negatives": self.negatives,
            "recall": round(self.recall, 4),
            "label_accuracy": round(self.label_accuracy, 4),
            "false_positive_rate": round(self.fp_rate, 4),
            "false_positives": self.false_positives,
            "recall_per_vendor": {
                k: {"recall": rate(v), "n": v[1]} for k, v in sorted(self.per_vendor.items())
            },
            "recall_per_context": {
                k: {"recall": rate(v), "n": v[1]} for k, v in sorted(self.per_context.items())
            },
            "fp_per_family": {k: {"fp": v[0], "n": v[1]} for k, v in sorted(self.fp_per_family.items())},
            "misses": [f"{c.vendor}/{c.format} in {c.context}: {c.text[:80]!r}" for c in self.misses],
            "false_positive_texts": [f"{n.family}: {n.text[:80]!r}" for n in self.fp_texts],
        }


def score(
    cases: Sequence[SecretCase],
    looks: Sequence[LookAlike],
    redactor: Callable[[str], tuple[str, dict[str, int]]] | None = None,
) -> SecretsScore:
    """Run the redactor over the labelled set and count.

    Parameters
    ----------
    cases, looks:
        From :func:`positives` and :func:`negatives`.
    redactor:
        ``text -> (redacted text, counts per kind)``; default :func:`redact`.
    """
    run = redactor or (lambda t: (lambda r: (r.text, r.counts))(redact(t)))
    vendor: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    context: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    family: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    result = SecretsScore(len(cases), len(looks), 0, 0, 0)
    for case in cases:
        text, counts = run(case.text)
        ok = not any(leaked(s, text) for s in case.secrets)
        vendor[case.vendor][1] += 1
        context[case.context][1] += 1
        if ok:
            result.redacted += 1
            vendor[case.vendor][0] += 1
            context[case.context][0] += 1
        else:
            result.misses.append(case)
        if counts and set(counts) <= {case.kind, *case.also_ok}:
            result.labelled_right += 1
        elif ok:
            result.mislabelled.append((case, counts))
    for look in looks:
        text, counts = run(look.text)
        family[look.family][1] += 1
        if text != look.text:
            result.false_positives += 1
            family[look.family][0] += 1
            result.fp_texts.append(look)
    result.per_vendor = {k: (v[0], v[1]) for k, v in vendor.items()}
    result.per_context = {k: (v[0], v[1]) for k, v in context.items()}
    result.fp_per_family = {k: (v[0], v[1]) for k, v in family.items()}
    return result


# --- notebooks ---------------------------------------------------------------------------------


def notebook_cells(cases: Sequence[SecretCase], per_notebook: int = 12) -> list[dict[str, object]]:
    """nbformat-4 notebooks (as dicts) that carry every case in a cell's source or outputs.

    Code-like contexts go into a cell's source; output contexts into a ``stream``,
    ``execute_result`` (with an image next to the text) or ``error`` output; prose into markdown.
    """
    notebooks: list[dict[str, object]] = []
    counter = Counter[str]()
    for start in range(0, len(cases), per_notebook):
        cells: list[dict[str, object]] = [
            {
                "cell_type": "markdown",
                "id": f"title{start}",
                "metadata": {},
                "source": [f"# Secrets notebook {start}"],
            }
        ]
        for j, case in enumerate(cases[start : start + per_notebook]):
            slot = counter[case.context] % 4
            counter[case.context] += 1
            cell_id = f"c{start}-{j}"
            lines = case.text.splitlines(keepends=True)
            if case.context in ("prose", "markdown"):
                cells.append({"cell_type": "markdown", "id": cell_id, "metadata": {}, "source": lines})
                continue
            if case.context == "notebook-output" or slot == 3:
                outputs: list[dict[str, object]]
                kind = (start + j) % 3
                if kind == 0:
                    outputs = [{"output_type": "stream", "name": "stdout", "text": lines}]
                elif kind == 1:
                    outputs = [
                        {
                            "output_type": "execute_result",
                            "execution_count": j + 1,
                            "metadata": {},
                            "data": {
                                "text/plain": lines,
                                "image/png": "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==",
                            },
                        }
                    ]
                else:
                    outputs = [
                        {
                            "output_type": "error",
                            "ename": "HTTPError",
                            "evalue": "401 Unauthorized",
                            "traceback": [
                                "\x1b[0;31mHTTPError\x1b[0m: request failed",
                                *case.text.splitlines(),
                            ],
                        }
                    ]
                cells.append(
                    {
                        "cell_type": "code",
                        "id": cell_id,
                        "metadata": {},
                        "execution_count": j + 1,
                        "source": ["result = call_service()\n", "result"],
                        "outputs": outputs,
                    }
                )
                continue
            cells.append(
                {
                    "cell_type": "code",
                    "id": cell_id,
                    "metadata": {},
                    "execution_count": j + 1,
                    "source": lines,
                    "outputs": [],
                }
            )
        notebooks.append(
            {
                "nbformat": 4,
                "nbformat_minor": 5,
                "cells": cells,
                "metadata": {
                    "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
                },
            }
        )
    return notebooks


class _RecordingEmbedder:
    """Wraps an embedder and keeps every text it was asked to embed."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.texts: list[str] = []

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def fingerprint(self) -> str:
        return self.inner.fingerprint

    @property
    def dim(self) -> int:
        return self.inner.dim

    def embed_documents(self, texts: Sequence[str], progress: Any = None) -> np.ndarray:
        self.texts.extend(texts)
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> np.ndarray:
        return self.inner.embed_query(text)


@dataclass
class PipelineScore:
    """Secrets that survived notebook chunking and indexing, by where they were found."""

    cases: int
    notebooks: int
    chunks: int
    in_stored_text: list[SecretCase] = field(default_factory=list)
    in_embedded_text: list[SecretCase] = field(default_factory=list)
    in_fts_terms: list[SecretCase] = field(default_factory=list)
    redactions: dict[str, int] = field(default_factory=dict)

    @property
    def leaks(self) -> int:
        return len({id(c) for c in self.in_stored_text + self.in_embedded_text + self.in_fts_terms})

    def to_dict(self) -> dict[str, object]:
        def name(c: SecretCase) -> str:
            return f"{c.vendor}/{c.format} in {c.context}"

        return {
            "cases": self.cases,
            "notebooks": self.notebooks,
            "chunks": self.chunks,
            "leaks": self.leaks,
            "in_stored_text": [name(c) for c in self.in_stored_text],
            "in_embedded_text": [name(c) for c in self.in_embedded_text],
            "in_fts_terms": [name(c) for c in self.in_fts_terms],
            "redactions": dict(sorted(self.redactions.items())),
        }


def pipeline_score(
    folder: str | os.PathLike[str], cases: Sequence[SecretCase], embedder: Embedder | None = None
) -> PipelineScore:
    """Write ``cases`` into notebooks, index them, and look for the secrets in what was stored.

    Three places are searched: the stored chunk text and headings, the texts handed to the
    embedder (what the vectors are made from), and the full-text index's terms (snapshot
    dictionary and delta postings), compared after the index's own tokenizer and stemmer.

    Parameters
    ----------
    folder:
        An empty folder for the notebooks and the memory file.
    cases:
        From :func:`positives`.
    embedder:
        Default: a :class:`~nbmemory.embed.FakeEmbedder` (this is about plumbing).
    """
    from nbmemory.embed.fake import FakeEmbedder
    from nbmemory.memory import Memory
    from nbmemory.store import fts

    root = Path(folder)
    books = root / "notebooks"
    books.mkdir(parents=True, exist_ok=True)
    notebooks = notebook_cells(cases)
    for i, nb in enumerate(notebooks):
        (books / f"secrets-{i:03d}.ipynb").write_text(json.dumps(nb, indent=1), encoding="utf-8")
    recorder = _RecordingEmbedder(embedder or FakeEmbedder(dim=64))
    with Memory(root / "memory.duckdb", embedder=recorder) as mem:
        report = mem.index(books)
        db = mem.db
        stored = "\n\x00".join(t + "\n" + h for t, h in db.fetchall("SELECT text, heading FROM chunks"))
        chunks = int(db.scalar("SELECT count(*) FROM chunks"))
        terms = {
            str(r[0])
            for r in db.fetchall(
                f"SELECT term FROM {fts.FTS_SCHEMA}.dict UNION SELECT term FROM fts_delta",
            )
        }

        def stems(secret: str) -> set[str]:
            rows = db.fetchall(
                "SELECT DISTINCT stem(w, 'porter') FROM "
                f"(SELECT unnest({fts.FTS_SCHEMA}.tokenize(?)) AS w) WHERE length(w) >= 8",
                [secret],
            )
            return {str(r[0]) for r in rows}

        embedded = "\n\x00".join(recorder.texts)
        result = PipelineScore(len(cases), len(notebooks), chunks, redactions=dict(report.redactions))
        for case in cases:
            if any(leaked(s, stored) for s in case.secrets):
                result.in_stored_text.append(case)
            if any(leaked(s, embedded) for s in case.secrets):
                result.in_embedded_text.append(case)
            if any(stems(s) & terms for s in case.secrets):
                result.in_fts_terms.append(case)
    return result
