"""Which GPU architectures a CUDA binary carries, read from its fatbin headers as the bytes stream past.

An nvcc-linked ELF keeps its device code in the ``.nv_fatbin`` section: one fatbin per object file, laid end
to end (8-byte aligned). A fatbin is a 16-byte header (magic ``0xBA55ED50``, version 1, header size 16, the
size of what follows) and entries, each with its own header::

    u16 kind (1 = PTX, 2 = ELF/cubin)  u16 version  u32 header_size  u64 padded payload size
    u32 compressed size  u32 -  u16 minor  u16 major  u32 arch (90 = sm_90)  ...  u64 flags (at 40)

(the layout cuobjdump prints, as public fatbin readers document it). :class:`FatbinScanner` is fed the
decompressed bytes of the library in order and finds the first run of fatbins, walks it header by header and
says it is done at the first 8-aligned word after the run that is neither padding nor another fatbin, so a
reader can stop downloading there: the ELF section table (at the end of the file) is never needed. Checked
against the section table of torch 2.15.0's ``libtorch_cuda.so``: the run found is exactly ``.nv_fatbin``.
"""

from __future__ import annotations

import struct
from collections import Counter
from dataclasses import dataclass, field

MAGIC = 0xBA55ED50
_MAGIC_BYTES = struct.pack("<I", MAGIC)
_HEADER = struct.Struct("<IHHQ")  # magic, version, header size, size of the entries
_ENTRY = struct.Struct("<HHIQ")  # kind, version, header size, padded payload size
KIND_PTX = 1
KIND_ELF = 2
#: zero padding allowed between two fatbins of one section (the linker aligns each object's fatbin)
_MAX_GAP = 64
#: a fatbin larger than this is not a header (a stray magic number in host code)
_MAX_FATBIN = 1 << 32


@dataclass
class FatbinReport:
    """What the fatbins of one binary hold: per architecture, how many fatbins carry SASS / PTX for it."""

    fatbins: int = 0
    sass: Counter[int] = field(default_factory=Counter)
    ptx: Counter[int] = field(default_factory=Counter)
    #: (first byte, end) of the run of fatbins in the decompressed file (= the ``.nv_fatbin`` section)
    span: tuple[int, int] | None = None

    def arch_list(self, share: float = 0.5) -> list[str]:
        """``TORCH_CUDA_ARCH_LIST`` entries: every architecture with SASS in at least *share* of the fatbins
        (torch's own kernels; a few libraries build single kernels for more, see :meth:`extras`), ``+PTX`` on
        each with PTX in as many."""
        if not self.fatbins:
            return []
        floor = self.fatbins * share
        ptx = {a for a, n in self.ptx.items() if n >= floor}
        archs = sorted({a for a, n in self.sass.items() if n >= floor} | ptx)
        return [_dotted(a) + ("+PTX" if a in ptx else "") for a in archs]

    def extras(self, share: float = 0.5) -> list[str]:
        """Architectures below *share*: ``sm_89 (1 of 476 fatbins)``, for the diff's notes."""
        floor = self.fatbins * share
        out = [f"sm_{a} ({n} of {self.fatbins} fatbins)" for a, n in sorted(self.sass.items()) if n < floor]
        out += [f"compute_{a} PTX ({n} of {self.fatbins})" for a, n in sorted(self.ptx.items()) if n < floor]
        return out

    def to_json(self) -> dict[str, object]:
        return {
            "fatbins": self.fatbins,
            "sass": {str(k): v for k, v in sorted(self.sass.items())},
            "ptx": {str(k): v for k, v in sorted(self.ptx.items())},
            "span": list(self.span) if self.span else None,
        }

    @classmethod
    def from_json(cls, data: dict[str, object]) -> FatbinReport:
        sass = data.get("sass") or {}
        ptx = data.get("ptx") or {}
        span = data.get("span")
        assert isinstance(sass, dict)
        assert isinstance(ptx, dict)
        fatbins = data.get("fatbins", 0)
        return cls(
            fatbins=int(fatbins) if isinstance(fatbins, int) else 0,
            sass=Counter({int(k): int(v) for k, v in sass.items()}),
            ptx=Counter({int(k): int(v) for k, v in ptx.items()}),
            span=(int(span[0]), int(span[1])) if isinstance(span, list) and len(span) == 2 else None,
        )


def _dotted(arch: int) -> str:
    """90 → ``9.0``; 120 → ``12.0``."""
    return f"{arch // 10}.{arch % 10}"


class FatbinScanner:
    """Feed it a binary's bytes in order (:meth:`feed`); :attr:`done` turns true when the fatbin run is over.

    Memory stays at one fatbin plus one chunk: bytes before the current position are dropped.
    """

    def __init__(self) -> None:
        self.report = FatbinReport()
        self.done = False
        self._buf = bytearray()
        self._base = 0  # file offset of self._buf[0]
        self._pos = 0  # file offset to look at next
        self._in_run = False
        self._last_end = 0
        self._start = 0

    def feed(self, data: bytes) -> None:
        if self.done:
            return
        self._buf += data
        while not self.done and self._step():
            pass
        # drop what lies before the position (a search keeps its last 3 bytes: a magic split across chunks)
        drop = self._pos - self._base
        if drop > 0:
            del self._buf[:drop]
            self._base += drop

    def finish(self) -> FatbinReport:
        """The end of the binary: a run that reaches it is over."""
        if self._in_run and self.report.span is None:
            self.report.span = (self._start, self._last_end)
        self.done = True
        return self.report

    def _step(self) -> bool:
        """One header; False when more bytes are needed."""
        j = self._pos - self._base
        if not self._in_run:
            while True:
                k = self._buf.find(_MAGIC_BYTES, j)
                if k < 0:
                    self._pos = self._base + max(j, len(self._buf) - 3)
                    return False
                if (self._base + k) % 8:
                    j = k + 1
                    continue
                if len(self._buf) - k < _HEADER.size + _ENTRY.size:
                    self._pos = self._base + k
                    return False
                if not _plausible(self._buf, k):
                    j = k + 1
                    continue
                self._pos = self._base + k
                self._in_run = True
                self._start = self._pos
                return True
        if len(self._buf) - j < _HEADER.size + _ENTRY.size:
            return False
        magic, _, _, size = _HEADER.unpack_from(self._buf, j)
        if magic != MAGIC:
            if self._buf[j : j + 8] == b"\0" * 8 and self._pos + 8 - self._last_end <= _MAX_GAP:
                self._pos += 8
                return True
            self.report.span = (self._start, self._last_end)
            self.done = True
            return False
        if not _plausible(self._buf, j):
            self.report.span = (self._start, self._last_end)
            self.done = True
            return False
        end = j + _HEADER.size + size
        if len(self._buf) < end:
            return False
        self._count(j + _HEADER.size, end)
        self._pos = self._base + end
        self._last_end = self._pos
        return True

    def _count(self, start: int, end: int) -> None:
        report = self.report
        report.fatbins += 1
        sass: set[int] = set()
        ptx: set[int] = set()
        e = start
        while e + 32 <= end:
            kind, _, header_size, payload = _ENTRY.unpack_from(self._buf, e)
            (arch,) = struct.unpack_from("<I", self._buf, e + 28)
            if kind == KIND_ELF:
                sass.add(arch)
            elif kind == KIND_PTX:
                ptx.add(arch)
            if header_size == 0:
                break
            e += header_size + payload
        report.sass.update(sass)
        report.ptx.update(ptx)


def _plausible(buf: bytearray, k: int) -> bool:
    """A fatbin header at *k*: version 1, header size 16, a sane size and a first entry of a known kind."""
    magic, version, header_size, size = _HEADER.unpack_from(buf, k)
    if magic != MAGIC or version != 1 or header_size != _HEADER.size or not 0 < size < _MAX_FATBIN:
        return False
    kind, _, entry_header, _ = _ENTRY.unpack_from(buf, k + _HEADER.size)
    return kind in (KIND_PTX, KIND_ELF) and 32 <= entry_header <= 4096


def scan(data: bytes) -> FatbinReport:
    """The fatbins of a whole binary held in memory (tests, small files)."""
    scanner = FatbinScanner()
    scanner.feed(data)
    return scanner.finish()
