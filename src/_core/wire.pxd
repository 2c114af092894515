# Declarations of wire.h, for the .pxi files of rmq._core (cimported: each C header is
# declared once, here). What the C and Cython files share.

from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint32_t

cdef extern from "wire.h" nogil:
    ctypedef struct rmq_topic_rec:
        const char* key
        size_t key_len
        const char* name
        size_t name_len
        int32_t perm, read, write, sysflag
    enum:
        RMQ_GET_ROUTEINFO_BY_TOPIC
        RMQ_REGISTER_BROKER
        RMQ_TOPIC_NOT_EXIST
        RMQ_CURRENT_VERSION
        RMQ_V4_9_4
    bint is_zlib "rmq_is_zlib" (const uint8_t* p, size_t n)
    bint RMQ_DEBUG                      # setup.py: RMQ_DEBUG=1 builds
    int32_t be32 "rmq_be32" (const uint8_t* p)
    enum:
        FRAME_INCOMPLETE "RMQ_FRAME_INCOMPLETE"     # frame_at: fewer bytes than the frame needs
        FRAME_BAD_LENGTH "RMQ_FRAME_BAD_LENGTH"     # frame_at: check_length would raise
    int64_t frame_at "rmq_frame_at" (const uint8_t* p, size_t n, size_t max_frame)
    void put_be32 "rmq_put_be32" (char* p, uint32_t v)
    size_t fmt_int "rmq_fmt_int" (char* buf, int64_t v)
    const uint8_t* scan_num "rmq_scan_num" (const uint8_t* p, const uint8_t* end, int* is_int,
                                            const uint8_t** at, int* why)
    # The JSON response header's fixed pieces, shared with scan.c's route answer;
    # RMQ_LIT_LEN(s) is sizeof(s) - 1 for these literals.
    const char* JH_CODE "RMQ_JH_CODE"
    const char* JH_FLAG "RMQ_JH_FLAG"
    const char* JH_LANGUAGE "RMQ_JH_LANGUAGE"
    const char* JH_OPAQUE "RMQ_JH_OPAQUE"
    const char* JH_TAIL "RMQ_JH_TAIL"
    Py_ssize_t LIT_LEN "RMQ_LIT_LEN" (const char* literal)
    # The ROCKETMQ binary header walker (codec.pxi decodes with it, scan.c recognises).
    enum:
        BH_FIXED "RMQ_BH_FIXED"
        BH_REMARK_AT "RMQ_BH_REMARK_AT"
        BH_OK "RMQ_BH_OK"
        BH_END "RMQ_BH_END"
        BH_SHORT "RMQ_BH_SHORT"
        BH_REMARK "RMQ_BH_REMARK"
        BH_EXT "RMQ_BH_EXT"
        BH_TRUNCATED "RMQ_BH_TRUNCATED"
        BH_KEY "RMQ_BH_KEY"
        BH_VALUE "RMQ_BH_VALUE"
    ctypedef struct bheader "rmq_bheader":
        int16_t code, version, klen
        uint8_t language
        int32_t opaque, flag, remark_len, ext_len, vlen
        size_t pos, end, at
    int bh_start "rmq_bh_start" (const uint8_t* d, size_t n, bheader* h)
    int bh_next "rmq_bh_next" (const uint8_t* d, bheader* h)
