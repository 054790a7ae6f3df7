"""SGLang as the host: the only code that imports ``sglang``."""
