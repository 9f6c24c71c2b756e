"""Generated Triton never calls a jit function of `triton.language.standard` (`tl.max`,
`tl.sum`, `tl.zeros`, `tl.cdiv`, ...).

Those are decorated when triton is first imported: if that happens before
`TRITON_INTERPRET=1` is set (torch.compile imports triton, so can a user's own code), they stay
compiled-mode `JITFunction`s and the interpreter fails with "Cannot call @triton.jit'd outside
of the scope of a kernel". Builtins (`tl.reduce`, `tl.full`, `tl.maximum`) and the functions
the generated module defines itself work in both modes. Checked on the emitter sources and on
every cuda golden.
"""

from __future__ import annotations

import ast
import pathlib
import re

import pytest

triton = pytest.importorskip("triton")

from triton.runtime.jit import JITFunction  # noqa: E402

import tilenest.backends.cuda as cuda_backend  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
STANDARD = sorted(name for name in dir(triton.language.standard)
                  if isinstance(getattr(triton.language.standard, name), JITFunction))
CALL = re.compile(r"\btl\.(" + "|".join(map(re.escape, STANDARD)) + r")\s*\(")


def _code_strings(path: pathlib.Path) -> list[str]:
    """The string literals of an emitter module (the Triton it writes), without comments."""
    return [node.value for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)]


def test_the_standard_library_list_is_not_empty() -> None:
    assert {"max", "sum", "zeros"} <= set(STANDARD)


@pytest.mark.parametrize("path", sorted(pathlib.Path(cuda_backend.__file__).parent.glob("*.py")),
                         ids=lambda p: p.name)
def test_emitters_write_no_standard_jit_calls(path: pathlib.Path) -> None:
    bad = [s for s in _code_strings(path) if CALL.search(s)]
    assert not bad, f"{path.name} emits a triton.language.standard jit call: {bad}"


def test_goldens_have_no_standard_jit_calls() -> None:
    goldens = sorted((ROOT / "tests" / "golden" / "codegen" / "cuda").rglob("*"))
    files = [p for p in goldens if p.is_file()]
    assert files
    for path in files:
        text = "\n".join(line.split("#", 1)[0] for line in path.read_text().splitlines())
        assert not CALL.search(text), path.name


def test_nan_values_are_bit_patterns_not_globals() -> None:
    """A NaN fill or constant is written from its bit pattern: a NaN module global makes
    Triton refuse the kernel's second compilation ("Global variable ... has changed since we
    compiled this kernel": its check compares the globals with ==, and nan != nan; seen on
    the H200 in tests/e2e/test_contract_memory.py::test_fill_values_are_exact)."""
    import torch

    import tilenest as tn

    @tn.kernel
    def padded(X, Y, *, B=8):
        (n,) = Y.shape
        b = tn.axis("b", B)
        for p in tn.parallel(tn.cdiv(n, B)):
            x = X.tile((p.index() * B,), (b,), fill=float("nan")).load()
            Y.tile((p.index() * B,), (b,)).store(tn.where(x == x, x, float("nan")))

    for dt in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
        src = padded.compile(torch.zeros(5, dtype=dt), torch.zeros(5, dtype=dt),
                             target="cuda").source
        code = "\n".join(line.split("#")[0] for line in src.splitlines()[1:])
        assert "bitcast=True" in code and 'float("nan")' not in code
