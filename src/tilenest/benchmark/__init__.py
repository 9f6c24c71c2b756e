"""The compact benchmark that ships with the package: every example kernel against numpy
(the example's own oracle code) and torch's fused ops, at the example's demo problem scaled
up. `tilenest bench` runs it when no source checkout (with the full `benchmarks/` suites) is
around, or when asked with `--compact`.
"""

from tilenest.benchmark.runner import Row as Row
from tilenest.benchmark.runner import run_compact as run_compact
