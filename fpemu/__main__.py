"""``python -m fpemu``: the ``fpemu`` command line (see `fpemu.tools.cli`)."""

from fpemu.tools.cli import main

raise SystemExit(main())
