# CRC-32 (zlib / java.util.zip.CRC32) through the run-time dispatched C kernels.

from crc32 cimport *

# Release the GIL only when the CRC takes about ten times what releasing it costs:
# the faster the kernel, the larger that size (the per-kernel figures behind these
# thresholds: bench/README.md, "Figures quoted by the code").
cdef Py_ssize_t CRC32_NOGIL_THRESHOLD = 64 * 1024


cdef void _set_nogil_threshold() noexcept:
    global CRC32_NOGIL_THRESHOLD
    cdef bytes k = rmq_crc32_kernel()
    if k == b"vpclmulqdq":
        CRC32_NOGIL_THRESHOLD = 64 * 1024
    elif k == b"table":
        CRC32_NOGIL_THRESHOLD = 4 * 1024
    else:               # pclmulqdq, armv8
        CRC32_NOGIL_THRESHOLD = 16 * 1024


cdef extern from "Python.h":
    bint PyBytes_CheckExact(object o)
    Py_ssize_t PyBytes_GET_SIZE(object o)


cdef inline uint32_t crc_of(uint32_t crc, const void* p, Py_ssize_t n) noexcept:
    if n >= CRC32_NOGIL_THRESHOLD:
        with nogil:
            return rmq_crc32(crc, p, n)
    return rmq_crc32(crc, p, n)


cdef uint32_t crc_of_object(uint32_t crc, object data) except? 0xFFFFFFFF:
    cdef Py_buffer view
    if PyBytes_CheckExact(data):    # the common case, without the buffer protocol
        return crc_of(crc, PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data))
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        return crc_of(crc, view.buf, view.len)
    finally:
        PyBuffer_Release(&view)


def crc32(data, value=0):
    """CRC-32/IEEE of ``data`` (any bytes-like) continuing from ``value``, as zlib.crc32."""
    return crc_of_object(<uint32_t>(value & 0xFFFFFFFF), data)


def body_crc32(data):
    """Java's UtilAll.crc32: the CRC-32 masked to a non-negative int."""
    return crc_of_object(0, data) & 0x7FFFFFFF


def crc32_set_kernel(str name):
    """Force a CRC32 kernel by name (tests compare every kernel); ValueError if
    this CPU lacks it; "auto" restores the automatic choice. Returns the kernel now in use."""
    global CRC32_KERNEL
    if rmq_crc32_set_kernel(name.encode("ascii")) != 0:
        raise ValueError(f"CRC32 kernel {name!r} is unknown or unsupported here "
                         f"(available: {rmq_crc32_kernels_available().decode()})")
    CRC32_KERNEL = rmq_crc32_kernel().decode("ascii")
    _set_nogil_threshold()
    return CRC32_KERNEL


def crc32_kernels_available():
    """Kernels this CPU can run, best first."""
    return tuple(rmq_crc32_kernels_available().decode("ascii").split(","))


CRC32_KERNEL = rmq_crc32_kernel().decode("ascii")
_set_nogil_threshold()
