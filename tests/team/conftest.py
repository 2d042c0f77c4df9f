"""A real PostgreSQL for the team tests: a cluster made in a temporary folder with Debian's
binaries, started on a free localhost port, with two roles: ``nbm_writer`` (creates the lake's
tables, writes) and ``nbm_reader`` (reads what the writer made, through default privileges).
Each test gets a database of its own and a data folder of its own."""

from __future__ import annotations

import glob
import itertools
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from nbmemory.team import TeamConfig

#: The writer, a reader, and a role the lake's databases grant nothing.
PASSWORDS = {"nbm_writer": "writer-secret", "nbm_reader": "reader-secret", "nbm_outsider": "outsider-secret"}
ROOT = Path(__file__).resolve().parents[2]


def _pg_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Cluster:
    bin: Path
    port: int
    sockets: Path
    as_user: list[str]
    counter: itertools.count[int]

    def psql(self, sql: str, database: str = "postgres") -> str:
        done = subprocess.run(
            [
                *self.as_user,
                str(self.bin / "psql"),
                "-h",
                str(self.sockets),
                "-p",
                str(self.port),
                "-U",
                "postgres",
                "-d",
                database,
                "-v",
                "ON_ERROR_STOP=1",
                "-qAt",
                "-c",
                sql,
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode:
            raise RuntimeError(f"psql failed: {done.stderr}")
        return done.stdout

    def catalog(self, database: str, role: str) -> str:
        return f"postgres:dbname={database} host=127.0.0.1 port={self.port} user={role} password={PASSWORDS[role]}"


@pytest.fixture(scope="session")
def postgres() -> Iterator[Cluster]:
    """A PostgreSQL cluster of this test session, stopped at its end."""
    pg = _pg_bin()
    if pg is None:
        pytest.skip(
            "PostgreSQL's binaries are missing (/usr/lib/postgresql/*/bin): apt-get install postgresql"
        )
    # initdb refuses to run as root: the cluster then belongs to the postgres OS user, in a
    # folder outside pytest's (root-only) temporary folders.
    as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    root = Path(tempfile.mkdtemp(prefix="nbm-pg-"))
    if as_user:
        postgres_user = pwd.getpwnam("postgres")
        os.chown(root, postgres_user.pw_uid, postgres_user.pw_gid)
    data, sockets = root / "data", root / "sockets"
    run = [*as_user]
    subprocess.run([*run, "mkdir", "-p", str(sockets)], check=True)
    subprocess.run(
        [
            *run,
            str(pg / "initdb"),
            "-D",
            str(data),
            "-U",
            "postgres",
            "-E",
            "UTF8",
            "--auth-local=trust",
            "--auth-host=scram-sha-256",
            "--no-sync",
        ],
        check=True,
        capture_output=True,
    )
    port = _free_port()
    options = f"-p {port} -k {sockets} -c listen_addresses=127.0.0.1 -c fsync=off"
    subprocess.run(
        [*run, str(pg / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(root / "log"), "-w", "start"],
        check=True,
        capture_output=True,
    )
    cluster = Cluster(pg, port, sockets, as_user, itertools.count())
    try:
        for role, password in PASSWORDS.items():
            cluster.psql(f"CREATE ROLE {role} LOGIN PASSWORD '{password}'")
        yield cluster
    finally:
        subprocess.run([*run, str(pg / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"], check=False)
        shutil.rmtree(root, ignore_errors=True)


@dataclass
class Lake:
    """One test's team lake: a database of the cluster and a data folder."""

    cluster: Cluster
    database: str
    data_path: Path

    def team(self, role: str = "nbm_writer") -> TeamConfig:
        return TeamConfig(self.cluster.catalog(self.database, role), str(self.data_path))

    def team_string(self, role: str = "nbm_writer") -> str:
        return f"{self.cluster.catalog(self.database, role)}|{self.data_path}"


@pytest.fixture
def lake(postgres: Cluster, tmp_path: Path) -> Lake:
    """A fresh catalog database: the writer may create its tables, the reader may only read them."""
    database = f"lab{next(postgres.counter)}"
    postgres.psql(f"CREATE DATABASE {database}")
    postgres.psql(
        "REVOKE CREATE ON SCHEMA public FROM PUBLIC; "
        "GRANT USAGE, CREATE ON SCHEMA public TO nbm_writer; GRANT USAGE ON SCHEMA public TO nbm_reader; "
        "ALTER DEFAULT PRIVILEGES FOR ROLE nbm_writer IN SCHEMA public GRANT SELECT ON TABLES TO nbm_reader",
        database,
    )
    data = tmp_path / "lake-data"
    data.mkdir()
    return Lake(postgres, database, data)


#: Run before a client's code when it runs as another OS account: the process starts as this
#: one (the interpreter and its standard library may lie in a folder only it can read, like
#: /root), makes one team write and search in a throwaway folder so every module they need is
#: loaded, then becomes the other account for good. From there on the files it reads and writes
#: are checked against that account, as for a second person on a JupyterHub.
BECOME = """
import os, pwd, tempfile
from nbmemory import Memory
from nbmemory.embed import FakeEmbedder
from nbmemory.store import team as team_store
warm, home_cache = tempfile.mkdtemp(), os.environ["NBMEMORY_CACHE"]
os.environ["NBMEMORY_CACHE"] = warm + "/cache"
with Memory(warm + "/m.duckdb", embedder=FakeEmbedder(dim=32), team=f"{warm}/l.ducklake|{warm}/d") as mem:
    mem.remember("warm", namespace="team:warm")
    mem.search("warm")
    mem.stats()
team_store.extension_files.cache_clear()  # found again from the account's own cache folder
os.environ["NBMEMORY_CACHE"] = home_cache
account = pwd.getpwnam(ACCOUNT)
os.setgroups([])
os.setgid(account.pw_gid)
os.setuid(account.pw_uid)
"""


def start_client(
    lake: Lake, home: Path, code: str, role: str = "nbm_writer", account: str | None = None
) -> subprocess.Popen[str]:
    """Start ``code`` in another Python process with a memory of its own (``mem``: its personal
    file under ``home``, the team attached through ``NBMEMORY_TEAM``); as the OS user
    ``account`` when given (this process must be root; ``home`` is made that user's)."""
    script = textwrap.dedent(
        """
        from nbmemory import Memory
        from nbmemory.embed import FakeEmbedder
        with Memory(embedder=FakeEmbedder(dim=32)) as mem:
        """
    ) + textwrap.indent(textwrap.dedent(code), "    ")
    if account is not None:
        user = pwd.getpwnam(account)
        home.mkdir(parents=True, exist_ok=True)
        os.chown(home, user.pw_uid, user.pw_gid)
        script = f"ACCOUNT = {account!r}\n" + BECOME + script
    env = {
        **os.environ,
        "NBMEMORY_HOME": str(home),
        "NBMEMORY_CACHE": str(home / "cache"),
        "NBMEMORY_TEAM": lake.team_string(role),
        "HF_HUB_OFFLINE": "1",
    }
    return subprocess.Popen(
        [sys.executable, "-c", script],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(client: subprocess.Popen[str]) -> str:
    """The client's stdout once it ended; fails with its stderr if it failed."""
    out, err = client.communicate(timeout=120)
    if client.returncode:
        raise AssertionError(f"client failed:\n{err}")
    return out


def run_client(
    lake: Lake, home: Path, code: str, role: str = "nbm_writer", account: str | None = None
) -> str:
    """Run ``code`` as :func:`start_client` does and wait for it; its stdout."""
    return finish(start_client(lake, home, code, role, account))
