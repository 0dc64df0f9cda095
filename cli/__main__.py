import sys

from ray_efa.cli import main

sys.exit(main())
