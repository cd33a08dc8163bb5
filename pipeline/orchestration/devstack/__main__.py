"""``python -m pipeline.orchestration.devstack up|stop|status`` (``make run`` / ``make stop``)."""

import sys

from pipeline.orchestration.devstack.cli import main

sys.exit(main())
