"""The ``aimeasure`` command and its subcommands."""
