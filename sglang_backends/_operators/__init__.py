"""The operator side: the cliff application, its commands and their worker processes."""
