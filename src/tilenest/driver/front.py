"""The driver's own stages, run for every target: capture -> verify.

capture runs the kernel's body on symbolic views (tilenest.lang.kernel); verify runs the
TileIR verifier and the index-range check (arithmetic that would wrap in 64 bits fails
here, at the user's line). A target's stages follow (`pipeline`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tilenest.driver.options import CompileOptions
from tilenest.driver.stages import Artifact, Stage, Work, run_stages
from tilenest.ir.core import Function
from tilenest.ir.types import TensorType
from tilenest.lang.kernel import KernelSignature
from tilenest.lang.rewrite import set_code_store
from tilenest.runtime.code_cache import DiskCodeStore

# Rewritten kernel source is kept in the disk cache: a fresh process captures without
# parsing and rewriting the kernel's source again.
set_code_store(DiskCodeStore())


def _capture(work: Work) -> None:
    signature: KernelSignature = work["signature"]
    work.function = signature.capture(work["types"], work["consts"])


def _verify(work: Work) -> None:
    from tilenest.analysis.index_ranges import check_index_ranges
    from tilenest.ir.verify import verify

    verify(work.fn)
    check_index_ranges(work.fn)


def _verified(work: Work) -> str:
    fn = work.fn
    ops = sum(1 for _ in fn.walk())
    return (f"`{fn.name}`: {len(fn.params)} tensor parameters, {ops} ops; the TileIR "
            f"verifier and the index-range check passed\n")


FRONT = (
    Stage("capture", _capture, (Artifact("ir", "tir", lambda w: str(w.fn)),)),
    Stage("verify", _verify, (Artifact("verify", "txt", _verified),)),
)


def capture_function(signature: KernelSignature, types: Mapping[str, TensorType],
                     consts: dict[str, Any], options: CompileOptions, *,
                     verified: bool = True) -> Function:
    """Capture and verify one specialization: a verified Function (`verified=False`: the
    capture stage alone, for a Function that is only hashed until `verify_function`)."""
    work = Work(options)
    work["signature"], work["types"], work["consts"] = signature, types, consts
    return run_stages(FRONT if verified else FRONT[:1], work).fn


def verify_function(fn: Function, options: CompileOptions) -> Function:
    """The stages after capture, for a Function captured with `verified=False`."""
    return run_stages(FRONT[1:], Work(options, fn)).fn


def pipeline(target: str) -> tuple[str, ...]:
    """The names of every compile stage for `target`, in order (launch is the call)."""
    from tilenest.backends.registry import stages

    return (*(s.name for s in FRONT), *(s.name for s in stages(target)))
