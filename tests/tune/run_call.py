"""A fresh process's call of `<module>.scale_rows` (tests/tune): compile, run, check, and
print what it used as one JSON line. Arguments: the module name, a JSON object of the call
(m, n, dtype, consts)."""

from __future__ import annotations

import importlib
import json
import sys

import numpy as np


def main() -> None:
    module, call = sys.argv[1], json.loads(sys.argv[2])
    mod = importlib.import_module(module)
    m, n = call.get("m", 64), call.get("n", 32)
    x = (np.arange(m * n, dtype=np.float64).reshape(m, n) / 7).astype(call.get("dtype",
                                                                               "float32"))
    y = np.zeros_like(x)
    consts = call.get("consts", {})
    ck = mod.scale_rows.compile(x, y, **consts)
    ck(x, y)
    alpha = consts.get("ALPHA", 2.0)
    print(json.dumps({
        "constants": dict(ck.constants), "plan": ck.plan.describe(),
        "first_line": ck.explain().splitlines()[0],
        "tuner_imported": "tilenest.tune.tuner" in sys.modules,
        "measure_imported": "tilenest.tune.measure" in sys.modules,
        "torch_imported": "torch" in sys.modules,
        "max_error": float(np.abs(y - x * alpha).max()),
    }))


if __name__ == "__main__":
    main()
