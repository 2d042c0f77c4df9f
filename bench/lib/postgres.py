"""A throwaway PostgreSQL cluster for the team benchmarks, as ``tests/team/conftest.py`` makes one
(no pytest here): Debian's binaries (``/usr/lib/postgresql/*/bin``), a cluster in a temporary
folder (owned by the ``postgres`` OS user when this runs as root, since initdb refuses root), a
free localhost port, scram-sha-256 over TCP, and two roles: ``nbm_writer`` (creates the lake's
tables, writes) and ``nbm_reader`` (reads what the writer made, through default privileges).

Unlike the tests' cluster, this one keeps PostgreSQL's durable defaults (``fsync``,
``synchronous_commit``): a commit's latency is a real one.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

PASSWORDS = {"nbm_writer": "writer-secret", "nbm_reader": "reader-secret"}


def pg_bin() -> Path:
    """The folder of the newest installed PostgreSQL's binaries."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found:
        raise SystemExit(
            "PostgreSQL's binaries are missing (/usr/lib/postgresql/*/bin): apt-get install postgresql"
        )
    return Path(found[-1]).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Cluster:
    """A running cluster: its binaries, port and socket folder, and how to run as its owner."""

    bin: Path
    port: int
    sockets: Path
    as_user: list[str]

    def psql(self, sql: str, database: str = "postgres") -> str:
        """Run ``sql`` as the superuser; its unaligned output."""
        done = subprocess.run(
            [
                *self.as_user,
                str(self.bin / "psql"),
                *("-h", str(self.sockets), "-p", str(self.port), "-U", "postgres", "-d", database),
                *("-v", "ON_ERROR_STOP=1", "-qAt", "-c", sql),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode:
            raise RuntimeError(f"psql failed on {sql[:80]!r}: {done.stderr.strip()}")
        return done.stdout

    def catalog(self, database: str, role: str) -> str:
        """The ``postgres:`` catalog string of ``database`` for ``role``."""
        return f"postgres:dbname={database} host=127.0.0.1 port={self.port} user={role} password={PASSWORDS[role]}"

    def create_lake(self, database: str) -> None:
        """A catalog database: the writer may create its tables, the reader may only read them."""
        self.psql(f"CREATE DATABASE {database}")
        self.psql(
            "REVOKE CREATE ON SCHEMA public FROM PUBLIC; "
            "GRANT USAGE, CREATE ON SCHEMA public TO nbm_writer; GRANT USAGE ON SCHEMA public TO nbm_reader; "
            "ALTER DEFAULT PRIVILEGES FOR ROLE nbm_writer IN SCHEMA public GRANT SELECT ON TABLES TO nbm_reader",
            database,
        )


@contextmanager
def cluster() -> Iterator[Cluster]:
    """A PostgreSQL cluster in a temporary folder, stopped and removed on exit."""
    pg = pg_bin()
    as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    root = Path(tempfile.mkdtemp(prefix="nbm-bench-pg-"))
    if as_user:
        owner = pwd.getpwnam("postgres")
        os.chown(root, owner.pw_uid, owner.pw_gid)
    data, sockets = root / "data", root / "sockets"
    subprocess.run([*as_user, "mkdir", "-p", str(sockets)], check=True)
    subprocess.run(
        [
            *as_user,
            str(pg / "initdb"),
            *("-D", str(data), "-U", "postgres", "-E", "UTF8"),
            *("--auth-local=trust", "--auth-host=scram-sha-256"),
        ],
        check=True,
        capture_output=True,
    )
    port = _free_port()
    options = f"-p {port} -k {sockets} -c listen_addresses=127.0.0.1"
    subprocess.run(
        [
            *as_user,
            str(pg / "pg_ctl"),
            "-D",
            str(data),
            "-o",
            options,
            "-l",
            str(root / "log"),
            "-w",
            "start",
        ],
        check=True,
        capture_output=True,
    )
    running = Cluster(pg, port, sockets, as_user)
    try:
        for role, password in PASSWORDS.items():
            running.psql(f"CREATE ROLE {role} LOGIN PASSWORD '{password}'")
        yield running
    finally:
        subprocess.run(
            [*as_user, str(pg / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"],
            check=False,
            capture_output=True,
        )
        shutil.rmtree(root, ignore_errors=True)
