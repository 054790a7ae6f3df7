"""``sglang-backends serve``: its command line, help and supervision."""
