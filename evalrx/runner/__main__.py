"""`python -m evalrx.runner`: the same as `evalrx worker`."""

import sys

from evalrx.runner.worker import worker_main

sys.exit(worker_main())
