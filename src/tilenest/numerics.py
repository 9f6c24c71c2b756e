"""The numerical policy: what a backend may do to floating-point results.

The default is IEEE: every operation rounds as written, no FMA contraction, no reduced-
precision products (tf32), no reassociation beyond what a reduction's own contract allows
(`mma` contracts k ascending unless `allow_regrouping`), no library provider calls, no
approximate transcendentals (`allow_fast_math`). A target name never authorizes any of these;
only a policy does.

`allow_fast_math` lets a backend evaluate `exp`, `log` and `sigmoid` with the hardware's
approximate base-2 units, as FlashAttention and SDPA do: on cuda `exp(x)` becomes
`ex2.approx(x * log2(e))` (a relative error of about 2 ulp of f32 plus the rounding of the
product, which grows with |x|: ~|x| * 2^-24 relative; at most ~1e-5 relative for |x| < 100)
and `log(x)` `lg2.approx(x) * ln(2)`. The reference interpreter stays exact; a backend may
ignore the permission (cpu does).
"""

from __future__ import annotations

from dataclasses import dataclass

from tilenest.errors import ArgumentError


@dataclass(frozen=True)
class NumericalPolicy:
    allow_fma: bool = False        # contract a*b+c into one rounding
    allow_tf32: bool = False       # f32 matrix products with tf32 inputs (GPU)
    allow_provider: bool = False   # an external library (BLAS) may realize `mma`
    allow_regrouping: bool = False  # `mma` may sum its contraction over k in another
    #                                 association (split-K partial sums), not k ascending
    allow_fast_math: bool = False  # approximate exp/log/sigmoid (hardware base-2 units)

    def describe(self) -> str:
        allowed = [name for name in ("allow_fma", "allow_tf32", "allow_provider",
                                     "allow_regrouping", "allow_fast_math")
                   if getattr(self, name)]
        return "IEEE" if not allowed else "IEEE + " + ", ".join(allowed)


IEEE = NumericalPolicy()
FMA = NumericalPolicy(allow_fma=True)


def as_policy(value: object) -> NumericalPolicy:
    if value is None:
        return IEEE
    if isinstance(value, NumericalPolicy):
        return value
    raise ArgumentError(f"policy= expects a tn.NumericalPolicy, got {value!r}", loc=None)
