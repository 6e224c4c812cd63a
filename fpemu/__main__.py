"""``python -m fpemu``: the ``fpemu`` command line (see `fpemu._cli`)."""

from fpemu._cli import main

raise SystemExit(main())
