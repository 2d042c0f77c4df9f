"""The rule table: every kind of secret, and the vendor and structural rules that find them.

Each rule yields candidate spans ``(start, end, kind)`` that cover only the secret; see
:mod:`nbmemory.ingest.redact` for how overlapping candidates are resolved."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from nbmemory.ingest.redact.assignments import common_ok
from nbmemory.ingest.redact.checks import (
    ALNUM,
    Cand,
    b64decode,
    classes,
    is_digit,
    is_placeholder,
    mixed_case,
    not_filler,
    not_placeholder,
    rx,
)
from nbmemory.ingest.redact.entropy import CONSONANTS_RE, avg_piece

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


# --- rules expressed as one regex each -------------------------------------------------------


def _not_alnum(c: str) -> bool:
    return c not in ALNUM


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

    def find(self, text: str, low: str) -> Iterator[Cand]:
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


def _discord_check(token: str) -> bool:
    # The first part of a Discord bot token is the bot's numeric id, base64-encoded.
    head = b64decode(token.split(".", 1)[0])
    return head is not None and 17 <= len(head) <= 20 and head.isdigit()


def _sas_signature(value: str) -> bool:
    # The signature is base64 of an HMAC-SHA256, usually URL-encoded: 32 bytes once decoded.
    raw = value.replace("%2B", "+").replace("%2b", "+").replace("%2F", "/").replace("%2f", "/")
    raw = raw.replace("%3D", "=").replace("%3d", "=")
    decoded = b64decode(raw)
    return decoded is not None and len(decoded) == 32


def _random_body(prefix_len: int) -> Callable[[str], bool]:
    # For short prefixes whose body could be an identifier: 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.
    def check(value: str) -> bool:
        body = value[prefix_len:]
        # Random letters have short runs between case changes, or consonant runs no word has.
        return not_filler(body) and (avg_piece(body) < 3.5 or CONSONANTS_RE.search(body.lower()) is not None)

    return check


def _after_scheme(c: str) -> bool:
    return c in ALNUM


def _after_space(c: str) -> bool:
    return c in ("", " ", "\t", "\n", "\r")


def _auth_password(value: str) -> bool:
    return len(value) >= 6 and " " not in value and not is_placeholder(value)


def _shape(kind: str, pattern: str, check: Callable[[str], bool] = not_filler) -> _Rule:
    """A credential known by its own shape: prefix, alphabet, length."""
    return _Rule(kind, rx(pattern), check=check)


def _keyed(kind: str, key: str, value: str, check: Callable[[str], bool] | None = None) -> _Rule:
    """A credential known by the key it is assigned to; key and value are matched lower-cased."""
    return _Rule(kind, rx(rf"(?:{key}){_SEP}(?P<s>{value})"), "s", check=check, low=True)


# A look-behind right after a literal prefix keeps the fast literal search and stops a rescan
# from every prefix inside a long run ("glpat-glpat-...").
RULES: tuple[_Rule, ...] = (
    _Rule(
        "gcp-service-account-key",
        rx(
            r"(?P<q>[\"'])private_key(?P=q)[ \t]*:[ \t]*(?P=q)"
            r"(?P<s>-----BEGIN[A-Z ]{0,40}PRIVATE KEY-----[^\"'\n]{0,16384})(?P=q)"
        ),
        "s",
        needs=("private_key",),
        before=None,
    ),
    _Rule(
        "private-key",
        rx(
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
            check=lambda v: mixed_case(v) and not_filler(v),
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
        rx(r"hooks\.slack\.com/(?:services|workflows|triggers)/(?P<s>[A-Za-z0-9_/+-]{20,300})"),
        "s",
        check=not_filler,
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
        rx(r"[?&;]sig=(?P<s>[A-Za-z0-9%+/=]{40,120})(?![A-Za-z0-9%+/=])"),
        "s",
        check=lambda v: _sas_signature(v),
        needs=("sig=",),
        before=None,
    ),
    # Entra ID (Azure AD) application client secrets: 3 characters, a digit, "Q~", 31-34 more.
    _Rule(
        "azure-client-secret",
        rx(r"[A-Za-z0-9_~.]{3}[0-9]Q~[A-Za-z0-9_~.-]{31,34}(?![A-Za-z0-9_~.-])"),
        check=not_filler,
        needs=("Q~",),
        before=lambda c: c not in ALNUM and c not in "_~.-",
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
        rx(r"[0-9a-f]{32}-[0-9a-f]{8}-[0-9a-f]{8}(?![A-Za-z0-9-])"),
        needs=("mailgun",),
    ),
    _shape("npm-token", r"npm_[A-Za-z0-9]{36}(?![A-Za-z0-9])"),
    _Rule(
        "npm-token",
        rx(r"_authToken[ \t]*=[ \t]*[\"']?(?P<s>[A-Za-z0-9_.+/=-]{8,512})"),
        "s",
        check=not_placeholder,
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
        rx(
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
        check=not_filler,
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
        rx(r"\"key\"[ \t]*:[ \t]*\"(?P<s>[a-f0-9]{32})\""),
        "s",
        needs=("username", "kaggle"),
        before=None,
    ),
    _Rule(
        "jwt",
        rx(
            # The signature may be missing: a token cut at a chunk boundary, or unsigned.
            r"eyJ(?<![A-Za-z0-9_-]eyJ)[A-Za-z0-9_-]{8,8192}\.eyJ[A-Za-z0-9_-]{8,8192}"
            r"(?:\.[A-Za-z0-9_-]{0,8192})?(?![A-Za-z0-9_.-])"
        ),
    ),
    _Rule(
        "bearer-token",
        rx(
            # Bearer (RFC 6750), "Token" (GitHub, Django REST framework), SSWS (Okta), ApiKey.
            r"authorization[\"']?[ \t]*[:=][ \t]*[\"']?[ \t]*(?:bearer|token|ssws|apikey)[ \t]+"
            r"(?P<s>[a-z0-9._~+/=-]{8,8192})(?![a-z0-9._~+/=-])"
        ),
        "s",
        check=not_placeholder,
        low=True,
    ),
    _Rule(
        "bearer-token",
        # The value in a headers dict: {"Authorization": "Bearer ..."}
        rx(r"bearer[ \t]+(?P<s>[a-z0-9._~+/=-]{8,8192})(?![a-z0-9._~+/=-])"),
        "s",
        check=not_placeholder,
        before=lambda c: c in ('"', "'", "`"),
        low=True,
    ),
    _Rule(
        "basic-auth",
        rx(
            r"authorization[\"']?[ \t]*[:=][ \t]*[\"']?[ \t]*basic[ \t]+"
            r"(?P<s>[a-z0-9+/]{6,4096}={0,2})(?![a-z0-9+/=])"
        ),
        "s",
        check=not_placeholder,
        low=True,
    ),
    *(
        _Rule(
            "basic-auth",
            # curl -u user:password, curl --user user:password
            rx(rf"{flag}[ \t]+[\"']?[^\s:\"']{{1,256}}:(?P<s>[^\s\"']{{1,256}})"),
            "s",
            check=not_placeholder,
            before=_after_space,
        )
        for flag in ("-u", "--user")
    ),
    *(
        _Rule(
            "basic-auth",
            # requests' auth=("user", "password"), HTTPBasicAuth("user", "password")
            rx(rf"{call}[ \t]*[\"'][^\"'\n]{{1,256}}[\"'][ \t]*,[ \t]*[\"'](?P<s>[^\"'\n]{{1,256}})[\"']"),
            "s",
            check=_auth_password,
            before=None,
        )
        for call in (r"auth[ \t]*=[ \t]*\(?", r"BasicAuth\(", r"DigestAuth\(")
    ),
    _Rule(
        "password-assignment",
        # .netrc: machine api.example.com login ada password s3cret
        rx(r"login\s{1,64}\S{1,256}\s{1,64}password\s{1,64}(?P<s>\S{1,256})"),
        "s",
        # "login with password reset" is prose: a netrc password is not a plain word.
        check=lambda v: len(v) >= 6 and classes(v) >= 2 and not is_placeholder(v),
    ),
    _Rule(
        "password-assignment",
        # Password options of command-line tools: docker/podman/helm login -p, sshpass -p,
        # redis-cli -a, mysql -pPASSWORD (glued), and --password / --token VALUE in any command.
        rx(
            r"(?:(?:docker|podman|nerdctl|buildah|skopeo|helm|oras)(?:[ \t]+registry)?[ \t]+login[^\n]{0,200}?[ \t]-p"
            r"|sshpass[ \t]+-p|redis-cli[^\n]{0,200}?[ \t]-a|mysql(?:dump|admin)?[^\n]{0,200}?[ \t]-p(?=[^\s-])"
            r"|--(?:password|passwd|pass|token|api-key)(?=[ \t]))"
            r"[ \t]*[\"']?(?P<s>[^\s\"'$-][^\s\"']{5,255})"
        ),
        "s",
        check=lambda v: not is_placeholder(v) and not v.startswith(("<", "{", "%")),
        needs=("-p", "-a", "--pass", "--token", "--api-key"),
    ),
    _Rule(
        "api-token",
        # Weights & Biases: wandb.login(key="..."), 40 hex characters (or 86 on dedicated hosts).
        rx(r"wandb\.login\([^)]{0,200}?key[ \t]*=[ \t]*[\"'](?P<s>[0-9a-f]{40}|[A-Za-z0-9_-]{40,100})[\"']"),
        "s",
        needs=("wandb.login",),
        before=None,
    ),
    _Rule(
        "basic-auth",
        # ~/.docker/config.json: {"auths": {"registry": {"auth": base64("user:password")}}}
        rx(r"\"auth\"[ \t]*:[ \t]*\"(?P<s>[A-Za-z0-9+/]{8,4096}={0,2})\""),
        "s",
        check=lambda v: b":" in (b64decode(v) or b""),
        needs=('"auth"',),
        before=None,
    ),
    _Rule(
        "password-assignment",
        # XML settings (Maven settings.xml, NuGet.config, .NET app.config): <password>...</password>
        rx(
            r"<(?P<tag>(?i:password|passwd|secret|token|api[_-]?key|apikey|client[_-]?secret|access[_-]?key"
            r"|secret[_-]?key|private[_-]?key|auth[_-]?token))>[ \t]*(?P<s>[^<>\s]{6,512})[ \t]*</(?P=tag)>"
        ),
        "s",
        check=lambda v: common_ok(v, True) and not is_placeholder(v),
        needs=("<",),
        before=None,
    ),
    _Rule(
        "password-assignment",
        # Kubernetes and compose env lists: the name on one line, the value on the next.
        rx(
            r"name:[ \t]*[\"']?(?P<k>[A-Za-z0-9_.-]{0,64}(?i:pass(?:word|wd)?|pwd|secret|token|api[_-]?key|apikey"
            r"|access[_-]?key|private[_-]?key|auth[_-]?key|credentials?|[a-z0-9][_-]key)[A-Za-z0-9_.-]{0,64})[\"']?"
            r"[ \t]*\r?\n"
            r"[ \t]*value:[ \t]*[\"']?(?P<s>[^\s\"']{6,512})"
        ),
        "s",
        check=lambda v: common_ok(v, False) and not v.startswith(("$", "{{")),
        needs=("value:",),
    ),
    _Rule(
        "url-password",
        # "#" is not valid in a URL password, but pasted passwords hold it unencoded.
        rx(r"://[^\s:/@?#\[\]\"'<>]{0,256}:(?P<s>[^\s/?\"'<>]{1,256})@"),
        "s",
        check=not_placeholder,
        before=_after_scheme,
    ),
)

# Telegram bot tokens: 8-10 digit bot id, colon, 34-35 character secret.
_TELEGRAM_RE = rx(r":[A-Za-z0-9_-]{34,35}(?![A-Za-z0-9_-])")


def telegram_candidates(text: str, low: str) -> Iterator[Cand]:
    """Telegram bot tokens: ``<bot id>:<secret>``, bot id and secret together."""
    if ":" not in text:
        return
    for m in _TELEGRAM_RE.finditer(text):
        colon = start = m.start()
        while start > 0 and colon - start <= 10 and is_digit(text[start - 1]):
            start -= 1
        secret = m.group()[1:]
        if 8 <= colon - start <= 10 and mixed_case(secret) and not_filler(secret):
            yield start, m.end(), "telegram-bot-token"


# The tail of a PEM block whose BEGIN line is in another chunk: key lines, then the END line.
_KEY_END_RE = rx(r"-{4,5} ?END[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)? ?-{4,5}")
_KEY_LINE_RE = rx(r"[ \t]*(?:[A-Za-z0-9+/=]{16,}|[A-Za-z-]{2,40}:.*|=[A-Za-z0-9+/]{4})[ \t]*\r?")
_KEY_LAST_LINE_RE = rx(r"[ \t]*[A-Za-z0-9+/]{2,}={0,2}[ \t]*\r?")


def key_tail_candidates(text: str, low: str) -> Iterator[Cand]:
    """The key lines and END line of a private key whose BEGIN line is in another chunk."""
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
