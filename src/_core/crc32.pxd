# Declarations of crc32.h, for the .pxi files of rmq._core (cimported: each C header is
# declared once, here). The CRC32 kernels.

from libc.stdint cimport uint32_t

cdef extern from "crc32.h" nogil:
    uint32_t rmq_crc32(uint32_t crc, const void* data, size_t len)
    const char* rmq_crc32_kernel()
    int rmq_crc32_set_kernel(const char* name)
    const char* rmq_crc32_kernels_available()
