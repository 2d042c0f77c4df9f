"""Secret redaction: recall on a labelled set of fake secrets, no false positives on look-alikes,
overlaps, idempotence, and inputs that could make a regex backtrack."""

from __future__ import annotations

import base64
import json
import random
import re
import string
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nbmemory.ingest.redact import KINDS, Redaction, _echo_eligible, _spans, redact
from tests.quick import examples

MARKER = re.compile(r"\[REDACTED:([a-z0-9-]+)\]")

# Every value below is fake: random characters in the right alphabet, length and prefix.
RNG = random.Random(20240611)
LOWER, UPPER, DIGITS = string.ascii_lowercase, string.ascii_uppercase, string.digits
ALNUM = LOWER + UPPER + DIGITS
HEX = "0123456789abcdef"
B64 = ALNUM + "+/"
URLSAFE = ALNUM + "-_"


def rand(alphabet: str, n: int) -> str:
    return "".join(RNG.choice(alphabet) for _ in range(n))


def uuid4() -> str:
    h = rand(HEX, 32)
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-a{h[17:20]}-{h[20:]}"


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def fake_jwt() -> str:
    header = b64url(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    payload = b64url(json.dumps({"sub": rand(DIGITS, 10), "name": "Ada", "iat": 1718000000}).encode())
    return f"{header}.{payload}.{rand(URLSAFE, 43)}"


def pem(label: str, lines: int = 6, headers: str = "") -> str:
    body = "\n".join(rand(B64, 64) for _ in range(lines)) + "\n" + rand(B64, 20) + "=="
    return f"-----BEGIN {label}-----\n{headers}{body}\n-----END {label}-----"


@dataclass(frozen=True)
class Case:
    kind: str
    secret: str
    text: str


# Contexts where nothing but the value itself says "secret": only the value's shape can find it.
SHAPE_CONTEXTS = (
    'client = ServiceClient(credential="{s}")',  # python
    "SERVICE_CREDENTIAL={s}",  # .env
    "service:\n  region: eu-west-1\n  credential: {s}\n",  # yaml
    '{{"service": "billing", "credential": "{s}"}}',  # json
    'export SERVICE_CREDENTIAL="{s}"',  # shell
    "Out[3]: '{s}'",  # notebook output
    "Rotate the credential `{s}` before Friday.",  # markdown
    'curl -s -H "X-Service-Credential: {s}" https://api.example.com/v1/items',  # curl
)
_context = iter(range(10**6))


def shaped(kind: str, *secrets: str) -> list[Case]:
    """Each secret in the next context of SHAPE_CONTEXTS, round robin."""
    return [Case(kind, s, SHAPE_CONTEXTS[next(_context) % len(SHAPE_CONTEXTS)].format(s=s)) for s in secrets]


def in_contexts(kind: str, secret: str, *templates: str) -> list[Case]:
    return [Case(kind, secret, t.format(s=secret)) for t in templates]


def build_positives() -> list[Case]:
    cases: list[Case] = []
    cases += shaped(
        "aws-access-key-id",
        "AKIAIOSFODNN7EXAMPLE",
        "AKIA" + rand(UPPER + DIGITS, 16),
        "ASIA" + rand(UPPER + DIGITS, 16),
        "AKIA" + rand(UPPER + DIGITS, 16),
    )
    aws_secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    cases += in_contexts("aws-secret-access-key", aws_secret, "[default]\naws_secret_access_key = {s}\n")
    cases += in_contexts("aws-secret-access-key", rand(B64, 38) + "Ab", "AWS_SECRET_ACCESS_KEY={s}")
    cases += in_contexts(
        "aws-secret-access-key",
        rand(B64, 38) + "Zq",
        '{{"Credentials": {{"SecretAccessKey": "{s}", "Expiration": "2024-06-11T10:00:00Z"}}}}',
    )
    cases += in_contexts(
        "aws-secret-access-key",
        "Q" + rand(B64, 38) + "x",
        "The AWS console showed the new secret: {s} (copy it now)",
    )
    cases += shaped(
        "github-token",
        "ghp_" + rand(ALNUM, 36),
        "gho_" + rand(ALNUM, 36),
        "ghs_" + rand(ALNUM, 36),
        "github_pat_" + rand(ALNUM, 22) + "_" + rand(ALNUM, 59),
    )
    cases += shaped(
        "gitlab-token",
        "glpat-" + rand(ALNUM, 20),
        "glpat-" + rand(URLSAFE, 20),
        "gldt-" + rand(ALNUM, 20),
    )
    cases += shaped(
        "openai-api-key",
        "sk-proj-" + rand(URLSAFE, 120),
        "sk-" + rand(ALNUM, 20) + "T3BlbkFJ" + rand(ALNUM, 20),
        "sk-svcacct-" + rand(URLSAFE, 100),
    )
    cases += shaped("anthropic-api-key", *("sk-ant-api03-" + rand(URLSAFE, 93) + "AA" for _ in range(3)))
    cases += shaped(
        "slack-token",
        f"xoxb-{rand(DIGITS, 11)}-{rand(DIGITS, 13)}-{rand(ALNUM, 24)}",
        f"xoxp-{rand(DIGITS, 10)}-{rand(DIGITS, 10)}-{rand(DIGITS, 13)}-{rand(HEX, 32)}",
        f"xapp-1-A{rand(UPPER + DIGITS, 10)}-{rand(DIGITS, 13)}-{rand(HEX, 64)}",
    )
    for _ in range(3):
        path = f"T{rand(UPPER + DIGITS, 8)}/B{rand(UPPER + DIGITS, 10)}/{rand(ALNUM, 24)}"
        cases += in_contexts(
            "slack-webhook",
            path,
            'requests.post("https://hooks.slack.com/services/{s}", json={{"text": "done"}})',
        )
    cases += shaped(
        "stripe-key",
        "sk_test_4eC39HqLyjWDarjtT1zdp7dc",
        "sk_live_" + rand(ALNUM, 24),
        "rk_live_" + rand(ALNUM, 24),
        "whsec_" + rand(ALNUM, 32),
    )
    cases += shaped("google-api-key", *("AIza" + rand(URLSAFE, 35) for _ in range(3)))
    cases += shaped("google-oauth-client-secret", *("GOCSPX-" + rand(URLSAFE, 28) for _ in range(3)))
    cases += shaped("google-oauth-token", *("ya29.a0" + rand(URLSAFE, 150) for _ in range(3)))
    for _ in range(3):
        key = pem("PRIVATE KEY")
        account = {
            "type": "service_account",
            "project_id": "demo-project",
            "private_key_id": rand(HEX, 40),
            "private_key": key + "\n",
            "client_email": "svc@demo-project.iam.gserviceaccount.com",
        }
        body = key.split("\n")[1]
        cases.append(Case("gcp-service-account-key", body, json.dumps(account, indent=2)))
    azure = [rand(B64, 86) + "==" for _ in range(3)]
    cases += in_contexts(
        "azure-storage-key",
        azure[0],
        "DefaultEndpointsProtocol=https;AccountName=demo;AccountKey={s};EndpointSuffix=core.windows.net",
    )
    cases += in_contexts("azure-storage-key", azure[1], "AZURE_STORAGE_KEY={s}")
    cases += in_contexts("azure-storage-key", azure[2], 'conn = "AccountName=x;AccountKey={s}"')
    cases += shaped("twilio-api-key", "SK" + rand(HEX, 32), "SK" + rand(HEX, 32))
    cases += in_contexts("twilio-api-key", rand(HEX, 32), "TWILIO_AUTH_TOKEN={s}")
    cases += shaped("sendgrid-api-key", *(f"SG.{rand(URLSAFE, 22)}.{rand(URLSAFE, 43)}" for _ in range(3)))
    cases += shaped("mailgun-api-key", "key-" + rand(HEX, 32), "key-" + rand(HEX, 32))
    cases += in_contexts(
        "mailgun-api-key", f"{rand(HEX, 32)}-{rand(HEX, 8)}-{rand(HEX, 8)}", "MAILGUN_API_KEY={s}"
    )
    cases += shaped("npm-token", "npm_" + rand(ALNUM, 36), "npm_" + rand(ALNUM, 36))
    cases += in_contexts("npm-token", uuid4(), "//registry.npmjs.org/:_authToken={s}\n")
    cases += shaped("pypi-token", *("pypi-AgEIcHlwaS5vcmc" + rand(URLSAFE, 150) for _ in range(3)))
    cases += shaped("huggingface-token", *("hf_" + rand(ALNUM, 34) for _ in range(3)))
    cases += shaped(
        "digitalocean-token",
        "dop_v1_" + rand(HEX, 64),
        "doo_v1_" + rand(HEX, 64),
        "dor_v1_" + rand(HEX, 64),
    )
    cases += shaped(
        "shopify-token", "shpat_" + rand(HEX, 32), "shpca_" + rand(HEX, 32), "shpss_" + rand(HEX, 32)
    )
    cases += shaped(
        "discord-bot-token",
        *(
            f"{b64url(str(RNG.randrange(10**17, 10**18)).encode())}.{rand(URLSAFE, 6)}.{rand(URLSAFE, 38)}"
            for _ in range(3)
        ),
    )
    cases += shaped(
        "telegram-bot-token",
        "110201543:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw",
        f"{RNG.randrange(10**8, 10**9)}:AA{rand(URLSAFE, 33)}",
        f"{RNG.randrange(10**9, 10**10)}:AA{rand(URLSAFE, 33)}",
    )
    cases += in_contexts("datadog-api-key", rand(HEX, 32), "DD_API_KEY={s}")
    cases += in_contexts("datadog-api-key", rand(HEX, 32), 'datadog:\n  datadog_api_key: "{s}"\n')
    cases += in_contexts("datadog-api-key", rand(HEX, 40), 'options = {{"dd_app_key": "{s}"}}')
    cases += in_contexts("heroku-api-key", uuid4(), "export HEROKU_API_KEY={s}")
    cases += in_contexts("heroku-api-key", uuid4(), "heroku_token: {s}\n")
    cases += shaped("heroku-api-key", "HRKU-" + rand(URLSAFE, 60))
    cases += in_contexts("kaggle-api-key", rand(HEX, 32), '{{"username":"ada","key":"{s}"}}')
    cases += in_contexts("kaggle-api-key", rand(HEX, 32), 'os.environ["KAGGLE_KEY"] = "{s}"')
    cases += in_contexts("kaggle-api-key", rand(HEX, 32), "export KAGGLE_KEY={s}")
    jwt_io = (
        "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2"
        "MjM5MDIyfQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
    )
    cases += shaped("jwt", jwt_io, fake_jwt(), fake_jwt())
    cases += in_contexts("jwt", fake_jwt(), "Authorization: Bearer {s}")
    for label in ("RSA PRIVATE KEY", "EC PRIVATE KEY", "OPENSSH PRIVATE KEY", "PRIVATE KEY"):
        key = pem(label)
        cases.append(Case("private-key", key, f"Deploy key:\n\n{key}\n\nKeep it safe."))
    encrypted = pem("RSA PRIVATE KEY", headers="Proc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,1A2B3C\n\n")
    cases.append(Case("private-key", encrypted, f"```\n{encrypted}\n```"))
    cases.append(Case("private-key", pem("ENCRYPTED PRIVATE KEY"), pem("ENCRYPTED PRIVATE KEY")))
    pgp = pem("PGP PRIVATE KEY BLOCK", headers="Version: GnuPG v2\n\n")
    cases.append(Case("private-key", pgp, f"# key.asc\n{pgp}\n"))
    cut = pem("OPENSSH PRIVATE KEY").rsplit("\n", 2)[0]  # END line lost at a chunk boundary
    cases.append(Case("private-key", cut.split("\n", 1)[1], f"id_ed25519:\n{cut}"))
    cases += in_contexts(
        "bearer-token",
        rand(ALNUM, 40),
        'curl -H "Authorization: Bearer {s}" https://api.example.com/v1/me',
    )
    cases += in_contexts(
        "bearer-token", rand(URLSAFE + ".~", 48), 'headers = {{"authorization": "bearer {s}"}}'
    )
    cases += in_contexts(
        "bearer-token",
        rand(ALNUM, 32),
        "GET /v1/me HTTP/1.1\nHost: api.example.com\nAuthorization: Bearer {s}\n",
    )
    basic = base64.b64encode(b"admin:" + rand(ALNUM, 12).encode()).decode()
    cases += in_contexts("basic-auth", basic, "Authorization: Basic {s}")
    cases += in_contexts("basic-auth", "S3cr3t-Pa55", "curl -u admin:{s} https://ci.example.com/api/json")
    cases += in_contexts("basic-auth", "Tr0ub4dor&3", 'requests.get(url, auth=("admin", "{s}"))')
    cases += in_contexts(
        "url-password", "hunter2pass", "DATABASE_URL=postgres://admin:{s}@db.internal:5432/app"
    )
    cases += in_contexts(
        "url-password",
        "Xk9-p2Lq77",
        'client = MongoClient("mongodb+srv://svc:{s}@cluster0.abcde.mongodb.net/test")',
    )
    cases += in_contexts("url-password", "s3cr3tRedis!", "cache:\n  url: redis://:{s}@cache:6379/0\n")
    cases += in_contexts(
        "url-password", "Gu3st-Pw-2024", "Connected to amqp://guest:{s}@rabbit:5672/ in 0.2s"
    )
    cases += in_contexts("password-assignment", "Tr0ub4dor&3", 'DB_PASSWORD = "{s}"')
    cases += in_contexts("password-assignment", "ohS0secret!", "SMTP_PASS={s}\nSMTP_PORT=587\n")
    cases += in_contexts(
        "password-assignment", "hunter2pass", "database:\n  user: app\n  password: hunter2pass\n"
    )
    cases += in_contexts("password-assignment", "p@ssW0rd-2024", '{{"user": "svc", "password": "{s}"}}')
    cases += in_contexts("password-assignment", rand(HEX, 32), 'export API_TOKEN="{s}"')
    cases += in_contexts(
        "password-assignment", "Xy7!kq29Lm", 'conn = psycopg2.connect(host="db", user="app", password="{s}")'
    )
    cases += in_contexts(
        "password-assignment", "mysecretpassword", "docker run -e POSTGRES_PASSWORD={s} -d postgres:16"
    )
    cases += in_contexts("password-assignment", "Sup3rS3cret", "mysql --password={s} analytics")
    cases += in_contexts("password-assignment", rand(HEX, 48), "    http://localhost:8888/lab?token={s}\n")
    cases += in_contexts(
        "password-assignment", "django-insecure-8#k2!x@v$w^z&q*r(t)y_u+i=o-p", "SECRET_KEY = '{s}'"
    )
    cases += in_contexts(
        "password-assignment", "s3cr3t!", "[smtp]\nhost = mail.example.com\npassword = {s}\n"
    )
    cases += in_contexts("password-assignment", "Pa55w0rd!2024", "Connecting with password=Pa55w0rd!2024 ...")
    cases += in_contexts("password-assignment", "Wint3r-is-coming", "## Staging\n\nThe admin passwd: {s}\n")
    cases += in_contexts(
        "password-assignment", rand(HEX, 40), "machine api.wandb.ai\n  login user\n  password {s}\n"
    )
    cases += in_contexts(
        "password-assignment", "Gh0st-Rider!", "machine ftp.example.com login ada password {s}"
    )
    cases += in_contexts("password-assignment", rand(HEX, 40), 'os.environ["WANDB_API_KEY"] = "{s}"')
    for template in (
        'SIGNING = "{s}"',
        "Out[7]: '{s}'",
        "webhook:\n  hmac: {s}\n",
        '{{"hmac": "{s}", "retries": 3}}',
        "The nightly job signs requests with {s} (rotate monthly).",
        'curl -d "sig={s}" https://hooks.example.com/build',
    ):
        value = rand(ALNUM, 40)
        cases.append(Case("high-entropy", value, template.format(s=value)))
    for _ in range(3):
        sig = base64.b64encode(RNG.randbytes(32)).decode().replace("+", "%2B").replace("/", "%2F")
        cases += in_contexts(
            "azure-sas-token",
            sig.replace("=", "%3D"),
            "https://demo.blob.core.windows.net/data/x.csv?sv=2022-11-02&sp=r&se=2024-07-01&sig={s}",
        )
    cases += shaped(
        "azure-client-secret",
        *(rand(ALNUM, 3) + RNG.choice(DIGITS) + "Q~" + rand(ALNUM + "_~.-", 34) for _ in range(3)),
    )
    cases += shaped(
        "docker-token",
        "dckr_pat_" + rand(URLSAFE, 27),
        "dckr_pat_" + rand(URLSAFE, 27),
        "dckr_oat_" + rand(URLSAFE, 32),
    )
    cases += shaped(
        "atlassian-api-token",
        "ATATT3xFfGF0" + rand(URLSAFE, 170) + "=" + rand(HEX.upper(), 8),
        "ATATT3xFfGF0" + rand(URLSAFE, 170) + "=" + rand(HEX.upper(), 8),
        "ATBB" + rand(ALNUM, 32),
    )
    cases += shaped(
        "databricks-token", "dapi" + rand(HEX, 32), "dapi" + rand(HEX, 32) + "-2", "dose" + rand(HEX, 32)
    )
    cases += shaped(
        "api-token",
        f"glsa_{rand(ALNUM, 32)}_{rand(HEX, 8)}",
        "hvs." + rand(URLSAFE, 90),
        "lin_api_" + rand(ALNUM, 40),
        f"{rand(HEX, 32)}-us14",
        "AGE-SECRET-KEY-1" + rand("QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L", 58),
    )
    return cases


POSITIVES = build_positives()

NEGATIVES = [
    # git SHAs, UUIDs, digests and lock files
    "commit 3f1e0f7c9b2a4d5e6f708192a3b4c5d6e7f80912\nAuthor: Ada <ada@example.com>",
    "git checkout 9fceb02d0ae598e95dc970b74767f19372d61af8 -- src/",
    "Merge: 1a2b3c4 5d6e7f8",
    "Fixed in https://github.com/pandas-dev/pandas/commit/9030dc021f07c76809848925cb34828f6c8484f3",
    "run_id = '123e4567-e89b-12d3-a456-426614174000'",
    '{"cell_type": "code", "id": "8D3C2A1B-5E6F-4A7B-9C8D-0E1F2A3B4C5D"}',
    'pkg = {file = "numpy-2.1.3.tar.gz", hash = "sha256:'
    'aa08e04e08aaf974d4458def539dece0d28146d866a39da5639596f4921fd761"}',
    "pip install --require-hashes requests==2.32.3 "
    "--hash=sha256:70761cfe03c773ceb22aa2f671b4757976145175cdfca038c02654d061d6dcc6",
    '"integrity": "sha512-Kq5sNDWDz0ieZC5hYA8+1JWWSqK5fzKqrFxRYzC5o0YYrBIxPgmJmUxIBgkHHPX2pJ7SDiNPQW6RJJKL6Zkg=="',
    "github.com/stretchr/testify v1.9.0 h1:HtqpIVDClZ4nwg75+f6Lvsy/wHu+3BoSGCbBAcpTsTg=",
    "FROM python:3.11-slim@sha256:8f64a67710f3d981cf3008d6f9f1dbe61accd7927f165f4e37ea3f8b883ccc3f",
    "numpy/_core/multiarray.py,sha256=mkAkKAcCcl_WZu3K4AB_jZb8nMiBeYhiZhA9NAY6csQ,1733",
    'checksum = "0e4dd05c4b3e86ef7d2d1bb7c8c4b4b0d5e3f1c7a9b8e6d5c4b3a29180706f5e"',
    "/home/ada/.cache/huggingface/hub/models--sentence-transformers--all-MiniLM-L6-v2/snapshots/"
    "c9745ed1d9f207416be6d2e6f8de32d1f16199bf/config.json",
    # identifiers, code and prose
    "def test_redaction_handles_multiline_private_keys():\n    assert True",
    "trainer = configure_distributed_data_parallel_training_with_mixed_precision(model)",
    "from transformers import TFAutoModelForSequenceClassificationWithPastKeyValues",
    "x86_weight_only_quint4x2_dtype_config = DTypeConfig(input_dtype=torch.float)",
    "kai_get_rhs_packed_size_rhs_pack_nxk_qsi4cxp_qsu4cxs1s0(n, k)",
    "hipDeviceAttributeMaxSurfaceCubemapLayeredWidth = 42",
    "class Qwen3OmniMoeCode2WavTransformerModel(PreTrainedModel): ...",
    "var a=function(b,c){return b+c},d=a(1,2),_0x3f2a=_0x1b4c[0x12];",
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore "
    "et dolore magna aliqua. Ut enim ad minim veniam, quis nostrud exercitation ullamco laboris.",
    ".cell { color: #ff00aa; background: #1e1e1e; border-color: #ABCDEF; }",
    "numpy==2.1.3 torch==2.13.0+cpu v1.2.3-rc.1+build.5 Python 3.11.7 (main, Dec  8 2023)",
    "B64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/'",
    "encoded = 'aGVsbG8gd29ybGQ='  # base64 of 'hello world'",
    "msg = 'dGhlIHF1aWNrIGJyb3du'",
    "quote = 'VGhlc2UgYXJlbid0IHRoZSBkcm9pZHMgeW91J3JlIGxvb2tpbmcgZm9y'",
    "model = SentenceTransformer('sentence-transformers/all-MiniLM-L6-v2')",
    'llm = AutoModelForCausalLM.from_pretrained("HuggingFaceH4/zephyr-orpo-141b-A35b-v0.1")',
    "@misc{wen2025matryoshkarevisitingsparsecoding, title={Beyond Matryoshka}}",
    '"pwd": "IPython.core.magics.osm:OSMagics",',
    "tornado.httpclient.HTTPRequest.auth_password: attribute",
    "Use the login form and password fields below, then login again with password reset links.",
    "arn:aws:iam::123456789012:role/service-role/MyLambdaExecutionRole",
    'marker = "[REDACTED:github-token]" if leaked else ""',
    # URLs without passwords
    "See https://github.com/user/repo/blob/main/src/nbmemory/ingest/redact_helpers.py#L10-L20",
    "git clone ssh://git@github.com:22/org/repo.git",
    "Open http://localhost:8888/tree?redirect=/notebooks/analysis.ipynb",
    "https://ada@host.example.com/path/to/resource?page=2&sort=desc",
    "Search https://example.com/search?q=password+reset+instructions",
    "DATABASE_URL=postgres://app@db.internal:5432/app",
    # credentials that are references, placeholders or code
    'password = os.environ["DB_PASSWORD"]',
    "password: <your-password>",
    'api_key = os.getenv("OPENAI_API_KEY")',
    "token = None",
    "PASSWORD=\nUSER=admin",
    "password: ${DB_PASSWORD}",
    'password: "{{ vault_db_password }}"',
    'secret = "changeme"',
    'password = "xxx"',
    'api_key = "YOUR_API_KEY"',
    'token = "<token>"',
    "OPENAI_API_KEY=sk-...",
    'GITHUB_TOKEN="ghp_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"',
    "SLACK_WEBHOOK=https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX",
    'curl -H "Authorization: Bearer $TOKEN" https://api.example.com',
    'headers = {"Authorization": f"Bearer {token}"}',
    "Authorization: Bearer <token>",
    "curl -u $CI_USER:$CI_PASSWORD https://ci.example.com",
    'engine = create_engine(f"postgresql://{user}:{password}@{host}/{db}")',
    "url = 'postgres://user:${DB_PASSWORD}@db:5432/app'",
    "client = OpenAI(\n    api_key=openai_api_key,\n    timeout=30,\n)",
    "conn = connect(password=password)",
    "ids = tokenizer.encode(text)\ntoken = ids[0]\nmax_tokens = 1024",
    'pad_token = "[PAD]"\neos_token = "</s>"\nself.image_newline_token = "|NEWLINE|"',
    '{"bos_token": "<s>", "unk_token": "<unk>", "mask_token": "[MASK]"}',
    "class Settings(BaseSettings):\n    password: SecretStr\n    api_key: str = Field(...)",
    "def login(user: str, password: str) -> bool:\n    passwd: HTTPPasswordMgr",
    "    token : str\n        The access token.",
    "c.ServerApp.token = ''",
    "bypass = True\ncompass_heading: north",
    "# First pass: decided_mask==0, second pass: the rest",
    'TOKEN_RE = r"[-!#$%&\'*+.^_`|~0-9a-zA-Z]+"',
    "secret: my-app-secret\nkind: Secret",
    '<assemblyIdentity publicKeyToken="1fc8b3b9a1e18e3b" version="1.0.0.0"/>',
    '"client.session-token": "s3.session-token"',
    "-----BEGIN PRIVATE KEY----- is the first line of a PEM file.",
    "stripe.api_key = 'pk_test_TYooMQauvdEDq54NiTphI7jx'",
    "from transformers import 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",
    # notebook images
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==",
    '"image/png": "iVBORw0KGgoAAAANSUhEUgAAAoAAAAHgCAYAAAA10dzkAAAAOXRFWHRTb2Z0d2FyZQBNYXRwbG90bGliIHZlcnNpb24zLjguMCwgaHR0cHM6Ly9tYXRwbG90bGliLm9yZy81sbWrAAAACXBIWXMAAA9hAAAPYQGoP6dpAA"',
]


def test_the_labelled_set_is_large_enough_and_covers_every_kind() -> None:
    per_kind = {kind: sum(c.kind == kind for c in POSITIVES) for kind in KINDS}
    assert all(n >= 3 for n in per_kind.values()), per_kind
    assert len(NEGATIVES) >= 60
    assert len(KINDS) == len(set(KINDS))
    assert all(re.fullmatch(r"[a-z0-9]+(?:-[a-z0-9]+)*", k) for k in KINDS)


def test_every_labelled_secret_is_removed_and_counted_under_its_kind() -> None:
    missed = []
    for case in POSITIVES:
        result = redact(case.text)
        if case.secret in result.text or result.counts != {case.kind: 1}:
            missed.append((case.kind, result.counts, case.text[:60]))
    assert missed == []


def test_no_look_alike_is_redacted() -> None:
    results = {text: redact(text) for text in NEGATIVES}
    assert [(text[:60], r.counts) for text, r in results.items() if r.total or r.text != text] == []


def test_planted_aws_github_private_key_and_database_url() -> None:
    key = pem("RSA PRIVATE KEY")
    text = (
        "aws_access_key_id = AKIAIOSFODNN7EXAMPLE\n"
        "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n"
        "export GITHUB_TOKEN=ghp_1A2b3C4d5E6f7G8h9I0jK1l2M3n4O5p6Q7r8\n"
        f"{key}\n"
        "DATABASE_URL=postgres://admin:hunter2pass@db.internal:5432/app\n"
    )
    result = redact(text)
    assert result.text == (
        "aws_access_key_id = [REDACTED:aws-access-key-id]\n"
        "aws_secret_access_key = [REDACTED:aws-secret-access-key]\n"
        "export GITHUB_TOKEN=[REDACTED:github-token]\n"
        "[REDACTED:private-key]\n"
        "DATABASE_URL=postgres://admin:[REDACTED:url-password]@db.internal:5432/app\n"
    )
    assert result.counts == {
        "aws-access-key-id": 1,
        "aws-secret-access-key": 1,
        "github-token": 1,
        "private-key": 1,
        "url-password": 1,
    }
    assert result.total == 5
    assert redact("postgres://admin:hunter2pass@db.internal:5432/app").text == (
        "postgres://admin:[REDACTED:url-password]@db.internal:5432/app"
    )


def test_redaction_is_idempotent_on_the_labelled_set() -> None:
    for text in [c.text for c in POSITIVES] + NEGATIVES:
        once = redact(text)
        twice = redact(once.text)
        assert twice.text == once.text
        assert twice.counts == {}


def test_vendor_rule_wins_over_the_rules_that_overlap_it() -> None:
    token = "ghp_" + rand(ALNUM, 36)
    # password-assignment, high-entropy and github-token all match the same value
    assert redact(f'token = "{token}"').text == 'token = "[REDACTED:github-token]"'
    # url-password and github-token: user and host stay
    assert redact(f"https://ci:{token}@github.com/org/repo.git").text == (
        "https://ci:[REDACTED:github-token]@github.com/org/repo.git"
    )
    # bearer-token and jwt
    jwt = fake_jwt()
    assert redact(f"Authorization: Bearer {jwt}").counts == {"jwt": 1}
    # a generic token that starts earlier and contains the vendor token: one marker, vendor kind
    result = redact(f"value: build-{token} done")
    assert result.counts == {"github-token": 1}
    assert result.text.count("[REDACTED:") == 1 and token not in result.text


def test_adjacent_and_repeated_secrets_are_counted_one_by_one() -> None:
    a, b = "ghp_" + rand(ALNUM, 36), "AKIA" + rand(UPPER + DIGITS, 16)
    result = redact(f"{a} {a}\n{b},{a}")
    assert result.text == (
        "[REDACTED:github-token] [REDACTED:github-token]\n[REDACTED:aws-access-key-id],[REDACTED:github-token]"
    )
    assert result.counts == {"github-token": 3, "aws-access-key-id": 1}
    assert result.total == 4


def test_markers_are_never_nested_or_garbled() -> None:
    text = "\n".join(c.text for c in POSITIVES)
    result = redact(text)
    assert result.total == sum(result.counts.values()) == len(MARKER.findall(result.text))
    assert set(MARKER.findall(result.text)) <= set(KINDS)
    # Outside whole markers, no piece of a marker is left.
    assert "REDACTED" not in MARKER.sub("", result.text)
    assert all(c.secret not in result.text for c in POSITIVES)


def test_a_password_echoed_elsewhere_is_redacted_everywhere() -> None:
    text = 'DB_PASSWORD = "Xy7!kq29Lm"\n...\nOut[4]: connecting as app with Xy7!kq29Lm'
    result = redact(text)
    assert "Xy7!kq29Lm" not in result.text
    assert result.counts == {"password-assignment": 2}


def test_multiline_private_key_keeps_the_text_around_it() -> None:
    key = pem("OPENSSH PRIVATE KEY", lines=20)
    result = redact(f"Before the key.\n{key}\nAfter the key.")
    assert result.text == "Before the key.\n[REDACTED:private-key]\nAfter the key."
    assert result.counts == {"private-key": 1}


def test_private_key_without_end_is_redacted_to_the_end_of_the_text() -> None:
    key = pem("RSA PRIVATE KEY").rsplit("\n", 1)[0]
    result = redact(f"notes\n{key}\nstill key material? we cannot tell, so it goes")
    assert result.text == "notes\n[REDACTED:private-key]"


def test_private_key_whose_begin_is_in_another_chunk_is_redacted_up_to_its_end() -> None:
    tail = pem("EC PRIVATE KEY").split("\n", 1)[1]
    result = redact(f"see the previous chunk\n{tail}\nnext section")
    assert result.text == "see the previous chunk\n[REDACTED:private-key]\nnext section"


def test_service_account_json_keeps_everything_but_the_key() -> None:
    key = pem("PRIVATE KEY")
    account = {
        "type": "service_account",
        "private_key": key + "\n",
        "client_email": "svc@p.iam.gserviceaccount.com",
    }
    result = redact(json.dumps(account))
    assert json.loads(result.text) == {
        "type": "service_account",
        "private_key": "[REDACTED:gcp-service-account-key]",
        "client_email": "svc@p.iam.gserviceaccount.com",
    }


def test_a_key_inside_a_call_assigned_to_another_key_is_still_found() -> None:
    result = redact('token = client.login(user="ada", password="Hunt3r-pass!")')
    assert result.text == 'token = client.login(user="ada", password="[REDACTED:password-assignment]")'


def test_only_the_value_of_an_assignment_is_replaced() -> None:
    assert redact('DB_PASSWORD = "Tr0ub4dor&3"').text == 'DB_PASSWORD = "[REDACTED:password-assignment]"'
    assert (
        redact("  password: hunter2pass  # prod").text == "  password: [REDACTED:password-assignment]  # prod"
    )
    assert redact("export API_TOKEN=a8f5f167f44f4964e6c998dee827110c").text == (
        "export API_TOKEN=[REDACTED:password-assignment]"
    )


def test_non_string_input_is_rejected_without_echoing_it() -> None:
    with pytest.raises(TypeError) as info:
        redact(b"ghp_1A2b3C4d5E6f7G8h9I0jK1l2M3n4O5p6Q7r8")  # type: ignore[arg-type]
    assert "ghp_" not in str(info.value)


def test_empty_and_clean_text_come_back_unchanged() -> None:
    assert redact("") == Redaction("", {})
    assert redact("just words").total == 0


@settings(deadline=None)
@given(st.text())
def test_redact_never_raises_and_is_idempotent_on_arbitrary_text(text: str) -> None:
    once = redact(text)
    assert redact(once.text).text == once.text
    assert once.total == len(MARKER.findall(once.text)) - len(MARKER.findall(text))
    for s, e, kind in _spans(text):
        assert kind in KINDS
        if _echo_eligible(text[s:e]):
            assert text[s:e] not in once.text


@settings(max_examples=examples(200), deadline=None)
@given(st.text(), st.sampled_from(POSITIVES), st.text())
def test_a_secret_surrounded_by_arbitrary_text_never_survives(before: str, case: Case, after: str) -> None:
    text = f"{before}\n{case.text}\n{after}"
    result = redact(text)
    assert case.secret not in result.text
    assert result.counts.get(case.kind, 0) >= 1
    for s, e, _ in _spans(text):
        if _echo_eligible(text[s:e]):
            assert text[s:e] not in result.text
    assert redact(result.text).text == result.text


ADVERSARIAL = {
    "a": "a" * 1_000_000,
    "equals": "=" * 1_000_000,
    "A": "A" * 1_000_000,
    "digits": "7" * 1_000_000,
    "newlines": "\n" * 1_000_000,
    "github prefixes": "ghp_" * 250_000,
    "github_pat prefixes": "github_pat_" * 90_000,
    "aws prefixes": "AKIA" * 250_000,
    "jwt prefixes": "eyJ" * 300_000 + ".",
    "begin lines": "-----BEGIN RSA PRIVATE KEY-----\n" * 30_000,
    "end lines": "MIIEowIBAAKCAQEA7d9s8c2JxYk1\n-----END PRIVATE KEY-----\n" * 20_000,
    "key lines without end": ("A" * 64 + "\n") * 15_000 + "-----END PRIVATE KEY-----",
    "assignments": "password=" * 110_000,
    "yaml keys": "token: " * 140_000,
    "url userinfo": "://a:" * 200_000,
    "url at signs": "postgres://u:" + "@" * 1_000_000,
    "bearer": "Authorization: Bearer " * 45_000,
    "slack": "xoxb-1-" * 140_000,
    "telegram": "123456789:" * 100_000,
    "path": ("a" * 40 + "/") * 25_000,
    "base64 blob": "".join(random.Random(1).choices(B64, k=1_000_000)),
    "random printable": "".join(random.Random(2).choices(string.printable, k=1_000_000)),
    "quotes": '"password": "' * 70_000,
}


@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
def test_adversarial_megabyte_is_redacted_to_a_fixed_point(name: str) -> None:
    # Built to make a backtracking pattern slow (bench.ingest.large_inputs times them); here:
    # what comes out is stable, and redacting it again changes nothing.
    text = ADVERSARIAL[name]
    once = redact(text).text
    assert redact(once).text == once
