"""Reports rendered from results; nothing here runs a pipeline."""
