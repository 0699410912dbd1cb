/*
 * The shared-memory produce ring: byte offsets of its header, entry and ack
 * record fields, and the atomic loads/stores the two sides use on them.
 * The layout itself (who writes which field, what each means) is described
 * at the top of shm_ring.pyx; this header only names the numbers and wraps
 * GCC's __atomic builtins so that the ordering of every shared access is
 * spelled out in one place.
 *
 * Memory-order rules (single producer, single consumer per direction):
 *   - a cursor is published with klr_store_release() after the bytes it
 *     covers are written, and read with klr_load_acquire() before those
 *     bytes are read;
 *   - the sleep/wake handshake needs store->load ordering on both sides
 *     (a Dekker pattern), which acquire/release does not give: the sleeper
 *     sets its flag and then issues klr_fence() before re-checking the
 *     cursor; the waker publishes its cursor, issues klr_fence(), then reads
 *     the flag. Either the sleeper sees the new cursor or the waker sees the
 *     flag, never neither.
 */
#ifndef KAFKALITE_SHM_RING_H
#define KAFKALITE_SHM_RING_H

#include <stdint.h>
#include <string.h>
#include <time.h>

#define KLR_MAGIC 0x474E524D48534C4BULL      /* the bytes "KLSHMRNG" as a little-endian u64 */
#define KLR_VERSION 1
#define KLR_HEADER_SIZE 4096

/* header, line 0: written once by the producer before the magic, then immutable */
#define KLR_OFF_MAGIC 0
#define KLR_OFF_VERSION 8
#define KLR_OFF_HEADER_SIZE 12
#define KLR_OFF_DATA_CAPACITY 16
#define KLR_OFF_ACK_CAPACITY 24
#define KLR_OFF_DATA_OFFSET 32
#define KLR_OFF_ACK_OFFSET 40
#define KLR_OFF_TOTAL_SIZE 48
#define KLR_OFF_PRODUCER_IDENT 56
/* line 1: written by the producer only */
#define KLR_OFF_DATA_HEAD 64
#define KLR_OFF_ACK_TAIL 72
#define KLR_OFF_PRODUCER_STATE 80
#define KLR_OFF_NEXT_SEQUENCE 88
/* line 2: written by the worker only (worker ident also by a taking-over worker's CAS) */
#define KLR_OFF_DATA_RELEASED 128
#define KLR_OFF_ACK_HEAD 136
#define KLR_OFF_WORKER_IDENT 144
#define KLR_OFF_WORKER_EPOCH 152
/* lines 3 and 4: one sleep flag per line; set by its owner, cleared by either side */
#define KLR_OFF_WORKER_SLEEPING 192
#define KLR_OFF_PRODUCER_SLEEPING 256

#define KLR_PRODUCER_OPEN 1
#define KLR_PRODUCER_CLOSED 2

/* data entry: 8-byte aligned, never split across the end of the region */
#define KLR_ENT_SIZE 0          /* u32: whole entry incl. padding, a multiple of 8 */
#define KLR_ENT_KIND 4          /* u8: KLR_KIND_ENTRY or KLR_KIND_PAD */
#define KLR_ENT_TOPIC_LEN 5     /* u8: 1..249 */
#define KLR_ENT_RESERVED 6      /* u16: zero */
#define KLR_ENT_SEQUENCE 8      /* u64 */
#define KLR_ENT_PARTITION 16    /* i32 */
#define KLR_ENT_BATCH_LEN 20    /* u32 */
#define KLR_ENT_TOPIC 24        /* topic bytes; the batch follows at 24 + align8(topic_len) */
#define KLR_ENT_HEADER_SIZE 24
#define KLR_PAD_HEADER_SIZE 8   /* a padding marker is only size + kind */

#define KLR_KIND_ENTRY 0x45     /* 'E' */
#define KLR_KIND_PAD 0x50       /* 'P' */

#define KLR_MAX_TOPIC_LEN 249   /* Kafka's limit on a topic name */

/* ack record: fixed 32 bytes */
#define KLR_ACK_SEQUENCE 0      /* u64 */
#define KLR_ACK_BASE_OFFSET 8   /* i64 */
#define KLR_ACK_DATA_END 16     /* u64: data cursor just past the acked entry */
#define KLR_ACK_ERROR_CODE 24   /* i16 */
#define KLR_ACK_SIZE 32

static inline uint64_t klr_align8(uint64_t n) { return (n + 7) & ~(uint64_t)7; }

static inline uint64_t klr_load_acquire(const unsigned char *p) {
    return __atomic_load_n((const uint64_t *)p, __ATOMIC_ACQUIRE);
}
static inline uint64_t klr_load_relaxed(const unsigned char *p) {
    return __atomic_load_n((const uint64_t *)p, __ATOMIC_RELAXED);
}
static inline void klr_store_release(unsigned char *p, uint64_t v) {
    __atomic_store_n((uint64_t *)p, v, __ATOMIC_RELEASE);
}
static inline void klr_store_relaxed(unsigned char *p, uint64_t v) {
    __atomic_store_n((uint64_t *)p, v, __ATOMIC_RELAXED);
}
static inline uint32_t klr_load32_acquire(const unsigned char *p) {
    return __atomic_load_n((const uint32_t *)p, __ATOMIC_ACQUIRE);
}
static inline void klr_store32_release(unsigned char *p, uint32_t v) {
    __atomic_store_n((uint32_t *)p, v, __ATOMIC_RELEASE);
}
/* Compare-and-swap of a whole u64 field; 1 when it swapped. */
static inline int klr_cas(unsigned char *p, uint64_t expected, uint64_t desired) {
    return __atomic_compare_exchange_n((uint64_t *)p, &expected, desired, 0,
                                       __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
}
static inline void klr_fence(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

/* Sleeper: announce the sleep; the caller re-checks its cursor afterwards. */
static inline void klr_sleep_announce(unsigned char *flag) {
    __atomic_store_n((uint32_t *)flag, 1, __ATOMIC_SEQ_CST);
    klr_fence();
}
/* Either side: take the flag down; returns the previous value. Exactly one
 * of the racing parties sees 1, so exactly one doorbell byte is written per
 * announced sleep. */
static inline uint32_t klr_sleep_take(unsigned char *flag) {
    return __atomic_exchange_n((uint32_t *)flag, 0, __ATOMIC_SEQ_CST);
}
/* Waker, after publishing a cursor: 1 when it must ring the doorbell. */
static inline int klr_wake_needed(unsigned char *flag) {
    klr_fence();
    if (!__atomic_load_n((const uint32_t *)flag, __ATOMIC_RELAXED)) return 0;
    return klr_sleep_take(flag) != 0;
}

static inline void klr_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#else
    __asm__ __volatile__("" ::: "memory");
#endif
}

static inline uint64_t klr_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* Spin until either u64 at a or b differs from its old value (1) or max_ns
 * pass (0). b may be NULL. Called without the GIL. */
static inline int klr_spin_until_change(const unsigned char *a, uint64_t old_a,
                                        const unsigned char *b, uint64_t old_b,
                                        uint64_t max_ns) {
    uint64_t start = klr_now_ns();
    for (unsigned i = 1;; i++) {
        if (klr_load_acquire(a) != old_a) return 1;
        if (b && klr_load_acquire(b) != old_b) return 1;
        klr_cpu_relax();
        if ((i & 31) == 0 && klr_now_ns() - start >= max_ns) return 0;
    }
}

#endif /* KAFKALITE_SHM_RING_H */
