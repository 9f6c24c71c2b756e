"""tilenest: execution-structure-first tile programming for Python.

Write what is independent (`parallel`), ordered (`serial`), pipelined (`pipeline`) and
aggregated (`reduce`) over immutable Tiles; tilenest captures it into TileIR, plans a
realization and runs it on a target (the reference interpreter, CPU, CUDA).
"""

from tilenest.driver.compiled import CompiledKernel as CompiledKernel
from tilenest.driver.kernel import Kernel as Kernel
from tilenest.driver.kernel import interpret as interpret
from tilenest.driver.kernel import kernel as kernel
from tilenest.errors import ArgumentError as ArgumentError
from tilenest.errors import BackendError as BackendError
from tilenest.errors import CaptureError as CaptureError
from tilenest.errors import ConfigError as ConfigError
from tilenest.errors import DTypeError as DTypeError
from tilenest.errors import RaceError as RaceError
from tilenest.errors import ShapeError as ShapeError
from tilenest.errors import TileError as TileError
from tilenest.ir.dtypes import DType as DType
from tilenest.ir.dtypes import bf16 as bf16
from tilenest.ir.dtypes import bool_ as bool_
from tilenest.ir.dtypes import f8e4m3 as f8e4m3
from tilenest.ir.dtypes import f8e5m2 as f8e5m2
from tilenest.ir.dtypes import f16 as f16
from tilenest.ir.dtypes import f32 as f32
from tilenest.ir.dtypes import f64 as f64
from tilenest.ir.dtypes import i8 as i8
from tilenest.ir.dtypes import i16 as i16
from tilenest.ir.dtypes import i32 as i32
from tilenest.ir.dtypes import i64 as i64
from tilenest.ir.dtypes import u8 as u8
from tilenest.ir.dtypes import u16 as u16
from tilenest.ir.dtypes import u32 as u32
from tilenest.ir.dtypes import u64 as u64
from tilenest.lang import policies as exec  # noqa: A001, F401 - `tn.exec.block` is the contract
from tilenest.lang.contraction import mma as mma
from tilenest.lang.creation import arange as arange
from tilenest.lang.creation import full as full
from tilenest.lang.creation import ones as ones
from tilenest.lang.creation import zeros as zeros
from tilenest.lang.dims import Axis as Axis
from tilenest.lang.dims import Dim as Dim
from tilenest.lang.dims import axis as axis
from tilenest.lang.dims import cdiv as cdiv
from tilenest.lang.dims import dim as dim
from tilenest.lang.dims import dims as dims
from tilenest.lang.elementwise import abs as abs  # noqa: A004
from tilenest.lang.elementwise import astype as astype
from tilenest.lang.elementwise import exp as exp
from tilenest.lang.elementwise import log as log
from tilenest.lang.elementwise import map as map  # noqa: A004
from tilenest.lang.elementwise import maximum as maximum
from tilenest.lang.elementwise import minimum as minimum
from tilenest.lang.elementwise import rsqrt as rsqrt
from tilenest.lang.elementwise import sigmoid as sigmoid
from tilenest.lang.elementwise import sqrt as sqrt
from tilenest.lang.elementwise import tanh as tanh
from tilenest.lang.elementwise import where as where
from tilenest.lang.kernel import func as func
from tilenest.lang.mathfns import clamp as clamp
from tilenest.lang.mathfns import cos as cos
from tilenest.lang.mathfns import erf as erf
from tilenest.lang.mathfns import exp2 as exp2
from tilenest.lang.mathfns import log2 as log2
from tilenest.lang.mathfns import mean as mean
from tilenest.lang.mathfns import pow as pow  # noqa: A004
from tilenest.lang.mathfns import sin as sin
from tilenest.lang.nest import parallel as parallel
from tilenest.lang.nest import pipeline as pipeline
from tilenest.lang.nest import reduce as reduce
from tilenest.lang.nest import serial as serial
from tilenest.lang.random import rand as rand
from tilenest.lang.random import rand4x as rand4x
from tilenest.lang.random import randn as randn
from tilenest.lang.reductions import max as max  # noqa: A004
from tilenest.lang.reductions import min as min  # noqa: A004
from tilenest.lang.reductions import prod as prod
from tilenest.lang.reductions import sum as sum  # noqa: A004
from tilenest.lang.scans import argmax as argmax
from tilenest.lang.scans import argmin as argmin
from tilenest.lang.scans import cumprod as cumprod
from tilenest.lang.scans import cumsum as cumsum
from tilenest.lang.scans import scan as scan
from tilenest.lang.scans import topk as topk
from tilenest.lang.shapes import join as join
from tilenest.lang.shapes import reshape as reshape
from tilenest.lang.shapes import split as split
from tilenest.lang.tunable import Tunable as Tunable
from tilenest.lang.tunable import tunable as tunable
from tilenest.lang.values import Index as Index
from tilenest.lang.values import Tile as Tile
from tilenest.lang.values import index as index
from tilenest.numerics import FMA as FMA
from tilenest.numerics import IEEE as IEEE
from tilenest.numerics import NumericalPolicy as NumericalPolicy
from tilenest.runtime.cache import UnsafeCacheWarning as UnsafeCacheWarning
from tilenest.runtime.status import DeferredRunTimeError as DeferredRunTimeError
from tilenest.runtime.status import check_errors as check_errors

bool = bool_  # noqa: A001 - `tn.bool` reads like the other dtypes

__version__ = "0.1.0"
