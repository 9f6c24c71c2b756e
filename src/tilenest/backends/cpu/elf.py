"""Loading the cpu JIT's own relocatable objects into this process without LLVM, for
objects read back from the authenticated object cache (importing llvmlite's LLVM library
costs more than the rest of a cached compile).

Scope, and non-goals: x86-64 ELF64 little-endian relocatable objects as MCJIT's target
machine emits them (large code model: code and constant pools reached through absolute
64-bit relocations, externals through absolute addresses too), as tinygrad's CPU backend
loads its own objects. Allocated sections are laid out in one anonymous mapping, written,
relocated (R_X86_64_64, PC64, and PC32/PLT32 that fit), and the read-only part is made
executable; writable sections stay writable and are never executable. Unwind tables
(.eh_frame) are not loaded: generated code raises no exceptions. Anything else — another
machine or object kind, constructors, thread-local storage, common or special symbols,
another relocation type, a displacement that does not fit, a symbol that does not resolve,
memory that cannot be made executable — raises `ElfError` and the caller loads the object
through MCJIT instead (which reports real errors, such as an unresolved external, as
BackendErrors). The object's bytes were authenticated before they reach this module; the
bounds checks here guard against a format this loader does not understand, not against a
forger.

The reading half (`read_sections`, `read_symbols`: section headers, the symbol table and its
string table, each bounds-checked) has no policy and serves jit.py's check of undefined
symbols too, on any ELF64 little-endian object; what the loader refuses it checks on its own
(`_refuse_unhandled`, and thread-local symbols as it resolves them).
"""

from __future__ import annotations

import ctypes
import mmap
import struct
from collections.abc import Callable, Sequence
from typing import NamedTuple

_EM_X86_64 = 62
_ET_REL = 1
SHT_SYMTAB = 2
_SHT_PROGBITS, _SHT_RELA, _SHT_NOBITS, _SHT_REL = 1, 4, 8, 9
_SHT_INIT_ARRAYS = frozenset({14, 15, 16})  # init, fini, preinit arrays
_SHF_WRITE, _SHF_ALLOC, _SHF_TLS = 0x1, 0x2, 0x400
_SKIPPED = frozenset({".eh_frame"})  # allocated, but unneeded: no exceptions unwind here
SHN_UNDEF = 0
_SHN_LORESERVE, _SHN_ABS = 0xFF00, 0xFFF1
STB_GLOBAL = 1
_STB_WEAK = 2
_STT_SECTION, _STT_TLS = 3, 6
_R_NONE, _R_64, _R_PC32, _R_PLT32, _R_PC64 = 0, 1, 2, 4, 24
_PAGE = mmap.PAGESIZE
_PROT_READ, _PROT_EXEC = 0x1, 0x4


class ElfError(Exception):
    """This object is not one the loader handles (the caller loads it through MCJIT)."""


class Section:
    """One section header, named (`base`: its offset in the loader's mapping, once laid out)."""

    __slots__ = ("name", "kind", "flags", "offset", "size", "link", "info", "align",
                 "entsize", "base")

    def __init__(self, fields: tuple[int, ...], name: str) -> None:
        (_name, self.kind, self.flags, _addr, self.offset, self.size, self.link, self.info,
         self.align, self.entsize) = fields
        self.name = name
        self.base: int | None = None  # offset in the mapping, for loaded sections


class LoadedObject:
    """An object's code and data in this process: keeps the mapping alive as long as
    addresses taken from it are in use (the cache keeps it for the process's life)."""

    def __init__(self, memory: mmap.mmap, symbols: dict[str, int]) -> None:
        self._memory = memory
        self.symbols = symbols  # defined global symbols -> address

    def address(self, name: str) -> int:
        """The address of global symbol `name`, 0 when the object does not define it."""
        return self.symbols.get(name, 0)


def _check(ok: bool, what: str) -> None:
    if not ok:
        raise ElfError(what)


def _cstring(data: bytes, offset: int) -> str:
    end = data.find(b"\0", offset)
    _check(0 <= offset < len(data) and end >= 0, "a name outside its string table")
    return data[offset:end].decode("utf-8", "strict")


class Symbol(NamedTuple):
    """One symbol table entry (`bind`, `kind`: the high and low nibbles of st_info)."""

    name: str
    bind: int
    kind: int
    shndx: int
    value: int


def is_elf64_le(obj: bytes) -> bool:
    """Whether `obj` opens as an ELF64 little-endian file (IndexError past its end)."""
    return obj[:4] == b"\x7fELF" and obj[4] == 2 and obj[5] == 1


# ------------------------------------------------------------------ reading (no policy)


def read_sections(obj: bytes) -> list[Section]:
    """The named section headers of an ELF64 little-endian object, each section within the
    object (ElfError otherwise); any machine, object kind and section kind."""
    _check(len(obj) >= 64 and is_elf64_le(obj), "not an ELF64 little-endian object")
    shoff, = struct.unpack_from("<Q", obj, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", obj, 0x3A)
    _check(shentsize == 64 and 0 < shnum and shoff + shnum * 64 <= len(obj)
           and shstrndx < shnum, "section headers out of bounds")
    raw = [struct.unpack_from("<IIQQQQIIQQ", obj, shoff + i * 64) for i in range(shnum)]
    names = raw[shstrndx]
    _check(names[4] + names[5] <= len(obj), "section names out of bounds")
    table = obj[names[4]:names[4] + names[5]]
    out = [Section(fields, _cstring(table, fields[0]) if i else "")
           for i, fields in enumerate(raw)]
    for s in out:
        _check(s.kind == _SHT_NOBITS or s.offset + s.size <= len(obj),
               f"section {s.name} out of bounds")
    return out


def read_symbols(obj: bytes, sections: list[Section], symtab: Section) -> list[Symbol]:
    """Every entry of symbol table `symtab` (the null symbol first), named from its string
    table."""
    _check(symtab.entsize == 24 and symtab.link < len(sections), "a malformed symbol table")
    strtab = sections[symtab.link]
    names = obj[strtab.offset:strtab.offset + strtab.size]
    out = []
    for pos in range(symtab.offset, symtab.offset + symtab.size, 24):
        st_name, st_info, _other, shndx, value, _size = struct.unpack_from("<IBBHQQ", obj, pos)
        out.append(Symbol(_cstring(names, st_name) if st_name else "", st_info >> 4,
                          st_info & 0xF, shndx, value))
    return out


# ------------------------------------------------------------------ loading (the policy)


def _refuse_unhandled(obj: bytes, sections: list[Section]) -> None:
    """ElfError for what the loader does not handle however well formed: another machine or
    object kind, constructors, thread-local storage."""
    e_type, e_machine = struct.unpack_from("<HH", obj, 16)
    _check(e_type == _ET_REL and e_machine == _EM_X86_64, "not an x86-64 relocatable object")
    for s in sections:
        _check(s.kind not in _SHT_INIT_ARRAYS and not s.flags & _SHF_TLS,
               f"section {s.name}: constructors or thread-local storage")


def _layout(sections: list[Section]) -> tuple[list[Section], int, int]:
    """(the loaded sections with their offsets in the mapping, the size of the read-only
    and executable part, the total size): read-only sections first, writable after, each
    part page-aligned."""
    loaded = [s for s in sections if s.flags & _SHF_ALLOC and s.name not in _SKIPPED]
    for s in loaded:
        _check(s.kind in (_SHT_PROGBITS, _SHT_NOBITS), f"section {s.name} of kind {s.kind}")
        _check(s.align <= _PAGE and s.align & (s.align - 1) == 0,
               f"section {s.name}: alignment {s.align}")
    readonly = [s for s in loaded if not s.flags & _SHF_WRITE]
    writable = [s for s in loaded if s.flags & _SHF_WRITE]
    code_size = _place(readonly, 0)
    return readonly + writable, code_size, max(_place(writable, code_size), _PAGE)


def _place(part: list[Section], offset: int) -> int:
    """Give each section of `part` its offset from `offset` on; the page-aligned end."""
    for s in part:
        align = max(s.align, 1)
        offset = (offset + align - 1) // align * align
        s.base = offset
        offset += s.size
    return (offset + _PAGE - 1) // _PAGE * _PAGE


def _symbols(obj: bytes, sections: list[Section], symtab: Section, origin: int,
             resolve: Callable[[str], int]) -> tuple[list[int | None], dict[str, int]]:
    """Every symbol's address (None: in a section not loaded) and the defined globals."""
    addresses: list[int | None] = []
    defined: dict[str, int] = {}
    for name, bind, kind, shndx, value in read_symbols(obj, sections, symtab):
        _check(kind != _STT_TLS, "a thread-local symbol")
        address: int | None
        if shndx == SHN_UNDEF:
            address = resolve(name) if name else 0
            _check(bool(address) or bind == _STB_WEAK or not name, f"unresolved symbol {name}")
        elif shndx == _SHN_ABS:
            address = value
        else:
            _check(shndx < min(len(sections), _SHN_LORESERVE),
                   f"symbol {name}: section index {shndx:#x}")
            base = sections[shndx].base
            address = None if base is None else origin + base + value
            if bind in (STB_GLOBAL, _STB_WEAK) and name and kind != _STT_SECTION \
                    and address is not None:
                defined[name] = address
        addresses.append(address)
    return addresses, defined


def _mapping_address(memory: mmap.mmap) -> int:
    return ctypes.addressof(ctypes.c_char.from_buffer(memory))


def load(obj: bytes, resolve: Callable[[str], int]) -> LoadedObject:
    """Load and relocate `obj` (ElfError when it is not one this loader handles).
    `resolve(name)` is the address of an external symbol, 0 when there is none."""
    sections = read_sections(obj)
    _refuse_unhandled(obj, sections)
    loaded, code_size, size = _layout(sections)
    symtabs = [s for s in sections if s.kind == SHT_SYMTAB]
    _check(len(symtabs) == 1, "not exactly one symbol table")
    memory = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS,
                       prot=mmap.PROT_READ | mmap.PROT_WRITE)
    origin = _mapping_address(memory)
    for s in loaded:
        assert s.base is not None
        if s.kind == _SHT_PROGBITS:
            memory[s.base:s.base + s.size] = obj[s.offset:s.offset + s.size]
    addresses, defined = _symbols(obj, sections, symtabs[0], origin, resolve)
    for rela in sections:
        target = sections[rela.info] if rela.info < len(sections) else None
        if rela.kind == _SHT_REL:
            _check(target is None or target.base is None, "REL relocations of a loaded section")
        if rela.kind != _SHT_RELA or target is None or target.base is None:
            continue
        _check(sections[rela.link] is symtabs[0] and rela.entsize == 24,
               "relocations against another symbol table")
        _relocate(obj, rela, target, origin, addresses, memory)
    _protect(origin, code_size)
    return LoadedObject(memory, defined)


def _relocate(obj: bytes, rela: Section, target: Section, origin: int,
              addresses: Sequence[int | None], memory: mmap.mmap) -> None:
    assert target.base is not None
    for pos in range(rela.offset, rela.offset + rela.size, 24):
        offset, info, addend = struct.unpack_from("<QQq", obj, pos)
        kind, index = info & 0xFFFFFFFF, info >> 32
        if kind == _R_NONE:
            continue
        _check(index < len(addresses) and addresses[index] is not None,
               f"a relocation against symbol {index} outside the loaded sections")
        symbol = addresses[index]
        assert symbol is not None
        width = 4 if kind in (_R_PC32, _R_PLT32) else 8
        _check(offset + width <= target.size and target.kind == _SHT_PROGBITS,
               "a relocation outside its section")
        where = target.base + offset
        place = origin + where
        if kind == _R_64:
            struct.pack_into("<Q", memory, where, (symbol + addend) & (1 << 64) - 1)
        elif kind == _R_PC64:
            struct.pack_into("<q", memory, where, symbol + addend - place)
        elif kind in (_R_PC32, _R_PLT32):
            value = symbol + addend - place
            _check(-(1 << 31) <= value < 1 << 31, "a 32-bit displacement that does not fit")
            struct.pack_into("<i", memory, where, value)
        else:
            raise ElfError(f"relocation type {kind}")


def _protect(address: int, size: int) -> None:
    """Make the read-only part executable (it is never writable and executable at once)."""
    if size == 0:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    mprotect = libc.mprotect
    mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    mprotect.restype = ctypes.c_int
    if mprotect(address, size, _PROT_READ | _PROT_EXEC) != 0:
        raise ElfError(f"mprotect failed (errno {ctypes.get_errno()})")
