"""`python -m evalrx.runner`: the worker that the app and tests spawn (`evalrx worker` is the one to keep).

It takes `evalrx worker`'s options, and it follows the process that started it: it stops
when that process exits (`--parent-pid PID`, by default its parent; `--parent-pid 0` turns
this off) or when its SQLite store file is deleted. See `evalrx.runner.parent_watch`.
"""

import os

_STARTED_UNDER = os.getppid()  # read first: the parent may exit while the worker imports

import argparse  # noqa: E402
import sys  # noqa: E402

from evalrx.runner import parent_watch  # noqa: E402
from evalrx.store import default_url, sqlite_file  # noqa: E402


def _own_args(argv: list) -> tuple:
    """(parent pid, store URL, the arguments for `worker_main`): `--parent-pid` is this module's."""
    own = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    own.add_argument("--parent-pid", type=int, default=_STARTED_UNDER)
    args, rest = own.parse_known_args(argv)
    peek = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    peek.add_argument("--url")
    url = peek.parse_known_args(rest)[0].url
    if not url:
        url = default_url()
    return args.parent_pid, url, rest


parent_pid, url, rest = _own_args(sys.argv[1:])
parent_watch.watch(parent_pid=parent_pid, started_under=_STARTED_UNDER, store_path=sqlite_file(url))

from evalrx.runner.worker import worker_main  # noqa: E402

sys.exit(worker_main(rest))
