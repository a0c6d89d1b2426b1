"""Imports started from the Import page, run in a background thread so the page (and every other
page) stays responsive; the page polls their progress.

One job per browser session: an uploaded file is saved under its own name in the upload folder, previewed,
then imported by `evalrx.interop.import_file` with a progress callback.
"""

from __future__ import annotations

import hashlib
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

_JOBS: dict = {}


def upload_limit() -> str:
    """The upload size limit in words (Streamlit's server.maxUploadSize, set in .streamlit/config.toml)."""
    import streamlit as st

    mb = st.get_option("server.maxUploadSize")
    return f"Up to {mb} MB a file; import a larger one with `evalrx import FILE` (it streams the file)."


_LOCK = threading.Lock()


@dataclass
class ImportJob:
    """An import running (or finished) in the background."""

    path: Path
    total: int
    done: int = 0
    finished: bool = False
    result: Any = None
    error: Optional[str] = None
    thread: Optional[threading.Thread] = field(default=None, repr=False)
    started: float = field(default_factory=time.monotonic)
    ended: Optional[float] = None

    @property
    def rate(self) -> float:
        """Trajectories imported a second so far (or over the whole import once it has finished)."""
        seconds = (self.ended or time.monotonic()) - self.started
        return self.done / seconds if seconds > 0 else 0.0


def upload_dir() -> Path:
    """Where uploaded files wait to be imported (a temp folder of this machine)."""
    path = Path(tempfile.gettempdir()) / "evalrx-uploads"
    path.mkdir(parents=True, exist_ok=True)
    return path


def save_upload(name: str, data: bytes) -> Path:
    """Keep an uploaded file under its own name in a folder named by its content hash (the same bytes under
    the same name are saved once): the run takes the file's name, and messages name the file the user picked."""
    path = upload_dir() / hashlib.sha256(data).hexdigest()[:32] / upload_name(name)
    path.parent.mkdir(exist_ok=True)
    if not path.exists():
        tmp = path.with_name(path.name + ".part")
        tmp.write_bytes(data)
        tmp.replace(path)
    return path


def upload_name(name: str) -> str:
    """A browser's file name as a plain file name here: its last part, without control characters, at most
    120 characters (the end kept, so its suffixes stay)."""
    plain = "".join(ch for ch in name.replace("\\", "/").rsplit("/", 1)[-1] if ch.isprintable()).strip()
    plain = plain[-120:].lstrip(". ")
    return plain or "upload"


def shown_error(exc: BaseException, path: Path) -> str:
    """An error's one line, naming the uploaded file by its own name rather than where it waits here."""
    return (str(exc) or type(exc).__name__).replace(str(path), path.name)


def start(
    key: str, path: Path, total: int, store: Any, *, again: bool = False, name: Optional[str] = None
) -> ImportJob:
    """Start importing `path` in a thread (one job per `key`); returns the job to poll."""
    from evalrx.interop import import_file

    job = ImportJob(path=path, total=max(total, 1))

    def run() -> None:
        try:
            job.result = import_file(
                path, store=store, again=again, run_name=name or None, on_progress=lambda n: setattr(job, "done", n)
            )
        except Exception as exc:  # one line for the page: what failed, not a traceback
            job.error = shown_error(exc, path)
        finally:
            job.ended = time.monotonic()
            job.finished = True

    job.thread = threading.Thread(target=run, name=f"evalrx-import-{key[:8]}", daemon=True)
    with _LOCK:
        _JOBS[key] = job
    job.thread.start()
    return job


def current(key: str) -> Optional[ImportJob]:
    with _LOCK:
        return _JOBS.get(key)


def forget(key: str) -> None:
    with _LOCK:
        _JOBS.pop(key, None)
