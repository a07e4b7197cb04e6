"""Sweep planning, cell execution (inline or in a fresh worker process) and the run loop."""
