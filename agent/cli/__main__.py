"""`python -m agent.cli`: the same as the console script."""

from agent.cli.main import main

raise SystemExit(main())
