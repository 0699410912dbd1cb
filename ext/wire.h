/*
 * Byte-level helpers shared by the Cython modules: big-endian loads and
 * stores, Kafka's zigzag varints, the RecordBatch v2 header layout, and one
 * record parser that every decoder (iteration, columns, validation, the
 * cleaner) uses, so that there is exactly one definition of a valid record.
 *
 * RecordBatch v2 (https://kafka.apache.org/documentation/#recordbatch):
 *
 *   RecordBatch => baseOffset int64          @0
 *                  batchLength int32         @8   bytes after this field
 *                  partitionLeaderEpoch int32 @12 not covered by the CRC
 *                  magic int8                @16  always 2
 *                  crc uint32                @17  CRC-32C of attributes..end
 *                  attributes int16          @21
 *                  lastOffsetDelta int32     @23
 *                  baseTimestamp int64       @27
 *                  maxTimestamp int64        @35
 *                  producerId int64          @43
 *                  producerEpoch int16       @51
 *                  baseSequence int32        @53
 *                  recordsCount int32        @57
 *                  records                   @61  (compressed as a whole when
 *                                                   attributes & 7 != 0)
 *
 *   Record => length varint, attributes int8, timestampDelta varlong,
 *             offsetDelta varint, keyLength varint, key, valueLength varint,
 *             value, headersCount varint,
 *             [headerKeyLength varint, headerKey, headerValueLength varint, value]
 *   A length of -1 means null (key, value, header value); header keys are
 *   never null.
 */
#ifndef KAFKALITE_WIRE_H
#define KAFKALITE_WIRE_H

#include <stdint.h>
#include <string.h>

#define KL_OFF_BASE_OFFSET 0
#define KL_OFF_LENGTH 8
#define KL_OFF_LEADER_EPOCH 12
#define KL_OFF_MAGIC 16
#define KL_OFF_CRC 17
#define KL_OFF_ATTRIBUTES 21
#define KL_OFF_LAST_OFFSET_DELTA 23
#define KL_OFF_BASE_TIMESTAMP 27
#define KL_OFF_MAX_TIMESTAMP 35
#define KL_OFF_PRODUCER_ID 43
#define KL_OFF_PRODUCER_EPOCH 51
#define KL_OFF_BASE_SEQUENCE 53
#define KL_OFF_RECORDS_COUNT 57
#define KL_BATCH_HEADER_SIZE 61
/* baseOffset + batchLength: the part of the header before batchLength counts. */
#define KL_LOG_OVERHEAD 12
/* The smallest legal batchLength: the header after baseOffset/batchLength. */
#define KL_MIN_BATCH_LENGTH (KL_BATCH_HEADER_SIZE - KL_LOG_OVERHEAD)
/* The CRC covers attributes to the end of the batch. */
#define KL_CRC_FROM KL_OFF_ATTRIBUTES
/* Codecs in attributes & KL_ATTR_COMPRESSION_MASK (Kafka's ids). */
#define KL_CODEC_NONE 0
#define KL_CODEC_GZIP 1
#define KL_CODEC_SNAPPY 2
#define KL_CODEC_LZ4 3
#define KL_CODEC_ZSTD 4
#define KL_CODEC_MAX 4

#define KL_ATTR_COMPRESSION_MASK 0x07
#define KL_ATTR_TIMESTAMP_TYPE 0x08
#define KL_ATTR_TRANSACTIONAL 0x10
#define KL_ATTR_CONTROL 0x20
#define KL_ATTR_DELETE_HORIZON 0x40

#define KL_MAGIC_V2 2

static inline uint16_t kl_be16(const unsigned char *p) {
    uint16_t v; memcpy(&v, p, 2); return __builtin_bswap16(v);
}
static inline uint32_t kl_be32(const unsigned char *p) {
    uint32_t v; memcpy(&v, p, 4); return __builtin_bswap32(v);
}
static inline uint64_t kl_be64(const unsigned char *p) {
    uint64_t v; memcpy(&v, p, 8); return __builtin_bswap64(v);
}
static inline void kl_put_be16(unsigned char *p, uint16_t v) {
    v = __builtin_bswap16(v); memcpy(p, &v, 2);
}
static inline void kl_put_be32(unsigned char *p, uint32_t v) {
    v = __builtin_bswap32(v); memcpy(p, &v, 4);
}
static inline void kl_put_be64(unsigned char *p, uint64_t v) {
    v = __builtin_bswap64(v); memcpy(p, &v, 8);
}

/* Zigzag varlong. Returns the position after the value, or NULL when the
 * input ends first or the value runs past 10 bytes. */
static inline const unsigned char *kl_read_varint(const unsigned char *p,
                                                  const unsigned char *end,
                                                  int64_t *out) {
    uint64_t raw = 0;
    int shift = 0;
    /* most fields of a record are single-byte varints */
    if (p < end && !(*p & 0x80)) {
        raw = *p;
        *out = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
        return p + 1;
    }
    while (p < end) {
        unsigned char b = *p++;
        raw |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
            return p;
        }
        shift += 7;
        if (shift > 63) return NULL;
    }
    return NULL;
}

static inline int kl_varint_size(int64_t v) {
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    int n = 1;
    while (z >= 0x80) { z >>= 7; n++; }
    return n;
}

static inline unsigned char *kl_write_varint(unsigned char *p, int64_t v) {
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    while (z >= 0x80) {
        *p++ = (unsigned char)(z | 0x80);
        z >>= 7;
    }
    *p++ = (unsigned char)z;
    return p;
}

/* One decoded record: pointers into the (uncompressed) records section. */
typedef struct {
    const unsigned char *start;      /* first byte of the length varint */
    const unsigned char *end;        /* one past the record */
    int64_t timestamp_delta;
    int64_t offset_delta;
    const unsigned char *key;
    int64_t key_len;                 /* -1: null */
    const unsigned char *value;
    int64_t value_len;               /* -1: null */
    const unsigned char *headers;    /* first header entry */
    int64_t header_count;
} kl_record;

enum {
    KL_REC_OK = 0,
    KL_REC_TRUNCATED = 1,   /* runs past the records section */
    KL_REC_BAD_LENGTH = 2,  /* a negative or inconsistent length */
    KL_REC_BAD_SIZE = 3,    /* fields do not add up to the record length */
};

/* Walk the header entries from r->headers; returns KL_REC_OK and stores the
 * end of the last header in *after. Used by the full parse and by decoders
 * that copy headers out. */
static inline int kl_skip_headers(const unsigned char *p, const unsigned char *end,
                                  int64_t count, const unsigned char **after) {
    int64_t n;
    for (int64_t i = 0; i < count; i++) {
        if (!(p = kl_read_varint(p, end, &n))) return KL_REC_TRUNCATED;
        if (n < 0) return KL_REC_BAD_LENGTH;
        if (n > end - p) return KL_REC_TRUNCATED;
        p += n;
        if (!(p = kl_read_varint(p, end, &n))) return KL_REC_TRUNCATED;
        if (n < -1) return KL_REC_BAD_LENGTH;
        if (n > 0) {
            if (n > end - p) return KL_REC_TRUNCATED;
            p += n;
        }
    }
    *after = p;
    return KL_REC_OK;
}

/* Parse the record at p. Every length is checked against both the record's
 * own length prefix and the end of the section, and the fields must fill the
 * record exactly (as the Java client's DefaultRecord.readFrom requires). */
static inline int kl_parse_record(const unsigned char *p, const unsigned char *end,
                                  kl_record *r) {
    int64_t length, n;
    const unsigned char *q;
    r->start = p;
    if (!(p = kl_read_varint(p, end, &length))) return KL_REC_TRUNCATED;
    if (length < 1) return KL_REC_BAD_LENGTH;
    if (length > end - p) return KL_REC_TRUNCATED;
    end = p + length;
    r->end = end;
    p += 1; /* attributes: unused in v2 */
    if (!(p = kl_read_varint(p, end, &r->timestamp_delta))) return KL_REC_BAD_SIZE;
    if (!(p = kl_read_varint(p, end, &r->offset_delta))) return KL_REC_BAD_SIZE;
    if (!(p = kl_read_varint(p, end, &n))) return KL_REC_BAD_SIZE;
    if (n < -1) return KL_REC_BAD_LENGTH;
    r->key_len = n;
    r->key = p;
    if (n > 0) {
        if (n > end - p) return KL_REC_BAD_SIZE;
        p += n;
    }
    if (!(p = kl_read_varint(p, end, &n))) return KL_REC_BAD_SIZE;
    if (n < -1) return KL_REC_BAD_LENGTH;
    r->value_len = n;
    r->value = p;
    if (n > 0) {
        if (n > end - p) return KL_REC_BAD_SIZE;
        p += n;
    }
    if (!(p = kl_read_varint(p, end, &r->header_count))) return KL_REC_BAD_SIZE;
    if (r->header_count < 0) return KL_REC_BAD_LENGTH;
    r->headers = p;
    if (r->header_count == 0) {
        return p == end ? KL_REC_OK : KL_REC_BAD_SIZE;
    }
    int rc = kl_skip_headers(p, end, r->header_count, &q);
    if (rc == KL_REC_TRUNCATED) return KL_REC_BAD_SIZE;
    if (rc != KL_REC_OK) return rc;
    return q == end ? KL_REC_OK : KL_REC_BAD_SIZE;
}

/* Control batches (transaction markers, written by the broker): one
 * uncompressed record whose key is version int16 (0), type int16 (0 ABORT,
 * 1 COMMIT) and whose value is version int16 (0), coordinatorEpoch int32.
 * kl_control_type gives the type of the batch at b (size bytes), or
 * KL_CONTROL_UNKNOWN when it is not a control batch or its record does not
 * parse as one. */
#define KL_CONTROL_ABORT 0
#define KL_CONTROL_COMMIT 1
#define KL_CONTROL_UNKNOWN -1
#define KL_CONTROL_KEY_SIZE 4
#define KL_CONTROL_VALUE_SIZE 6

static inline int kl_control_type(const unsigned char *b, int64_t size) {
    kl_record r;
    uint16_t attrs;
    int type;
    if (size < KL_BATCH_HEADER_SIZE) return KL_CONTROL_UNKNOWN;
    attrs = kl_be16(b + KL_OFF_ATTRIBUTES);
    if (!(attrs & KL_ATTR_CONTROL) || (attrs & KL_ATTR_COMPRESSION_MASK) != KL_CODEC_NONE)
        return KL_CONTROL_UNKNOWN;
    if (kl_be32(b + KL_OFF_RECORDS_COUNT) != 1) return KL_CONTROL_UNKNOWN;
    if (kl_parse_record(b + KL_BATCH_HEADER_SIZE, b + size, &r) != KL_REC_OK)
        return KL_CONTROL_UNKNOWN;
    if (r.key_len != KL_CONTROL_KEY_SIZE || kl_be16(r.key) != 0) return KL_CONTROL_UNKNOWN;
    type = (int)(int16_t)kl_be16(r.key + 2);
    if (type != KL_CONTROL_ABORT && type != KL_CONTROL_COMMIT) return KL_CONTROL_UNKNOWN;
    return type;
}

static inline const char *kl_record_error(int rc) {
    switch (rc) {
    case KL_REC_TRUNCATED: return "record runs past the end of the batch";
    case KL_REC_BAD_LENGTH: return "record has an invalid (negative) length field";
    case KL_REC_BAD_SIZE: return "record fields do not match the record's length prefix";
    default: return "ok";
    }
}

#endif /* KAFKALITE_WIRE_H */
