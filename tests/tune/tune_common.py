"""Shared helpers of the tuning-database tests: a small kernel with a tunable, written to a
module file so a fresh process can import the same kernel (and an edited one)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

KERNEL_SOURCE = '''
import tilenest as tn


@tn.kernel
def scale_rows(X, Y, *, ROWS=tn.tunable(1, 2, 4), ALPHA=2.0):
    M, N = X.shape
    programs = tn.axis("programs", tn.cdiv(M, ROWS))
    r, c = tn.axis("r", ROWS), tn.axis("c", N)
    for nest in tn.parallel(programs):
        r0 = nest.index() * ROWS
        x = X.tile((r0, 0), (r, c)).load()
        Y.tile((r0, 0), (r, c)).store(x * ALPHA{extra})
'''

RUN_CALL = Path(__file__).with_name("run_call.py")
SRC = Path(__file__).resolve().parents[2] / "src"


def write_kernel(directory: Path, module: str, extra: str = "") -> Path:
    path = directory / f"{module}.py"
    path.write_text(KERNEL_SOURCE.format(extra=extra), encoding="utf-8")
    return path


def load_kernel_module(directory: Path, module: str, extra: str = "") -> ModuleType:
    """Import (once per test: a unique `module` name) the kernel file under `module`."""
    path = write_kernel(directory, module, extra)
    spec = importlib.util.spec_from_file_location(module, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[module] = mod
    spec.loader.exec_module(mod)
    return mod


def inputs(m: int = 64, n: int = 32, dtype: Any = np.float32) -> tuple[np.ndarray, np.ndarray]:
    x = (np.arange(m * n, dtype=np.float64).reshape(m, n) / 7).astype(dtype)
    return x, np.zeros_like(x)


def run_fresh(directory: Path, module: str, env: dict[str, str], **call: Any) -> dict:
    """Run one compile + call of `module.scale_rows` in a new Python process; its report."""
    full = {**os.environ, **env, "PYTHONPATH": os.pathsep.join([str(SRC), str(directory)])}
    out = subprocess.run([sys.executable, str(RUN_CALL), module, json.dumps(call)],
                         capture_output=True, text=True, env=full, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])
