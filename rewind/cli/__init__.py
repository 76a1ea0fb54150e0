"""Command-line framework: every console command is a small Hydra entry point (see :mod:`rewind.cli.app`)."""
