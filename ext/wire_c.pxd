# Declarations of wire.h (byte order, varints, batch layout, record parser).
from libc.stdint cimport int64_t, uint16_t, uint32_t, uint64_t

cdef extern from "wire.h" nogil:
    enum:
        KL_OFF_BASE_OFFSET
        KL_OFF_LENGTH
        KL_OFF_LEADER_EPOCH
        KL_OFF_MAGIC
        KL_OFF_CRC
        KL_OFF_ATTRIBUTES
        KL_OFF_LAST_OFFSET_DELTA
        KL_OFF_BASE_TIMESTAMP
        KL_OFF_MAX_TIMESTAMP
        KL_OFF_PRODUCER_ID
        KL_OFF_PRODUCER_EPOCH
        KL_OFF_BASE_SEQUENCE
        KL_OFF_RECORDS_COUNT
        KL_BATCH_HEADER_SIZE
        KL_LOG_OVERHEAD
        KL_MIN_BATCH_LENGTH
        KL_CRC_FROM
        KL_CODEC_NONE
        KL_CODEC_GZIP
        KL_CODEC_SNAPPY
        KL_CODEC_LZ4
        KL_CODEC_ZSTD
        KL_CODEC_MAX
        KL_ATTR_COMPRESSION_MASK
        KL_ATTR_TIMESTAMP_TYPE
        KL_ATTR_TRANSACTIONAL
        KL_ATTR_CONTROL
        KL_ATTR_DELETE_HORIZON
        KL_MAGIC_V2
        KL_REC_OK
        KL_CONTROL_ABORT
        KL_CONTROL_COMMIT
        KL_CONTROL_UNKNOWN
        KL_CONTROL_KEY_SIZE
        KL_CONTROL_VALUE_SIZE

    uint16_t kl_be16(const unsigned char *p)
    uint32_t kl_be32(const unsigned char *p)
    uint64_t kl_be64(const unsigned char *p)
    void kl_put_be16(unsigned char *p, uint16_t v)
    void kl_put_be32(unsigned char *p, uint32_t v)
    void kl_put_be64(unsigned char *p, uint64_t v)
    const unsigned char *kl_read_varint(const unsigned char *p, const unsigned char *end, int64_t *out)
    int kl_varint_size(int64_t v)
    unsigned char *kl_write_varint(unsigned char *p, int64_t v)

    ctypedef struct kl_record:
        const unsigned char *start
        const unsigned char *end
        int64_t timestamp_delta
        int64_t offset_delta
        const unsigned char *key
        int64_t key_len
        const unsigned char *value
        int64_t value_len
        const unsigned char *headers
        int64_t header_count

    int kl_skip_headers(const unsigned char *p, const unsigned char *end, int64_t count,
                        const unsigned char **after)
    int kl_parse_record(const unsigned char *p, const unsigned char *end, kl_record *r)
    const char *kl_record_error(int rc)
    int kl_control_type(const unsigned char *b, int64_t size)
