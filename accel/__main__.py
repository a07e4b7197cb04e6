"""``python -m accel`` runs the command line."""

from accel.cli import main

main()
