"""Run every benchmark and print its markdown table, with the machine it ran on."""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import (
    contract_import,
    detection,
    listing,
    loading,
    scaling,
    seed,
    serve_startup,
    startup,
    stopping,
)


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main() -> None:
    print(
        f"Machine: {os.cpu_count()} CPUs ({cpu_model()}), "
        f"Python {platform.python_version()}, {platform.system()}. "
        "Medians of fresh processes, in ms.\n"
    )
    for title, module in (
        ("Listing backends (a)", listing),
        ("Automatic detection (b)", detection),
        ("Importing the contract (c)", contract_import),
        ("Automatic detection with a hanging plugin (e)", loading),
        ("serve start-up with and without configuration (d)", serve_startup),
        ("Cost against entry points and arguments (g)", scaling),
        ("Stopping (h)", stopping),
        ("Automatic detection against the seed's loop (i)", seed),
        ("Start-up of the short paths (j)", startup),
    ):
        print(f"### {title}\n")
        print(module.main([]))
        print()


if __name__ == "__main__":
    main()
