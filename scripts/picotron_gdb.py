"""scripts/picotron_gdb.py — LibTorch tensors readable in gdb, without calling the program.

    (gdb) source scripts/picotron_gdb.py
    (gdb) print x
    $1 = [2, 32, 64] Float cpu strides (2048, 64, 1) {0.0132, -0.871, 0.25, ...}
    (gdb) tensor x 4 100          four values from element 100 (row-major); `tensor x all`: every one
    x = [2, 32, 64] Float cpu strides (2048, 64, 1) {... 0.31, -0.02, 0.7, 0.1, ...}  (elements 100-103 of 4096)

Without it, an at::Tensor prints as an intrusive pointer to a TensorImpl. This
pretty-printer reads the tensor out of the stopped program's memory, the way
at::Tensor's own accessors would, and runs nothing in the program:

    at::Tensor ── impl_.target_ ──> c10::TensorImpl
                                      sizes_and_strides_  [sizes | strides], inline up to 5 dims
                                      data_type_.index_   a c10::ScalarType: Float, BFloat16, ...
                                      device_opt_         cpu, cuda:0, ...
                                      storage_offset_     where element [0, 0, ...] is
                                      storage_ ──> c10::StorageImpl
                                                     data_ptr_.ptr_.data_ ──> the values

so it works with `set may-call-functions off`, on machines where every call gdb makes
into the program fails ("Couldn't write extended state status"), and on a core file.
A GPU tensor's values are not read (gdb reads the CPU's memory): its line says where
they are. Each member's offset comes from the program's DWARF when it holds the class's
definition, else from LAYOUT below. `info pretty-printer` lists the printer; `disable
pretty-printer global picotron` turns it off. A tensor not built yet (or already freed)
prints as <not built ...>, so `info locals` is safe at every stop.

Test: ctest -L debug   (debug.gdb_tensor_printer compares every line with the program's
own runtime/observe/debug_text.cpp, with the DWARF offsets and with LAYOUT)
"""
import math
import os
import re
import struct

import gdb

TENSOR_TYPES = ("at::Tensor", "at::TensorBase", "torch::Tensor", "torch::autograd::Variable")
VALUES = 6  # elements shown, as runtime/observe/debug_text.cpp's tensor_text

# Where each member lies, in bytes from the start of its object, for LibTorch 2.11
# (scripts/setup.sh's) on a 64-bit Linux. Used when the program's DWARF only declares the
# class: GCC writes a class with virtual functions into the debug info of the object file
# that holds its vtable, and for c10::TensorImpl that is libc10.so, shipped without debug
# info. The numbers follow from the members' order in the headers and their sizes, which
# c10/core/TensorImpl.h itself static_asserts (C10_TensorImpl_Size_Check_Dummy_Class):
#   TensorImpl: vtable 8 | refcounts 8 | storage_ 8 | autograd_meta_ 8 | extra_meta_ 8 |
#               version_counter_ 8 | pyobj_slot_ 16 | sizes_and_strides_ 88 |
#               storage_offset_ 8 | numel_ 8 | data_type_ 2 | device_opt_ 3 | bits | key_set_
# debug.gdb_tensor_printer checks each number against a program built with the full DWARF
# (-femit-class-debug-always), so a LibTorch that moves a member fails that test.
LAYOUT = {
    ("c10::intrusive_ptr_target", "combined_refcount_"): 8,  # strong count: low 32 bits, weak: the next 31
    ("c10::TensorImpl", "storage_"): 16,                     # c10::Storage: one pointer to a StorageImpl
    ("c10::TensorImpl", "autograd_meta_"): 24,               # unique_ptr: null unless autograd is involved
    ("c10::TensorImpl", "sizes_and_strides_"): 64,
    ("c10::TensorImpl", "storage_offset_"): 152,             # in elements
    ("c10::TensorImpl", "data_type_"): 168,                  # caffe2::TypeMeta: uint16 index_ = ScalarType
    ("c10::TensorImpl", "device_opt_"): 170,                 # optional<Device>: type, index, engaged
    ("c10::impl::SizesAndStrides", "size_"): 0,              # the number of dimensions
    ("c10::impl::SizesAndStrides", "inlineStorage_"): 8,     # sizes[5] then strides[5]; or, beyond
                                                             # 5 dims, a pointer to sizes[n], strides[n]
    ("c10::StorageImpl", "data_ptr_"): 16,                   # c10::DataPtr, whose first word is the data
    ("torch::autograd::AutogradMeta", "grad_fn_"): 48,       # shared_ptr<Node>: set on a computed tensor
    ("torch::autograd::AutogradMeta", "requires_grad_"): 144,
    ("torch::autograd::AutogradMeta", "is_view_"): 146,      # then the meta is a DifferentiableViewMeta
    ("torch::autograd::DifferentiableViewMeta", "backward_info_"): 200,  # optional<ViewInfo>: base_ first
    ("std::optional<torch::autograd::ViewInfo>", "_M_engaged"): 48,      # after ViewInfo's 48 bytes
}
INLINE_DIMS = 5  # C10_SIZES_AND_STRIDES_MAX_INLINE_SIZE
use_dwarf = True  # False: LAYOUT only (the test compares both ways)

# c10::ScalarType by index (torch/headeronly/core/ScalarType.h), and how to read the ones
# printed with values: a struct format, or a function of the raw bytes.
SCALAR_TYPES = (
    "Byte Char Short Int Long Half Float Double ComplexHalf ComplexFloat ComplexDouble Bool "
    "QInt8 QUInt8 QInt32 BFloat16 QUInt4x2 QUInt2x4 Bits1x8 Bits2x4 Bits4x2 Bits8 Bits16 "
    "Float8_e5m2 Float8_e4m3fn Float8_e5m2fnuz Float8_e4m3fnuz UInt16 UInt32 UInt64 "
    "UInt1 UInt2 UInt3 UInt4 UInt5 UInt6 UInt7 Int1 Int2 Int3 Int4 Int5 Int6 Int7 "
    "Float8_e8m0fnu Float4_e2m1fn_x2").split()


def float8(byte, exponent_bits, bias, nan_at_top):
    """An 8-bit float: 1 sign bit, exponent_bits, the rest mantissa (OCP / fnuz formats)."""
    mantissa_bits = 7 - exponent_bits
    sign = -1.0 if byte & 0x80 else 1.0
    e, m = (byte >> mantissa_bits) & ((1 << exponent_bits) - 1), byte & ((1 << mantissa_bits) - 1)
    top = (1 << exponent_bits) - 1
    if nan_at_top == "ieee" and e == top:        # e5m2: IEEE inf and NaN
        return sign * math.inf if m == 0 else math.copysign(math.nan, sign)
    if nan_at_top == "fn" and e == top and m == (1 << mantissa_bits) - 1:  # e4m3fn: no inf
        return math.copysign(math.nan, sign)
    if nan_at_top == "fnuz" and byte == 0x80:   # fnuz: the one NaN is "-0"
        return math.nan
    if e == 0:
        return sign * m / (1 << mantissa_bits) * 2.0 ** (1 - bias)
    return sign * (1 + m / (1 << mantissa_bits)) * 2.0 ** (e - bias)


READERS = {  # name: (bytes per element, bytes -> float)
    "Byte": (1, lambda b: b[0]),
    "Char": (1, lambda b: struct.unpack("<b", b)[0]),
    "Short": (2, lambda b: struct.unpack("<h", b)[0]),
    "Int": (4, lambda b: struct.unpack("<i", b)[0]),
    "Long": (8, lambda b: struct.unpack("<q", b)[0]),
    "UInt16": (2, lambda b: struct.unpack("<H", b)[0]),
    "UInt32": (4, lambda b: struct.unpack("<I", b)[0]),
    "UInt64": (8, lambda b: struct.unpack("<Q", b)[0]),
    "Bool": (1, lambda b: float(b[0] != 0)),
    "Half": (2, lambda b: struct.unpack("<e", b)[0]),
    "BFloat16": (2, lambda b: struct.unpack("<f", b"\0\0" + b)[0]),  # the top half of a float
    "Float": (4, lambda b: struct.unpack("<f", b)[0]),
    "Double": (8, lambda b: struct.unpack("<d", b)[0]),
    "Float8_e5m2": (1, lambda b: float8(b[0], 5, 15, "ieee")),
    "Float8_e4m3fn": (1, lambda b: float8(b[0], 4, 7, "fn")),
    "Float8_e5m2fnuz": (1, lambda b: float8(b[0], 5, 16, "fnuz")),
    "Float8_e4m3fnuz": (1, lambda b: float8(b[0], 4, 8, "fnuz")),
    "Float8_e8m0fnu": (1, lambda b: math.nan if b[0] == 0xFF else 2.0 ** (b[0] - 127)),
}

# c10::DeviceType by index, as Device::str() spells it (c10/core/DeviceType.cpp).
DEVICE_TYPES = ("cpu cuda mkldnn opengl opencl ideep hip fpga maia xla vulkan metal xpu mps "
                "meta hpu ve lazy ipu mtia privateuseone").split()


def dwarf_offset(type_name, member):
    """The member's byte offset in the program's DWARF, or None where the class is only declared."""
    try:
        kind = gdb.lookup_type(type_name).strip_typedefs()
        fields = kind.fields()
    except (gdb.error, TypeError, RuntimeError):
        return None

    def find(fields, base):  # a direct member first, then inside members and base classes
        for f in fields:
            if f.name == member and not f.is_base_class:
                return base + f.bitpos // 8
        for f in fields:
            inner = f.type.strip_typedefs()
            if inner.code in (gdb.TYPE_CODE_STRUCT, gdb.TYPE_CODE_UNION):
                found = find(inner.fields(), base + f.bitpos // 8)
                if found is not None:
                    return found
        return None

    return find(fields, 0)


def offset(type_name, member):
    found = dwarf_offset(type_name, member) if use_dwarf else None
    return LAYOUT[(type_name, member)] if found is None else found


def layout_check():
    """Each LAYOUT number next to the DWARF's, for a program built with the full DWARF."""
    lines, wrong = [], 0
    for (type_name, member), fixed in LAYOUT.items():
        found = dwarf_offset(type_name, member)
        wrong += found != fixed
        lines.append("%s::%s at %d, DWARF: %s" % (type_name, member, fixed, found))
    lines.append("LAYOUT MATCHES THE DWARF" if not wrong else "LAYOUT: %d offset(s) differ" % wrong)
    return "\n".join(lines)


def read(address, size):
    return bytes(gdb.selected_inferior().read_memory(address, size))


def word(address, size=8, signed=False):
    return int.from_bytes(read(address, size), "little", signed=signed)


def number_text(v):
    """printf("%.4g"), as runtime/observe/debug_text.cpp prints each value (glibc writes NaN's sign)."""
    if math.isnan(v):
        return "-nan" if math.copysign(1.0, v) < 0 else "nan"
    return "%.4g" % v


class TensorPrinter:
    def __init__(self, value):
        self.value = value

    def to_string(self):
        return self.to_string_with(VALUES, 0)

    def to_string_with(self, count, start):
        try:
            # The TensorImpl the tensor points to: also for a tensor that is not in memory
            # (a function's return value after `finish`).
            impl = int(self.value["impl_"]["target_"])
        except gdb.error as e:
            return "<tensor: %s>" % e
        # `info locals` shows locals the program has not built yet: their pointer is
        # whatever the stack held. Read on only from a pointer that is aligned, readable,
        # starts with a TensorImpl's vtable and holds live reference counts.
        if impl == 0:
            return "<not built>"
        if impl % 8:
            return "<not built: TensorImpl pointer 0x%x>" % impl
        try:
            vptr = word(impl)
        except (gdb.MemoryError, gdb.error):
            return "<not built: TensorImpl pointer 0x%x, unreadable>" % impl
        # A live TensorImpl starts with its class's vtable pointer: gdb's symbol table says
        # what that word points at ("vtable for c10::TensorImpl + 16 in section ..."; a
        # subclass: at::SparseTensorImpl, at::FunctionalTensorWrapper, ...). Stack garbage,
        # or another object, points elsewhere.
        try:
            where = gdb.execute("info symbol 0x%x" % vptr, to_string=True)
        except gdb.error:
            where = ""
        cls = re.match(r"vtable for (.*?)(?: \+ \d+)? in section", where)
        if not (cls and ("TensorImpl" in cls.group(1) or "TensorWrapper" in cls.group(1))):
            return "<not built: TensorImpl pointer 0x%x>" % impl
        if cls.group(1) == "c10::UndefinedTensorImpl":
            return "undefined tensor"
        try:
            return self.text(impl, cls.group(1), count, start)
        except (gdb.MemoryError, gdb.error) as e:
            return "<tensor 0x%x: %s>" % (impl, str(e).splitlines()[0])

    def text(self, impl, cls, count=VALUES, start=0):
        # A local not built yet, or one already destroyed, can still point at a TensorImpl
        # whose counts are 0 (or garbage); a live one has strong >= 1 and weak >= 1 (the
        # strong references together hold one weak one).
        counts = word(impl + offset("c10::intrusive_ptr_target", "combined_refcount_"))
        strong, weak = counts & 0xFFFFFFFF, (counts >> 32) & 0x7FFFFFFF
        if not (1 <= strong <= 1 << 24 and 1 <= weak <= 1 << 24):
            return "<not built, or freed: TensorImpl 0x%x, counts %d strong %d weak>" % (impl, strong, weak)

        ss = impl + offset("c10::TensorImpl", "sizes_and_strides_")
        dims = word(ss + offset("c10::impl::SizesAndStrides", "size_"))
        if dims > 64:
            return "<not built, or freed: TensorImpl 0x%x, %d dimensions>" % (impl, dims)
        inline = ss + offset("c10::impl::SizesAndStrides", "inlineStorage_")
        if dims <= INLINE_DIMS:
            sizes_at, strides_at = inline, inline + 8 * INLINE_DIMS
        else:  # out of line: one array, sizes then strides
            sizes_at = word(inline)
            strides_at = sizes_at + 8 * dims
        sizes = [word(sizes_at + 8 * i, signed=True) for i in range(dims)]
        strides = [word(strides_at + 8 * i, signed=True) for i in range(dims)]

        index = word(impl + offset("c10::TensorImpl", "data_type_"), 2)
        dtype = SCALAR_TYPES[index] if index < len(SCALAR_TYPES) else "ScalarType(%d)" % index
        device_at = impl + offset("c10::TensorImpl", "device_opt_")
        kind, device_index, engaged = read(device_at, 3)
        device = DEVICE_TYPES[kind] if kind < len(DEVICE_TYPES) else "device(%d)" % kind
        if device_index != 0xFF:  # index -1: none (a CPU tensor)
            device += ":%d" % device_index
        if not engaged:
            device = "<no device>"

        # Sparse, compressed-sparse and MKL-DNN tensors have no strides (tensor_text then
        # shows neither strides nor values).
        strided = not re.search(r"Sparse|Opaque", cls)
        out = "[%s] %s %s" % (", ".join(map(str, sizes)), dtype, device)
        if strided:
            out += " strides (%s)" % ", ".join(map(str, strides))
        if self.requires_grad(impl):
            out += " requires_grad"
        numel = math.prod(sizes)
        start = max(0, min(start, numel))
        n = min(count, numel - start)
        if not strided or n <= 0:
            return out
        if not device.startswith("cpu"):
            return out + " {values on %s: gdb reads only the CPU's memory}" % device
        if dtype not in READERS:
            return out + " {values: %s is not read by scripts/picotron_gdb.py}" % dtype
        itemsize, decode = READERS[dtype]
        storage_impl = word(impl + offset("c10::TensorImpl", "storage_"))
        data = word(storage_impl + offset("c10::StorageImpl", "data_ptr_")) if storage_impl else 0
        if not data:
            return out + " {no data}"
        first = word(impl + offset("c10::TensorImpl", "storage_offset_"), signed=True)
        values = []
        for i in range(start, start + n):  # element i in row-major order: its index in each dimension, by strides
            at, rest = first, i
            for size, stride in reversed(list(zip(sizes, strides))):
                at += (rest % size) * stride
                rest //= size
            values.append(float(decode(read(data + at * itemsize, itemsize))))
        shown = runs_text(values) if count > VALUES and dtype in INTEGER_TYPES else [number_text(v) for v in values]
        return (out + " {" + ("... " if start else "") + ", ".join(shown) + (", ...}" if start + n < numel else "}") +
                ("  (elements %d-%d of %d)" % (start, start + n - 1, numel) if count > VALUES or start else ""))

    @staticmethod
    def requires_grad(impl, depth=0):
        """autograd_meta_->requires_grad() (torch/csrc/autograd/variable.h): requires_grad_ ||
        grad_fn_, or, for a view (a DifferentiableViewMeta), its base's requires_grad()."""
        meta = word(impl + offset("c10::TensorImpl", "autograd_meta_"))
        if not meta:
            return False
        if word(meta + offset("torch::autograd::AutogradMeta", "requires_grad_"), 1):
            return True
        if word(meta + offset("torch::autograd::AutogradMeta", "grad_fn_")):
            return True
        if depth > 8 or not word(meta + offset("torch::autograd::AutogradMeta", "is_view_"), 1):
            return False
        info = meta + offset("torch::autograd::DifferentiableViewMeta", "backward_info_")
        if not word(info + offset("std::optional<torch::autograd::ViewInfo>", "_M_engaged"), 1):
            return False
        base = word(info)  # ViewInfo::base_, a tensor: its TensorImpl
        return bool(base) and TensorPrinter.requires_grad(base, depth + 1)


INTEGER_TYPES = ("Byte", "Char", "Short", "Int", "Long", "Bool")


def runs_text(values):
    """Integers as runs: [0, 1, 2, 3, 9, 8] -> ['0-3', '9', '8'] (ascending runs of 3 or more)."""
    out, i = [], 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[j + 1] == values[j] + 1:
            j += 1
        if j - i >= 2:
            out.append("%d-%d" % (values[i], values[j]))
        else:
            out.extend("%d" % v for v in values[i:j + 1])
        i = j + 1
    return out


class TensorCommand(gdb.Command):
    """tensor EXPR [COUNT | all] [FROM]: more of a tensor's values than print's first six.

    COUNT values (all: every one) from element FROM (row-major, 0-based); an integer
    tensor's ascending runs print as a-b. Reads memory only, like print:
        (gdb) tensor to all
        to = [128] Long cpu strides (1) {0-31, 64-127, 32-63}  (elements 0-127 of 128)
        (gdb) tensor x 4 1000
    """

    def __init__(self):
        super().__init__("tensor", gdb.COMMAND_DATA)

    def invoke(self, argument, from_tty):
        args = gdb.string_to_argv(argument)
        if not args or len(args) > 3:
            raise gdb.GdbError("usage: tensor EXPR [COUNT | all] [FROM]")
        count = VALUES
        if len(args) > 1:
            count = 1 << 62 if args[1] == "all" else int(args[1])
        start = int(args[2]) if len(args) > 2 else 0
        printer = lookup(gdb.parse_and_eval(args[0]))
        if printer is None:
            raise gdb.GdbError("tensor: %s is not a tensor" % args[0])
        gdb.write("%s = %s\n" % (args[0], printer.to_string_with(count, start)))


def lookup(value):
    kind = value.type.strip_typedefs().unqualified()
    if kind.code == gdb.TYPE_CODE_REF:
        kind = kind.target().strip_typedefs().unqualified()
        value = value.referenced_value()
    if kind.tag in TENSOR_TYPES:
        return TensorPrinter(value)
    return None


lookup.name = "picotron"  # what `info pretty-printer` shows and `disable pretty-printer` takes
lookup.enabled = True


def register(objfile=None):
    printers = gdb.pretty_printers if objfile is None else objfile.pretty_printers
    if not any(getattr(p, "name", "") == "picotron" for p in printers):
        printers.append(lookup)


register()
TensorCommand()


# Symbols of the large libraries (why a debug session starts in seconds). gdb reads every
# shared library's symbol table when the program starts: LibTorch's and CUDA's hold about
# a million symbols and take ~20 s on a 2-core machine, and nothing printed here needs them
# (tensors are read through the program's own debug info, above). scripts/debug.sh starts
# gdb with `set auto-solib-add off`; then, once the program reaches main (every library it
# links is loaded by then), this reads the symbols of the others: libc10 (3,000 symbols:
# c10::TensorImpl's vtable, which tells a live tensor, above), the C and C++ runtimes
# (std::vector and std::string print through libstdc++'s printers), MPI. Frames inside
# LibTorch then show as `?? ()` in a backtrace; scripts/debug.sh --lib-symbols reads them all.
LARGE_LIBRARIES = re.compile(r"lib(torch|cu|nccl|nvshmem|nvrtc|nvJitLink|cupti)")


def read_small_libraries():
    listing = gdb.execute("info sharedlibrary", to_string=True)
    for path in re.findall(r"^0x\S+\s+0x\S+\s+No\s+(\S+)$", listing, re.M):
        if not LARGE_LIBRARIES.search(os.path.basename(path)):
            gdb.execute("sharedlibrary " + os.path.basename(path), to_string=True)


class ReadSmallLibraries(gdb.Breakpoint):
    def __init__(self):
        super().__init__("main", internal=True, temporary=True)  # internal: numbers no user breakpoint

    def stop(self):
        read_small_libraries()
        return False  # read, and go on without stopping


# The debug build's sources are named /picotron-src/... (CMakeLists.txt, so that ccache serves
# any checkout): they are this checkout's.
gdb.execute("set substitute-path /picotron-src " + os.path.dirname(os.path.dirname(os.path.realpath(__file__))))

if not gdb.parameter("auto-solib-add"):
    if gdb.selected_inferior().pid:  # attached to a running rank (gdb -p): its libraries are loaded
        read_small_libraries()
    else:
        ReadSmallLibraries()
