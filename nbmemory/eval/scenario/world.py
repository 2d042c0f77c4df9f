"""The scenario's world: the facts a data engineer keeps (preferences, services, incidents,
conventions), the questions with no answer in it, and the synonyms of its paraphrased copies."""

from __future__ import annotations

import random
import re

KINDS = ("keyword-exact", "paraphrase", "procedure", "multi-topic", "miss", "updated")

# -- the world ---------------------------------------------------------------------------------

# (task, how a person asks about it, choice, alternative, reason)
# fmt: off
PREFERENCES: list[tuple[str, str, str, str, str]] = [
    ("dataframes in quick notebook analysis", "poking at data interactively in a notebook", "polars", "pandas", "lazy queries are faster and the API is stricter"),
    ("dataframes in long-running production jobs", "the scheduled batch jobs", "pandas", "polars", "the ops team already knows its memory profile"),
    ("formatting Python code", "keeping code style consistent", "ruff format", "black", "one tool for lint and format keeps CI fast"),
    ("editing files on remote hosts", "changing files over SSH", "neovim", "VS Code remote", "it starts instantly on the jump host"),
    ("keeping shells alive", "sessions that survive a dropped connection", "tmux", "screen", "its pane layouts are scriptable"),
    ("charts in notebooks", "making plots in Jupyter", "Altair", "matplotlib", "declarative charts are easier to tweak later"),
    ("SQL on local parquet files", "querying data files on my laptop", "DuckDB", "SQLite", "it reads parquet directly without an import step"),
    ("installing Python dependencies", "setting up virtual environments", "uv", "pip-tools", "it resolves and installs in seconds"),
    ("meeting notes", "writing things down during calls", "plain markdown files in ~/notes", "Notion", "they are greppable and live in git"),
    ("code reviews", "when to do reviews", "reviewing right after standup", "reviewing at the end of the day", "fresh eyes catch more bugs"),
    ("scheduling calls", "booking a call with me", "meetings after 10:00", "early morning meetings", "mornings are for deep work"),
    ("coffee", "what to bring me from the café", "a flat white with oat milk", "filter coffee", "regular milk upsets my stomach"),
    ("the login shell", "which shell to set up", "zsh with a minimal prompt", "fish", "colleagues' scripts assume POSIX syntax"),
    ("merging pull requests", "how to merge a PR", "squash merges", "merge commits", "the main branch history stays readable"),
    ("calling HTTP APIs from Python", "talking to REST endpoints in Python", "httpx", "requests", "it supports async and HTTP/2"),
    ("unit tests", "writing tests for a module", "pytest with plain asserts", "unittest classes", "fixtures compose better"),
    ("static type checking", "checking type hints", "mypy in strict mode for new modules", "pyright", "the CI image already ships it"),
    ("deadlines", "which time zone due dates are in", "UTC", "Berlin local time", "the team spans three time zones"),
    ("tracking ML experiments", "logging training runs and metrics", "MLflow on the shared server", "Weights & Biases", "experiment data must stay on our network"),
    ("configuration files", "the format for settings files", "TOML", "YAML", "no implicit typing surprises like the Norway problem"),
    ("documentation sites", "building the project docs", "MkDocs Material", "Sphinx", "markdown is easier for the whole team"),
    ("orchestrating nightly jobs", "running the batch pipeline every night", "Airflow", "cron on the VM", "retries and backfills are built in"),
    ("ticket discussions", "how to reach me about a ticket", "a comment in the ticket", "direct messages", "decisions stay attached to the work"),
    ("team lunch", "ordering food for the team", "vegetarian options", "the burger place", "I stopped eating meat last year"),
    ("keyboard layout", "keyboard settings on a new laptop", "US layout with caps lock as escape", "the German layout", "brackets are easier to type"),
    ("running containers locally", "starting containers on my machine", "Podman", "Docker Desktop", "no licence is needed and it runs rootless"),
    ("committing notebooks", "putting notebooks into git", "stripping outputs with nbstripout", "committing outputs", "diffs stay small"),
    ("application logs", "structuring log lines", "JSON lines with a request id", "plain text logs", "the log search indexes fields"),
    ("pair programming", "working together on code", "short sessions in a shared tmux", "screen sharing on video calls", "latency is lower and both of us can type"),
    ("reading papers", "keeping up with research", "printing them and annotating by hand", "reading PDFs on screen", "I remember more from paper"),
    ("time off notice", "telling me about holidays", "two weeks of notice in the team calendar", "last-minute messages", "planning sprints needs it"),
    ("dashboards", "building monitoring views", "Grafana with dashboards as code", "hand-made Kibana boards", "changes get reviewed like code"),
]
# fmt: on

SERVICES: dict[str, str] = {
    "billing-api": "the service that charges customers",
    "auth-gateway": "the login gateway",
    "search-indexer": "the job that feeds the search cluster",
    "notification-worker": "the worker that sends emails and push messages",
    "report-builder": "the service that renders PDF reports",
    "ingest-pipeline": "the pipeline that loads partner files",
    "feature-store": "the store serving model features",
    "payments-ledger": "the ledger of payment transactions",
    "profile-service": "the user profile backend",
    "export-scheduler": "the scheduler of customer data exports",
    "image-resizer": "the thumbnail service",
    "audit-writer": "the writer of audit log events",
}
ENVIRONMENTS = ("staging", "production")

# (symptom, paraphrased symptom, cause, fix)
# fmt: off
FAILURES: list[tuple[str, str, str, str]] = [
    ("returned HTTP 502s for forty minutes", "kept answering with bad gateway errors", "its database connection pool was capped at 20", "raised the pool to 100 and added an alert on pool wait time"),
    ("ran out of memory every night", "crashed with OOM kills after midnight", "an unbounded in-process cache of customer records", "bounded the cache to 50k entries with LRU eviction"),
    ("fell behind with consumer lag above two million messages", "could not keep up with the Kafka topic", "a single partition took all traffic because of a constant message key", "keyed messages by account id and added partitions"),
    ("served stale data for a day", "showed outdated values to users", "cache invalidation events were dropped during a Redis failover", "made invalidation idempotent and replayed the event log"),
    ("timed out on every request after a deploy", "hung on all calls right after a release", "a retry storm from clients without backoff", "added jittered exponential backoff and a circuit breaker"),
    ("filled its disk and stopped writing", "ran out of disk space", "the log level was left on DEBUG after an investigation", "reset logging to INFO and added a disk usage alert at 80 percent"),
    ("rejected all TLS connections", "refused secure connections from every client", "its certificate expired over the weekend", "moved the certificate to automatic renewal with cert-manager"),
    ("wrote duplicate rows", "produced the same records twice", "a job was retried after a partial commit", "made the load idempotent with a MERGE on the natural key"),
    ("was slow on every query", "had terrible response times", "a missing index on the orders table after a migration", "added the index concurrently and a migration check for dropped indexes"),
    ("skipped scheduled runs", "silently missed its schedule", "clock skew between the scheduler nodes", "enabled chrony on all nodes and alerted on skew above one second"),
    ("leaked file descriptors until it crashed", "died with too many open files", "HTTP responses were never closed in the retry path", "closed responses in a finally block and capped open files per worker"),
    ("lost messages during a restart", "dropped events when it was redeployed", "offsets were committed before processing finished", "committed offsets only after the batch was stored"),
]
# fmt: on
MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)

# (goal, how a person asks for it, steps with {service} and {env})
# fmt: off
PROCEDURES: list[tuple[str, str, list[str]]] = [
    ("rotate the API token of {service} in {env}", "renew the access credentials of {service} on {env}", ["open Vault at secret/{env}/{service}", "run tokenctl rotate --service {service} --env {env}", "restart the pods with kubectl rollout restart deploy/{service} -n {env}", "check /healthz returns 200"]),
    ("restore the {service} database in {env} from the nightly backup", "bring back {service}'s data on {env} from last night's snapshot", ["scale {service} to zero", "run pgrestore-latest --db {service} --env {env}", "verify row counts against the backup manifest", "scale {service} back up"]),
    ("roll back a bad deploy of {service} in {env}", "undo a broken release of {service} on {env}", ["find the previous image tag in the deploy log", "run deployctl rollback {service} --env {env} --to <tag>", "watch error rates in Grafana for ten minutes", "open a ticket describing what broke"]),
    ("run a schema migration for {service} in {env}", "change the database tables of {service} on {env}", ["merge the migration file", "run migrate up --service {service} --env {env} --dry-run", "apply it without --dry-run", "confirm the schema_version table"]),
    ("renew the TLS certificate of {service} in {env}", "replace the expiring HTTPS certificate of {service} on {env}", ["request a certificate from the internal CA for {service}.{env}.internal", "store it in secret/{env}/{service}/tls", "reload the ingress", "check the expiry date with openssl s_client"]),
    ("reindex the search data of {service} in {env}", "rebuild {service}'s search index on {env}", ["pause writers of {service}", "run reindex --source {service} --env {env} --alias-swap", "compare document counts", "resume writers"]),
    ("rerun failed Airflow tasks of {service} in {env}", "retry {service}'s failed pipeline runs on {env}", ["open the Airflow UI for {env}", "clear the failed task instances of the {service} DAG", "watch the rerun logs", "post the outcome in the data channel"]),
    ("scale out the workers of {service} in {env}", "add more capacity to {service} on {env}", ["raise replicas in deploy/{env}/{service}.yaml", "apply with kubectl apply -f", "check the HPA limits", "watch queue depth fall"]),
    ("purge the CDN cache for {service} in {env}", "clear cached responses of {service} on {env} at the edge", ["collect the URL prefixes of {service}", "run cdnctl purge --prefix /{service}/ --env {env}", "wait for the purge id to complete", "spot-check with curl -I"]),
    ("give a new teammate read access to {service} logs in {env}", "let a new colleague see {service}'s logs on {env}", ["add them to the {service}-readers group", "grant the {env}-logs role in the IAM console", "ask them to log in once", "confirm the access in the audit log"]),
]
# fmt: on

PROJECTS = ("atlas", "borealis", "cobalt", "dynamo", "ember", "fjord", "granite", "harbor")
# (convention type, how a person asks, possible values)
# fmt: off
CONVENTIONS: list[tuple[str, str, list[str]]] = [
    ("branch names", "what to call a new git branch in {project}", ["branch names follow feat/<ticket>-<slug>", "branch names are <initials>/<ticket>", "branch names look like topic/<short-slug>"]),
    ("line length", "how long a line of code may be in {project}", ["the line length limit is 88 characters", "the line length limit is 100 characters", "the line length limit is 120 characters"]),
    ("migration files", "how database migration files are named in {project}", ["migrations are numbered m001_add_users.sql and never edited after merge", "migrations use timestamps like 20240131_add_index.sql", "migrations are Alembic revisions with a short message"]),
    ("environment variables", "the naming of settings from the environment in {project}", ["environment variables start with {prefix}_", "environment variables are read only in settings.py with the {prefix}_ prefix", "every environment variable is listed in .env.example with the {prefix}_ prefix"]),
    ("release cadence", "how often {project} ships", ["releases go out every Tuesday after the standup", "releases happen on demand with a changelog entry", "releases are cut on the first Monday of each month"]),
    ("test layout", "where the tests go in {project}", ["tests mirror the package under tests/ and run against a real Postgres in docker compose", "tests live next to the modules as *_test.py files", "tests are split into tests/unit and tests/integration"]),
    ("commit messages", "how commit messages are written in {project}", ["commit messages use conventional commits like feat: and fix:", "commit messages have an imperative subject under 50 characters", "commit messages start with the ticket id"]),
    ("code review", "who has to approve a pull request in {project}", ["pull requests need two approvals when they touch billing code", "pull requests need one approval and CODEOWNERS for infra/", "pull requests need an approval from the on-call engineer"]),
    ("configuration", "where the settings live in {project}", ["configuration lives in config/<env>.toml", "configuration comes only from environment variables", "configuration is stored in the parameter store under /{project}/"]),
    ("logging", "how to log in {project}", ["use structlog with request_id bound on every log line", "use the standard logging module with the JSON formatter", "log through the telemetry wrapper, never print"]),
]
# fmt: on

# What the memory does not hold: the questions asked about these have no answer.
MISSING_SERVICES = {
    "video-transcoder": "the video encoding service",
    "geo-tiler": "the map tile renderer",
    "fraud-scorer": "the fraud model server",
}
MISSING_PROJECTS = ("zephyr", "quasar", "nimbus")
MISSING_QUESTIONS = (
    "which airline do I prefer for work trips",
    "what mechanical keyboard switches do I like",
    "how do I reset the office printer queue",
    "what is the wifi password of the Berlin office",
    "how do I renew the Apple developer certificate",
    "which gym do I go to on Thursdays",
    "how do I configure the Jenkins build agents",
    "what is my preferred font for slides",
    "how do I book the large meeting room",
    "what did the dentist say in my last appointment",
    "which Spark version does the data lake run",
    "how do I migrate the wiki to Confluence",
    "what did we decide about the company offsite location",
    "how do I request a new laptop",
    "which podcast did I want to listen to",
    "what is the budget for the marketing campaign",
    "how do I set up the GPU cluster quota",
    "what are my parents' flight details",
    "which vendor supplies the office chairs",
    "how do I rotate the Slack bot signing secret",
    "what is the SLA of the data warehouse vendor",
    "how do I file travel expenses",
)

# Words and phrases swapped in the third variant; longer keys are tried first.
SYNONYMS: dict[str, tuple[str, ...]] = {
    "because of": ("due to",),
    "because": ("since", "as"),
    "prefer": ("like", "favour"),
    "raised": ("increased", "bumped"),
    "added": ("set up", "introduced"),
    "run": ("execute", "launch"),
    "check": ("verify", "confirm"),
    "open": ("go to", "pull up"),
    "restart": ("bounce", "recycle"),
    "watch": ("monitor", "keep an eye on"),
    "every": ("each",),
    "stopped": ("halted",),
    "returned": ("responded with",),
    "limit": ("maximum",),
    "first": ("to begin with",),
    "remember that": ("keep in mind that", "note that"),
}
_SYNONYM_RE = re.compile(
    r"(?<![-\w])(" + "|".join(re.escape(k) for k in sorted(SYNONYMS, key=len, reverse=True)) + r")\b",
    re.IGNORECASE,
)


def substitute(text: str, rng: random.Random, rate: float = 0.6) -> str:
    """Replace listed words by a synonym with probability ``rate`` (deterministic given ``rng``)."""

    def swap(match: re.Match[str]) -> str:
        phrase = match.group(0)
        options = SYNONYMS[phrase.lower()]
        if rng.random() > rate:
            return phrase
        choice = rng.choice(options)
        return choice[0].upper() + choice[1:] if phrase[0].isupper() else choice

    return _SYNONYM_RE.sub(swap, text)
