/*
 * crc32.h - CRC-32/IEEE 802.3 (zlib.crc32 / java.util.zip.CRC32 compatible)
 * with run-time CPU dispatch (VPCLMULQDQ/AVX-512, PCLMULQDQ, ARMv8 CRC32,
 * slicing-by-8 table).  Plain C, no Python headers; every function is
 * thread-safe and may be called without the GIL.
 */
#ifndef RMQ_CRC32_H
#define RMQ_CRC32_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* CRC-32/IEEE as zlib.crc32(data, crc): crc is the running value (0 to
 * start), returns the updated value. */
uint32_t rmq_crc32(uint32_t crc, const void *data, size_t len);

/* Name of the kernel rmq_crc32 uses: "vpclmulqdq", "pclmulqdq", "armv8",
 * "table". */
const char *rmq_crc32_kernel(void);

/* Force a kernel by name; returns 0 on success, -1 if unknown or unsupported
 * by this CPU (no change).  "auto" selects the best kernel for this CPU
 * (ignoring RMQ_CRC32_KERNEL). */
int rmq_crc32_set_kernel(const char *name);

/* Comma-separated list of kernels this CPU supports, best first, e.g.
 * "vpclmulqdq,pclmulqdq,table". */
const char *rmq_crc32_kernels_available(void);

#ifdef __cplusplus
}
#endif

#endif /* RMQ_CRC32_H */
