"""Timing, memory and parity measurement. No I/O and no policy: callers decide what to do with numbers."""
