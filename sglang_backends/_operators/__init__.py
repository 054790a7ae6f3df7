"""The operator side: configuration, the cliff commands and their workers."""
