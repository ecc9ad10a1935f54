"""``python -m trainreport.cli``: the command line (``trainreport.cli.main``)."""

from trainreport.cli import main

raise SystemExit(main())
