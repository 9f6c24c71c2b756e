"""`summarize_llvm` on hand-written LLVM IR: natural loops and their nesting (a back edge
only in a `switch` case list, an irreducible cycle that is no loop, an unreachable block),
per-region vector types, loads, stores, allocas and calls, external symbols."""

from __future__ import annotations

from tilenest.backends.cpu.summary import summarize_llvm

MODULE = """\
; ModuleID = 'snippet'
target triple = "x86_64-unknown-linux-gnu"

declare float @expf(float)
declare <8 x float> @llvm.fma.v8f32(<8 x float>, <8 x float>, <8 x float>)

; Function Attrs: nounwind
define void @nest(ptr noalias captures(none) %a, i64 %n) local_unnamed_addr #0 {
entry:
  %buf = alloca [8 x float], align 32
  br label %outer

outer:                                            ; preds = %outer.latch, %entry
  %i = phi i64 [ 0, %entry ], [ %i.next, %outer.latch ]
  br label %inner

inner:                                            ; preds = %inner, %outer
  %j = phi i64 [ 0, %outer ], [ %j.next, %inner ]
  %p = getelementptr float, ptr %a, i64 %j
  %v = load <8 x float>, ptr %p, align 4
  %w = call <8 x float> @llvm.fma.v8f32(<8 x float> %v, <8 x float> %v, <8 x float> %v)
  store <8 x float> %w, ptr %p, align 4
  %s = load float, ptr %p, align 4
  %e = tail call float @expf(float %s)
  store float %e, ptr %buf, align 4
  %j.next = add i64 %j, 8
  %more = icmp slt i64 %j.next, %n
  br i1 %more, label %inner, label %outer.latch

outer.latch:                                      ; preds = %inner
  %i.next = add i64 %i, 1
  %again = icmp slt i64 %i.next, %n
  br i1 %again, label %outer, label %exit

exit:                                             ; preds = %outer.latch
  ret void

dead:                                             ; preds = %dead
  br label %dead
}

define i32 @pick(i32 %x) {
  br label %spin

spin:
  switch i32 %x, label %done [
    i32 0, label %spin
    i32 1, label %one
  ]

one:
  br label %done

done:
  ret i32 %x
}

define void @irreducible(i1 %c) {
entry:
  br i1 %c, label %a, label %b

a:
  br label %b

b:
  br label %a
}

attributes #0 = { nounwind }
"""

EXPECTED = """\
module: 3 functions, external symbols: @expf
@nest: 2 params, 6 blocks, 20 instructions, 2 loops (max depth 2)
  outside loops: 2 blocks, 3 instructions
    allocas: [8 x float] 1
  loop 1 at outer (depth 1): 2 blocks, 5 instructions
    loop 1.1 at inner (depth 2): 1 block, 11 instructions
      vector types: <8 x float> 3
      loads: <8 x float> 1, float 1
      stores: <8 x float> 1, float 1
      calls: expf 1, llvm.fma.v8f32 1
@pick: 1 param, 4 blocks, 4 instructions, 1 loop (max depth 1)
  outside loops: 3 blocks, 3 instructions
  loop 1 at spin (depth 1): 1 block, 1 instruction
@irreducible: 1 param, 3 blocks, 3 instructions, 0 loops
  outside loops: 3 blocks, 3 instructions
"""


def test_summary_of_a_small_module() -> None:
    assert summarize_llvm(MODULE) == EXPECTED


def test_summary_ignores_names_and_order() -> None:
    """Renamed values and blocks (but the same header stems) summarize identically."""
    renamed = (MODULE.replace("%i.next", "%.77").replace("%j", "%.12")
               .replace("outer.latch", "outer.latch.crit_edge"))
    assert summarize_llvm(renamed) == EXPECTED


def test_memory_forms_and_indirect_calls() -> None:
    text = """\
define void @mem(ptr %p, ptr %f) {
  %s = load { i8, ptr }, ptr %p, align 8
  %a = load atomic i32, ptr %p seq_cst, align 4
  store volatile <4 x i32> zeroinitializer, ptr %p, align 16
  %t = alloca <16 x half>, align 32
  %r = call i32 (ptr, ...) %f(ptr %p)
  %m = call <4 x float> @llvm.masked.load.v4f32.p0(ptr %p, i32 4, <4 x i1> splat (i1 true), \
<4 x float> poison)
  ret void
}
"""
    assert summarize_llvm(text) == """\
module: 1 function, external symbols: none
@mem: 2 params, 1 block, 7 instructions, 0 loops
  outside loops: 1 block, 7 instructions
    vector types: <4 x float> 1, <16 x half> 1, <4 x i1> 1, <4 x i32> 1
    loads: i32 1, { i8, ptr } 1
    stores: <4 x i32> 1
    allocas: <16 x half> 1
    calls: <indirect> 1, llvm.masked.load.v4f32.p0 1
"""
