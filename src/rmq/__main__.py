import sys

from rmq.cli import main

sys.exit(main())
