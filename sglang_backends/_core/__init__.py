"""The core: discovery, selection, loading and detection of serve backends."""
