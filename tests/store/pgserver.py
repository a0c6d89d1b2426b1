"""A throwaway PostgreSQL server on a free loopback port, for the store tests.

Run as root, the server runs as the `postgres` user (PostgreSQL refuses to run as root)
with a data directory that user owns. Nothing is skipped: a missing installation fails
with the command that installs it.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Optional

INSTALL_HINT = "PostgreSQL is not installed; install it with: apt-get install -y postgresql"


def find_bindir() -> Optional[str]:
    """The directory holding initdb and pg_ctl, newest version first, or None."""
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]), reverse=True)
    for d in candidates + ["/usr/local/bin", "/usr/bin"]:
        if os.path.exists(os.path.join(d, "initdb")) and os.path.exists(os.path.join(d, "pg_ctl")):
            return d
    which = shutil.which("initdb")
    return os.path.dirname(which) if which and shutil.which("pg_ctl") else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresServer:
    def __init__(self) -> None:
        bindir = find_bindir()
        if bindir is None:
            raise RuntimeError(INSTALL_HINT)
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="evalrx-pg-"))
        self.data = self.root / "data"
        self.port = free_port()
        self.as_root = os.geteuid() == 0
        self.user = "postgres" if self.as_root else None

    def _cmd(self, *args: str) -> list:
        exe = [os.path.join(self.bindir, args[0]), *args[1:]]
        return ["runuser", "-u", "postgres", "--", *exe] if self.as_root else exe

    def start(self) -> "PostgresServer":
        if self.as_root:
            shutil.chown(self.root, "postgres", "postgres")
        run = lambda cmd: subprocess.run(cmd, check=True, capture_output=True, text=True)  # noqa: E731
        try:
            run(
                self._cmd(
                    "initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-instructions"
                )
            )
        except subprocess.CalledProcessError as exc:
            raise RuntimeError(f"initdb failed: {exc.stderr}") from None
        self._pg_ctl_start()
        return self

    def _pg_ctl_start(self) -> None:
        opts = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={self.root} "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
        )
        cmd = self._cmd("pg_ctl", "-D", str(self.data), "-o", opts, "-l", str(self.root / "log"), "-w", "-t", "60")
        try:
            subprocess.run([*cmd, "start"], check=True, capture_output=True, text=True)
        except subprocess.CalledProcessError as exc:
            log = (self.root / "log").read_text() if (self.root / "log").exists() else ""
            raise RuntimeError(f"pg_ctl start failed: {exc.stderr}\n{log}") from None

    def restart(self) -> None:
        """Stop the server as a crash does (`-m immediate`, no checkpoint) and start it again on the same
        port and data: every connection drops and the server recovers from its WAL (benchmarks/soak.py)."""
        subprocess.run(
            self._cmd("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop"), check=True, capture_output=True
        )
        self._pg_ctl_start()

    def stop(self) -> None:
        subprocess.run(self._cmd("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop"), capture_output=True)
        shutil.rmtree(self.root, ignore_errors=True)

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{dbname}"

    def create_database(self) -> str:
        """A fresh, empty database; returns its URL."""
        import psycopg

        name = f"evalrx_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres", autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def drop_database(self, url: str) -> None:
        import psycopg

        name = url.rsplit("/", 1)[1]
        for _ in range(3):
            try:
                with psycopg.connect(
                    f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres", autocommit=True
                ) as conn:
                    conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                return
            except Exception:
                time.sleep(0.2)
