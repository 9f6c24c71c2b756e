"""`TuneKey`: the structural key of a tuning record (DESIGN §3a, §5), never a config list.

A winner measured for one key is reused only by a call with the same key: the same kernel
structure (its TileIR with every open tunable at its first declared value, plus the tunable
declarations), the same tensor signature (shapes, dtypes, strides, devices), the same fixed
constants, target, device, driver, compiler, tilenest version, cost-model version and
numerical policy. Device facts come from what the backends already know (the cpu host
description, the cuda device description); the cpu path never imports torch.
"""

from __future__ import annotations

import functools
import hashlib
import json
import platform
from dataclasses import asdict, dataclass, fields
from typing import Any

from tilenest.errors import TuneError

# Cost-model versions per target: bump when a backend's cost model changes what it ranks
# (the backends export none of their own). A target missing here keys as "unversioned".
COST_MODEL_VERSIONS: dict[str, str] = {"cpu": "8", "cuda": "10"}


@dataclass(frozen=True)
class TuneKey:
    kernel: str        # module-qualified kernel name
    structure: str     # sha256 of the TileIR at the tunables' first values + declarations
    args: str          # tensor signature: kind, device, dtype, shape, strides per argument
    fixed: str         # constants of the call that are not open tunables
    target: str
    device: str        # cuda: GPU name + compute capability; cpu: model + features + threads
    driver: str        # cuda: driver / torch CUDA version; cpu: ""
    compiler: str      # triton version / llvmlite + LLVM version
    tilenest: str      # tilenest version
    cost_model: str    # the target's cost-model version
    policy: str        # NumericalPolicy.describe()

    def fields(self) -> dict[str, str]:
        return asdict(self)

    def digest(self) -> str:
        text = json.dumps(self.fields(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    @classmethod
    def from_fields(cls, data: Any) -> TuneKey:
        """A key from its fields (TuneError unless exactly the key's fields, all strings)."""
        names = [f.name for f in fields(cls)]
        if not isinstance(data, dict) or sorted(data) != sorted(names):
            raise TuneError(f"a tuning key has exactly the fields {names}", loc=None)
        bad = [n for n in names if not isinstance(data[n], str) or len(data[n]) > 1 << 14]
        if bad:
            raise TuneError(f"tuning key fields {bad} are not strings of plausible length",
                            loc=None)
        return cls(**{n: data[n] for n in names})


# ---------------------------------------------------------------------------------------------
# Facts per target: device, driver, compiler. A registry, one entry per tunable target.


@functools.cache
def cpu_model() -> str:
    """The CPU's marketing name from /proc/cpuinfo (Linux), else platform.processor()."""
    from tilenest.backends.cpu.host import cpuinfo_text  # read once, shared with the host

    for line in cpuinfo_text().splitlines():
        name, _, value = line.partition(":")
        if name.strip() == "model name":
            return value.strip()
    return platform.processor() or platform.machine()


def _cpu_facts() -> tuple[str, str, str]:
    from llvmlite import __version__ as llvmlite_version  # the package module, no LLVM

    from tilenest.backends.cpu.host import host_info, llvm_version
    from tilenest.runtime.pool import env_num_threads

    host = host_info()
    features = hashlib.sha256(host.features.encode()).hexdigest()[:16]
    device = (f"{cpu_model()} | {host.cpu_name} | {host.vector_bits}-bit | features "
              f"{features} | {env_num_threads()} threads")
    llvm = ".".join(map(str, llvm_version()))
    return device, "", f"llvmlite {llvmlite_version} (LLVM {llvm})"


@functools.cache
def _cuda_versions() -> tuple[str, str]:
    """(driver, compiler) of the cuda target: torch's CUDA and driver versions, triton's."""
    try:
        import torch
    except ImportError:
        torch = None  # type: ignore[assignment]
    driver = "no torch"
    if torch is not None:
        driver = f"torch cuda {torch.version.cuda}"
        get = getattr(torch._C, "_cuda_getDriverVersion", None)
        if torch.cuda.is_available() and get is not None:
            driver += f", driver {get()}"
    from tilenest.backends.cuda.cubin_cache import triton_version

    version = triton_version()  # read from its files: importing Triton costs ~0.3 s
    return driver, f"triton {version}" if version is not None else "no triton"


def _cuda_facts() -> tuple[str, str, str]:
    from tilenest.backends.cuda.device import device_info, gpu_identity, interpreting

    device = gpu_identity(device_info())
    if interpreting():
        device += " | TRITON_INTERPRET"
    return (device, *_cuda_versions())


TARGET_FACTS = {"cpu": _cpu_facts, "cuda": _cuda_facts}


def target_facts(target: str) -> tuple[str, str, str]:
    """(device, driver, compiler) of a tunable target."""
    facts = TARGET_FACTS.get(target)
    if facts is None:
        raise TuneError(f"target {target!r} is not tuned (tunable targets: "
                        f"{', '.join(sorted(TARGET_FACTS))})", loc=None)
    return facts()


# ---------------------------------------------------------------------------------------------
# The key of a call


def kernel_name(kernel: Any) -> str:
    fn = kernel.fn
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', kernel.name)}"


def _structure(kernel: Any, tensors: dict, tensor_key: tuple, consts: dict[str, Any]) -> str:
    from tilenest.driver.kernel import _with_defaults
    from tilenest.ir.printer import print_function

    # Hashed only: verified if the call goes on to use it (a plan-cache hit whose stored
    # assignment is not the defaults never does).
    fn = kernel._function(tensors, tensor_key, _with_defaults(consts), verified=False)
    h = hashlib.sha256(print_function(fn).encode())
    for name, tunable in kernel.tunables.items():  # declaration order
        h.update(f"\ntunable {name} = {tunable!r}".encode())
    return h.hexdigest()


def _args_text(kernel: Any, tensor_key: tuple) -> str:
    parts = []
    for name, (kind, device, dtype, shape, strides) in zip(kernel.tensor_params, tensor_key,
                                                             strict=True):
        dims = "x".join(map(str, shape)) or "scalar"
        # The device kind only: a winner tuned on cuda:0 holds on cuda:1 of the same GPU
        # model (the GPU's identity is its own field of the key).
        device = device.split(":")[0]
        parts.append(f"{name}={kind}:{device}:{dtype}[{dims}]"
                     f"/{','.join(map(str, strides))}")
    return " ".join(parts)


def _fixed_text(consts: dict[str, Any]) -> str:
    from tilenest.lang.tunable import Tunable
    from tilenest.runtime.args import constant_key

    return repr(tuple(constant_key(n, v) for n, v in sorted(consts.items())
                      if not isinstance(v, Tunable)))


def tilenest_version() -> str:
    import tilenest

    return str(getattr(tilenest, "__version__", "unknown"))


def key_of(kernel: Any, tensors: dict, spec_key: tuple, consts: dict[str, Any], target: str,
           options: dict[str, Any]) -> TuneKey:
    """The key of a bound call (`Kernel._bind`'s tensors, key and constants)."""
    from tilenest.numerics import as_policy

    device, driver, compiler = target_facts(target)
    return TuneKey(
        kernel=kernel_name(kernel),
        structure=_structure(kernel, tensors, spec_key[0], consts),
        args=_args_text(kernel, spec_key[0]),
        fixed=_fixed_text(consts),
        target=target, device=device, driver=driver, compiler=compiler,
        tilenest=tilenest_version(),
        cost_model=COST_MODEL_VERSIONS.get(target, "unversioned"),
        policy=as_policy(options.get("policy")).describe())


def key_for(kernel: Any, args: tuple, kwargs: dict, target: str | None) -> TuneKey:
    """The key of `kernel(*args, **kwargs)` on `target` (None: the kernel's default target).
    `kwargs` may hold constants and planner options (`policy=` is part of the key)."""
    kwargs = dict(kwargs)
    options = kernel._options(kwargs)
    tensors, consts, spec_key = kernel._bind(tuple(args), kwargs)
    tgt = target or kernel.default_target(spec_key)
    return key_of(kernel, tensors, spec_key, consts, tgt, options)
