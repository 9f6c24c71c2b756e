"""A short, stable summary of optimized LLVM IR text: what a review of generated code reads.

Per defined function: its loops (natural loops of the control-flow graph, nested by
indentation, each with the instructions of its own blocks), and per loop and outside loops
the vector types used, loads and stores by type, stack allocations and calls by callee.
Value names, metadata, instruction order and block names are left out (a loop shows only
the first part of its header's label: the emitter's `prog`, `mk`, ... or LLVM's `vector`),
so the summary changes when the code changes (a loop is no longer vectorized, a libm call
appears in a hot loop, a vector width changes) and not when LLVM renames or renumbers
values and blocks. Non-goals: a full LLVM parser (only the text `llvmlite` prints is
read), irreducible loops (tilenest emits structured loops; a cycle without a dominating
header is not reported as a loop).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

_NAME = r'(?:"(?:[^"\\]|\\.)*"|[-\w$.]+)'
_DEFINE_NAME = re.compile(rf"@({_NAME})\(")
_DECLARE_NAME = re.compile(rf"^declare\b[^@]*@({_NAME})\(")
_LABEL = re.compile(rf"^({_NAME}):(?:\s|$)")
_LABEL_USE = re.compile(rf"\blabel\s+%({_NAME})")
_VECTOR = re.compile(r"<(?:vscale x )?\d+ x [^<>]+?>")
# The callee: the first `@name(` or `%name(` after the opcode, its calling convention,
# attributes and return type (a function type `i32 (ptr, ...)` names no value).
_CALL = re.compile(rf"^(?:(?:tail|musttail|notail)\s+)?(?:call|invoke|callbr)\b.*?"
                   rf"(@{_NAME}|%{_NAME})\(")
_ASSIGNED = re.compile(rf"^%{_NAME}\s*=\s*")
_LOAD_PREFIX = re.compile(r"^load\s+(?:atomic\s+)?(?:volatile\s+)?")
_STORE_PREFIX = re.compile(r"^store\s+(?:atomic\s+)?(?:volatile\s+)?")
_ALLOCA_PREFIX = re.compile(r"^alloca\s+(?:inalloca\s+)?")
_CLOSING = {"<": ">", "[": "]", "{": "}"}


@dataclass
class _Block:
    label: str
    instructions: list[str] = field(default_factory=list)


@dataclass
class _Function:
    name: str
    params: int
    blocks: list[_Block]


@dataclass
class _Stats:
    """What one region (a loop's own blocks, or the blocks outside every loop) holds."""

    blocks: int = 0
    instructions: int = 0
    vectors: Counter[str] = field(default_factory=Counter)
    loads: Counter[str] = field(default_factory=Counter)
    stores: Counter[str] = field(default_factory=Counter)
    allocas: Counter[str] = field(default_factory=Counter)
    calls: Counter[str] = field(default_factory=Counter)

    def add(self, inst: str) -> None:
        self.instructions += 1
        for t in set(_VECTOR.findall(inst)):
            self.vectors[t] += 1
        body = _ASSIGNED.sub("", inst)
        if (m := _LOAD_PREFIX.match(body)) is not None:
            self.loads[_leading_type(body[m.end():])] += 1
        elif (m := _STORE_PREFIX.match(body)) is not None:
            self.stores[_leading_type(body[m.end():])] += 1
        elif (m := _ALLOCA_PREFIX.match(body)) is not None:
            self.allocas[_leading_type(body[m.end():])] += 1
        call = _CALL.search(body)
        if call is not None:
            callee = call.group(1)
            self.calls[_unquote(callee[1:]) if callee[0] == "@" else "<indirect>"] += 1


@dataclass
class _Loop:
    header: int
    body: set[int]
    parent: _Loop | None = None
    children: list[_Loop] = field(default_factory=list)
    stats: _Stats = field(default_factory=_Stats)

    @property
    def depth(self) -> int:
        return 1 if self.parent is None else self.parent.depth + 1


def summarize_llvm(text: str) -> str:
    """The summary of a module's LLVM IR text (see the module docstring); deterministic."""
    functions, declared = _parse_module(text)
    external = sorted(n for n in declared if not n.startswith("llvm."))
    lines = [f"module: {_count(len(functions), 'function')}, "
             f"external symbols: {', '.join('@' + n for n in external) or 'none'}"]
    for fn in functions:
        lines.extend(_summarize_function(fn))
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# Parsing


def _parse_module(text: str) -> tuple[list[_Function], list[str]]:
    functions: list[_Function] = []
    declared: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if line.startswith("declare"):
            m = _DECLARE_NAME.match(line)
            if m is not None:
                declared.append(_unquote(m.group(1)))
            continue
        if not line.startswith("define"):
            continue
        m = _DEFINE_NAME.search(line)
        if m is None:
            raise ValueError(f"a define without a function name: {line[:80]!r}")
        params = _count_params(line, m.end() - 1)
        body: list[str] = []
        while i < len(lines) and lines[i].rstrip() != "}":
            body.append(lines[i])
            i += 1
        i += 1
        functions.append(_Function(_unquote(m.group(1)), params, _parse_blocks(body)))
    return functions, declared


def _parse_blocks(body: list[str]) -> list[_Block]:
    """Blocks in text order; an unlabeled entry block gets the empty label. A multi-line
    instruction (a `switch` with its case list) is joined into one."""
    blocks: list[_Block] = []
    pending = ""
    for raw in body:
        line = raw.strip()
        if not line or line.startswith(";"):
            continue
        if pending:
            pending += " " + line
            if _bracket_balance(pending) <= 0:
                blocks[-1].instructions.append(pending)
                pending = ""
            continue
        label = _LABEL.match(line)
        if label is not None:
            blocks.append(_Block(_unquote(label.group(1))))
            continue
        if not blocks:
            blocks.append(_Block(""))
        if _bracket_balance(line) > 0:
            pending = line
            continue
        blocks[-1].instructions.append(line)
    if pending:
        blocks[-1].instructions.append(pending)
    return blocks


def _bracket_balance(text: str) -> int:
    return text.count("[") - text.count("]")


def _count_params(line: str, open_paren: int) -> int:
    depth, commas, empty = 0, 0, True
    for ch in line[open_paren:]:
        if ch in "([{<":
            depth += 1
            if depth == 1:
                continue
        elif ch in ")]}>":
            depth -= 1
            if depth == 0:
                break
        elif ch == "," and depth == 1:
            commas += 1
        if depth >= 1 and not ch.isspace():
            empty = False
    return 0 if empty else commas + 1


def _leading_type(text: str) -> str:
    """The type at the start of `text` (`<8 x float>`, `[4 x i32]`, `{ i8, ptr }`, `ptr`)."""
    text = text.lstrip()
    if text and text[0] in _CLOSING:
        depth = 0
        for pos, ch in enumerate(text):
            if ch in _CLOSING:
                depth += 1
            elif ch in _CLOSING.values():
                depth -= 1
                if depth == 0:
                    return text[:pos + 1]
        return text
    m = re.match(r"[%\w.]+\**", text)
    return m.group(0) if m else text.split(" ", 1)[0]


def _unquote(name: str) -> str:
    return name[1:-1] if name.startswith('"') and name.endswith('"') else name


# ---------------------------------------------------------------------------------------------
# Control flow: dominators and natural loops


def _successors(fn: _Function) -> list[list[int]]:
    index = {b.label: i for i, b in enumerate(fn.blocks)}
    out = []
    for b in fn.blocks:
        targets: list[int] = []
        for inst in b.instructions:
            for name in _LABEL_USE.findall(inst):
                j = index.get(_unquote(name))
                if j is not None and j not in targets:
                    targets.append(j)
        out.append(targets)
    return out


def _reverse_postorder(succ: list[list[int]]) -> list[int]:
    if not succ:
        return []
    seen, order = {0}, []
    stack: list[tuple[int, int]] = [(0, 0)]
    while stack:
        node, k = stack.pop()
        if k < len(succ[node]):
            stack.append((node, k + 1))
            nxt = succ[node][k]
            if nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, 0))
        else:
            order.append(node)
    return order[::-1]


def _immediate_dominators(succ: list[list[int]], rpo: list[int]) -> dict[int, int]:
    """Cooper, Harvey and Kennedy's iterative algorithm over the reachable blocks."""
    position = {b: i for i, b in enumerate(rpo)}
    preds: dict[int, list[int]] = {b: [] for b in rpo}
    for b in rpo:
        for s in succ[b]:
            preds[s].append(b)
    idom = {rpo[0]: rpo[0]} if rpo else {}

    def intersect(a: int, b: int) -> int:
        while a != b:
            while position[a] > position[b]:
                a = idom[a]
            while position[b] > position[a]:
                b = idom[b]
        return a

    changed = True
    while changed:
        changed = False
        for b in rpo[1:]:
            done = [p for p in preds[b] if p in idom]
            new = done[0]
            for p in done[1:]:
                new = intersect(p, new)
            if idom.get(b) != new:
                idom[b] = new
                changed = True
    return idom


def _dominates(idom: dict[int, int], a: int, b: int) -> bool:
    while True:
        if a == b:
            return True
        up = idom[b]
        if up == b:
            return False
        b = up


def _loops(succ: list[list[int]]) -> list[_Loop]:
    """Natural loops (back edges merged per header), nested, in their headers' text order."""
    rpo = _reverse_postorder(succ)
    idom = _immediate_dominators(succ, rpo)
    preds: dict[int, list[int]] = {b: [] for b in rpo}
    for b in rpo:
        for s in succ[b]:
            preds[s].append(b)
    bodies: dict[int, set[int]] = {}
    for b in rpo:
        for h in succ[b]:
            if not _dominates(idom, h, b):
                continue
            body = bodies.setdefault(h, {h})
            work = [b]
            while work:
                n = work.pop()
                if n in body:
                    continue
                body.add(n)
                work.extend(preds[n])
    loops = [_Loop(h, bodies[h]) for h in sorted(bodies)]
    for loop in loops:
        outer = [o for o in loops if o is not loop and loop.header in o.body]
        if outer:
            loop.parent = min(outer, key=lambda o: len(o.body))
            loop.parent.children.append(loop)
    return loops


# ---------------------------------------------------------------------------------------------
# Rendering


def _summarize_function(fn: _Function) -> list[str]:
    succ = _successors(fn)
    loops = _loops(succ)
    outside = _Stats()
    reachable = set(_reverse_postorder(succ))
    for i, block in enumerate(fn.blocks):
        if i not in reachable:
            continue
        holders = [lp for lp in loops if i in lp.body]
        region = min(holders, key=lambda lp: len(lp.body)).stats if holders else outside
        region.blocks += 1
        for inst in block.instructions:
            region.add(inst)
    total = sum(len(b.instructions) for b in fn.blocks)
    depth = max((lp.depth for lp in loops), default=0)
    head = (f"@{fn.name}: {_count(fn.params, 'param')}, {_count(len(fn.blocks), 'block')}, "
            f"{_count(total, 'instruction')}, {_count(len(loops), 'loop')}")
    lines = [head + (f" (max depth {depth})" if loops else "")]
    lines.append(f"  outside loops: {_sizes(outside)}")
    lines.extend(_stat_lines(outside, "    "))

    def visit(loop: _Loop, number: str, indent: str) -> None:
        stem = fn.blocks[loop.header].label.split(".", 1)[0] or "entry"
        lines.append(f"{indent}loop {number} at {stem} (depth {loop.depth}): "
                     f"{_sizes(loop.stats)}")
        lines.extend(_stat_lines(loop.stats, indent + "  "))
        for k, child in enumerate(loop.children, 1):
            visit(child, f"{number}.{k}", indent + "  ")

    for k, top in enumerate([lp for lp in loops if lp.parent is None], 1):
        visit(top, str(k), "  ")
    return lines


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _sizes(s: _Stats) -> str:
    return f"{_count(s.blocks, 'block')}, {_count(s.instructions, 'instruction')}"


def _stat_lines(s: _Stats, indent: str) -> list[str]:
    out = []
    for title, counts in (("vector types", s.vectors), ("loads", s.loads), ("stores", s.stores),
                          ("allocas", s.allocas), ("calls", s.calls)):
        if counts:
            items = ", ".join(f"{k} {counts[k]}" for k in sorted(counts, key=_type_order))
            out.append(f"{indent}{title}: {items}")
    return out


def _type_order(name: str) -> tuple:
    """Vector types by element type, then lanes; everything else by name."""
    m = re.fullmatch(r"<(?:vscale x )?(\d+) x (.+)>", name)
    if m is not None:
        return (0, m.group(2), int(m.group(1)), name)
    return (1, name, 0, name)
