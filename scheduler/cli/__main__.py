"""`python -m scheduler.cli`: the same as the console script."""

from scheduler.cli.main import main

raise SystemExit(main())
