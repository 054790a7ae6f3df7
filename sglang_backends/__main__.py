"""``python -m sglang_backends``: the same as the ``sglang-backends`` command."""

import sys

from sglang_backends._cli import main

__all__: list[str] = []

sys.exit(main())
