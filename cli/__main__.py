"""`python -m rmq.cli ...`: the same as the `rmq` console script."""

import sys

from rmq.cli.main import main

sys.exit(main())
