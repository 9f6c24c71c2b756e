"""A kernel called from a thread with a small stack (issue 8, item 14).

`threading.stack_size(256 KiB)`, then a kernel whose program carries a 1 MiB row tile in a
serial loop (a private array on the stack): the call must not overflow the calling thread's
stack, nor the stacks of pool workers started after the small setting. Runs in a subprocess
with a timeout, so a segfault fails the test instead of killing pytest.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPT = textwrap.dedent('''
    import sys, threading
    import numpy as np
    import tilenest as tn

    @tn.kernel
    def rows(X, Y, *, K=3):
        R, N = X.shape
        n = tn.axis("n", N)
        for p in tn.parallel(tn.axis("g", R)):
            x = X.tile((p.index(), 0), (None, n)).load()
            acc = x
            for _ in tn.serial(tn.axis("k", K)):
                acc = acc * 0.5 + x  # a 1 MiB f32 carry: private storage on the stack
            Y.tile((p.index(), 0), (None, n)).store(acc)

    N = 1 << 18
    R = int(sys.argv[1])
    x = np.random.default_rng(0).standard_normal((R, N)).astype(np.float32)
    want = np.full_like(x, np.nan)
    tn.interpret(rows, x, want, precision="native")
    results = {}

    def call(tag):
        try:
            for i in range(2):
                y = np.full_like(x, np.nan)
                rows(x, y, target="cpu")
                results[f"{tag} {i}"] = y.tobytes() == want.tobytes()
        except BaseException as e:
            results[tag] = repr(e)

    threading.stack_size(256 << 10)  # before the pool exists: its workers start after this
    t = threading.Thread(target=call, args=("small-stack thread",))
    t.start()
    t.join()
    threading.stack_size(0)
    call("main thread")
    bad = {k: v for k, v in results.items() if v is not True}
    if bad or len(results) != 4:
        print("FAILED", results, flush=True)
        sys.exit(2)
    print("OK", flush=True)
''')


@pytest.mark.parametrize("threads,rows_", [(1, 2), (2, 2), (2, 64), (4, 64)])
def test_big_private_tile_from_a_small_stack_thread(threads: int, rows_: int,
                                                    tmp_path: Path) -> None:
    path = tmp_path / "small_stack.py"  # a file: kernels are captured from their source
    path.write_text(SCRIPT)
    env = dict(os.environ, TILENEST_NUM_THREADS=str(threads), PYTHONFAULTHANDLER="1")
    try:
        proc = subprocess.run([sys.executable, str(path), str(rows_)], env=env,
                              capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"hang after 300 s\n{e.stdout}\n{e.stderr}")
    if proc.returncode != 0 or "OK" not in proc.stdout:
        pytest.fail(f"exit {proc.returncode} (-11 is a segfault)\nstdout:\n{proc.stdout}\n"
                    f"stderr:\n{proc.stderr[-3000:]}")
