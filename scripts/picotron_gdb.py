"""scripts/picotron_gdb.py — LibTorch tensors readable in gdb.

    (gdb) source scripts/picotron_gdb.py
    (gdb) print x
    $1 = [2, 32, 64] Float cpu strides (2048, 64, 1) {0.0132, -0.871, 0.25, ...}

Without it, an at::Tensor prints as an intrusive pointer to a TensorImpl. This
pretty-printer asks the stopped program itself: it calls picotron_tensor_impl_text
(runtime/debug_text.cpp, linked into build/train) on the tensor's TensorImpl,
so it needs a live process (not a core file). `info pretty-printer` lists it; `disable pretty-printer global picotron`
turns it off. A tensor not built yet (or already freed) prints as <not built ...>
instead of being called into, so `info locals` is safe at every stop.

Test: ctest -L debug   (debug.gdb_tensor_printer)
"""
import gdb

TENSOR_TYPES = ("at::Tensor", "at::TensorBase", "torch::Tensor", "torch::autograd::Variable")


class TensorPrinter:
    def __init__(self, value):
        self.value = value

    def to_string(self):
        try:
            # The TensorImpl the tensor points to: also for a tensor that is not in memory
            # (a function's return value after `finish`).
            impl = int(self.value["impl_"]["target_"])
        except gdb.error as e:
            return "<tensor: %s>" % e
        # `info locals` shows locals the program has not built yet: their pointer is
        # whatever the stack held. Call into the program only for a pointer that is
        # aligned, readable and starts with a vtable; picotron_tensor_impl_text then checks
        # the reference counts.
        if impl == 0:
            return "<not built>"
        if impl % 8:
            return "<not built: TensorImpl pointer 0x%x>" % impl
        try:
            vptr = int.from_bytes(bytes(gdb.selected_inferior().read_memory(impl, 8)), "little")
        except (gdb.MemoryError, gdb.error):
            return "<not built: TensorImpl pointer 0x%x, unreadable>" % impl
        # A live TensorImpl starts with its class's vtable pointer: ask gdb's symbol table
        # what that word points at ("vtable for c10::TensorImpl + 16 in section ..."; a
        # subclass: at::SparseTensorImpl, at::FunctionalTensorWrapper, ...), without running
        # anything in the program. Stack garbage, or another object, points elsewhere.
        try:
            where = gdb.execute("info symbol 0x%x" % vptr, to_string=True)
        except gdb.error:
            where = ""
        if not (where.startswith("vtable for") and ("TensorImpl" in where or "TensorWrapper" in where)):
            return "<not built: TensorImpl pointer 0x%x>" % impl
        try:
            text = gdb.parse_and_eval("(const char*)picotron_tensor_impl_text((const void*)%d)" % impl)
            return text.string()
        except gdb.error as e:
            return "<tensor 0x%x: %s>" % (impl, str(e).splitlines()[0])


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
# A call into the program that still crashes (a pointer that looked alive but was not)
# must not kill the run: gdb unwinds the call and the program stays stopped where it was.
gdb.execute("set unwindonsignal on")
gdb.execute("set unwind-on-terminating-exception on")
