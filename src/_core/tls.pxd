# Declarations of tls.h, for the .pxi files of rmq._core (cimported: each C header is
# declared once, here). TLS on the I/O engine's threads.

from libc.stdint cimport uint64_t

cdef extern from "tls.h" nogil:
    int tl_load(const char* module_path, char* err, size_t errlen)
    int tl_ctx_matches(void* ctx, uint64_t options, int verify_mode)
