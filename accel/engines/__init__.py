"""External serving engines as targets (vLLM-Omni), each in its own Python environment and process."""
