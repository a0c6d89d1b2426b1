import sys

from evalrx.cli import main

sys.exit(main())
