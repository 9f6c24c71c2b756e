"""Run the contract fuzzer (tests/property/test_fuzz_contracts.py) for a number of minutes.

    .venv/bin/python scripts/fuzz.py --minutes 10 [--targets cpu,cuda] [--log fuzz.log]
                                     [--seed N] [--include-known]

Draws random programs from the fuzzer's grammar (no shrinking: every failing program is
logged whole, with its source), checks each on the targets against the reference, and
prints the number of examples, racy programs rejected, mismatches, fail-closed refusals and
skipped known bugs. Without a GPU, cuda runs on Triton's interpreter. Exit status 1 when
any program mismatched.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "src"), ROOT]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--targets", default="cpu,cuda",
                    help="comma-separated backends compared with the reference")
    ap.add_argument("--log", default="", help="append failing programs to this file")
    ap.add_argument("--seed", type=int, default=None, help="hypothesis seed (random if unset)")
    ap.add_argument("--include-known", action="store_true",
                    help="also compare the cases of the fuzzer's KNOWN_BUGS table")
    args = ap.parse_args(argv)

    import tests.property.test_fuzz_contracts as fz
    from hypothesis import HealthCheck, Phase, given, seed, settings

    targets = [t for t in args.targets.split(",") if t]
    if args.include_known:
        fz.KNOWN_BUGS.clear()
    deadline = time.monotonic() + 60.0 * args.minutes
    failures: list[str] = []

    class TimeUp(BaseException):
        """Ends the one long hypothesis run (examples grow as it goes; no shrinking)."""

    @settings(max_examples=10**9, deadline=None, phases=[Phase.generate], database=None,
              suppress_health_check=list(HealthCheck))
    @given(prog=fz.programs())
    def run(prog: fz.Program) -> None:
        if time.monotonic() > deadline:
            raise TimeUp
        problems = fz.check_program(prog, targets)
        if problems:
            failures.append("\n".join(problems))
            print(f"MISMATCH #{len(failures)}:\n{failures[-1]}\n", flush=True)
        if fz.STATS["examples"] % 50 == 0:
            print(f"[{(time.monotonic() - start) / 60:5.1f} min] examples "
                  f"{fz.STATS['examples']}  mismatches {len(failures)}", flush=True)

    start = time.monotonic()
    try:
        (run if args.seed is None else seed(args.seed)(run))()
    except TimeUp:
        pass
    if args.log and failures:
        with open(args.log, "a") as f:
            f.write("\n\n".join(failures) + "\n")
    print(f"targets: {', '.join(targets)}   minutes: {args.minutes:g}")
    print(f"examples: {fz.STATS['examples']}   racy programs rejected: {fz.STATS['rejected']}"
          f"   known bugs skipped: {fz.STATS['known']}")
    print(f"mismatches: {len(failures)}")
    for what, count in sorted(fz.UNSUPPORTED.items(), key=lambda kv: -kv[1]):
        print(f"  fail-closed x{count}: {what}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
