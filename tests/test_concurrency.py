"""Detection and loading on a pool sized to the work: few threads for many plugins,
and a plugin that hangs still costs only its bound.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

from sglang_backends import ServeBackendRegistry, ServeRequest
from sglang_backends._core.detection import Verdict
from sglang_backends._sglang.builtins import default_builtins

REQUEST = ServeRequest(argv=(), model_path="some/model")
MATCH = "return ServeBackendDetection.MATCH"
#: Plugins whose imports fail, installed as one real distribution.
BROKEN = 500


def install_broken(site, count: int = BROKEN) -> None:
    """*count* entry points whose modules do not exist, in one distribution."""
    site.install(
        "many-broken",
        entry_points={f"broken{i:03}": f"absent_module_{i}:factory" for i in range(count)},
    )


def threads_started_during(action) -> tuple[object, int]:
    """*action*'s result and how many threads were started while it ran."""
    started = []
    original = threading.Thread.start

    def counting_start(thread: threading.Thread) -> None:
        started.append(thread.name)
        original(thread)

    threading.Thread.start = counting_start  # type: ignore[method-assign]
    try:
        result = action()
    finally:
        threading.Thread.start = original  # type: ignore[method-assign]
    return result, len(started)


def test_many_failing_loads_take_a_few_threads_not_one_each(site, install_backend):
    install_broken(site)
    install_backend("match-runtime", "zmatch", detect=MATCH)
    registry = ServeBackendRegistry(default_builtins())
    report, started = threads_started_during(lambda: registry.explain(REQUEST))
    failed = [o for o in report.outcomes if o.name.startswith("broken")]
    assert len(failed) == BROKEN and {o.verdict for o in failed} == {Verdict.ERROR}
    assert report.selected == "zmatch"
    # A worker or two, a few more should the machine stall them, the slow-load notices:
    # far fewer than one per load.
    assert started < BROKEN // 10, started


def test_a_hanging_import_holds_one_worker_while_the_rest_load(site, install_backend):
    install_broken(site, 50)
    install_backend(
        "aaa-hang-runtime",  # first in order: the first worker takes it
        "aaa_hang",
        module="pool_hung_import_plugin",
        prelude="import threading\nthreading.Event().wait(30)",
        detect=MATCH,
    )
    install_backend("match-runtime", "zmatch", detect=MATCH)
    registry = ServeBackendRegistry(default_builtins(), load_timeout=2.0, detect_timeout=2.0)
    started = time.perf_counter()
    report = registry.explain(REQUEST)
    assert time.perf_counter() - started < 2.0 + 2.0 + 4.0  # the bounds + a loaded machine
    verdicts = {o.name: o.verdict for o in report.outcomes}
    assert verdicts["aaa_hang"] is Verdict.TIMEOUT
    assert [
        n for n, v in verdicts.items() if n.startswith("broken") and v is not Verdict.ERROR
    ] == []
    assert report.selected == "zmatch"


def test_hanging_detectors_each_hold_a_worker_and_the_others_still_answer(site, install_backend):
    hang = "import threading; threading.Event().wait(30)"
    for name in ("hang_a", "hang_b", "hang_c"):
        install_backend(f"{name}-runtime", name, detect=hang)
    install_backend("match-runtime", "zmatch", detect=MATCH)
    registry = ServeBackendRegistry(default_builtins(), detect_timeout=1.0)
    started = time.perf_counter()
    report = registry.explain(REQUEST)
    assert time.perf_counter() - started < 1.0 + 4.0
    verdicts = {o.name: o.verdict for o in report.outcomes}
    assert [verdicts[n] for n in ("hang_a", "hang_b", "hang_c")] == [Verdict.TIMEOUT] * 3
    assert report.selected == "zmatch"


def test_with_every_worker_on_a_hang_the_rest_start_once_the_hangs_overrun(site, install_backend):
    # More hanging detectors than the pool may hold: each abandoned one stops counting.
    hang = "import threading; threading.Event().wait(60)"
    for name in ("hang_a", "hang_b"):
        install_backend(f"{name}-runtime", name, detect=hang)
    install_backend("match-runtime", "zmatch", detect=MATCH)
    code = textwrap.dedent(
        """
        from sglang_backends import ServeBackendRegistry, ServeRequest
        from sglang_backends._core import detection
        from sglang_backends._sglang.builtins import default_builtins
        detection.MAX_WORKERS = 1
        registry = ServeBackendRegistry(default_builtins(), detect_timeout=0.5)
        report = registry.explain(ServeRequest(argv=(), model_path="m"))
        print(" ".join(f"{o.name}={o.verdict.value}" for o in report.outcomes))
        print(report.selected)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        env=site.environ(),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    outcomes, selected = result.stdout.split("\n")[:2]
    assert {"hang_a=timeout", "hang_b=timeout", "zmatch=match"} <= set(outcomes.split())
    assert selected == "zmatch"
