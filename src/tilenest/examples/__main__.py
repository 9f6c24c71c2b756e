"""`python -m tilenest.examples [name ...] [--target T]`: run examples at their demo size and
check them."""

from __future__ import annotations

import argparse
import time

import numpy as np

from tilenest.examples import EXAMPLES


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tilenest.examples", description=__doc__)
    parser.add_argument("names", nargs="*", help=f"examples to run (default: all of "
                                                 f"{', '.join(EXAMPLES)})")
    parser.add_argument("--target", default="reference")
    parser.add_argument("--seed", type=int, default=0)
    opts = parser.parse_args(argv)
    unknown = [n for n in opts.names if n not in EXAMPLES]
    if unknown:
        parser.error(f"unknown examples {unknown}; choose from {list(EXAMPLES)}")
    rng = np.random.default_rng(opts.seed)
    failed = 0
    for name in opts.names or EXAMPLES:
        example = EXAMPLES[name]
        for dtype in example.dtypes:
            lib = "torch" if dtype == "bf16" else "numpy"
            run = example.prepare(rng, example.demo, dtype=dtype, lib=lib)
            start = time.perf_counter()
            example.kernel(*run.args, target=opts.target, **run.consts)
            seconds = time.perf_counter() - start
            errors = run.max_errors()
            ok = all(e <= run.tolerance for e in errors.values())
            failed += not ok
            worst = max(errors.values())
            print(f"{'ok  ' if ok else 'FAIL'} {name:16} {example.demo.id:40} {dtype:5} "
                  f"max rel err {worst:.2e} (tol {run.tolerance:.0e})  {seconds * 1e3:8.1f} ms")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
