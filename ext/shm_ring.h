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

#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define KLR_MAGIC 0x474E524D48534C4BULL      /* the bytes "KLSHMRNG" as a little-endian u64 */
#define KLR_VERSION 2                       /* 2: the attach secret */
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

/* line 5: written by the worker only, once, when it gives up on the ring
 * (the message and its length first, then the code with a release store) */
#define KLR_OFF_WORKER_ERROR 320        /* i32: 0, or the Kafka error code it closed the ring with */
#define KLR_OFF_WORKER_MESSAGE_LEN 324  /* u32: bytes of the message */
#define KLR_OFF_WORKER_MESSAGE 328      /* UTF-8, at most KLR_MAX_WORKER_MESSAGE bytes */
#define KLR_MAX_WORKER_MESSAGE 256

/* line 10: written once by the producer before the magic, then immutable:
 * random bytes a worker must be shown before it attaches (the hostile-peer
 * section of shm_ring.pyx) */
#define KLR_OFF_ATTACH_SECRET 640
#define KLR_ATTACH_SECRET_SIZE 16

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

/*
 * The SIGBUS guard of the worker's mappings.
 *
 * A producer can truncate the ring file (ftruncate) while the worker has it
 * mapped; the worker's next access to a page past the new end raises
 * SIGBUS, whose default action kills the process. The worker registers each
 * ring mapping here; the handler, for a fault inside a registered mapping,
 * maps private zero pages over the rest of it (MAP_FIXED, from the faulting
 * page on) and marks the mapping faulted. The faulting instruction then
 * re-executes and reads zeros, whatever code it was in, and the ring code
 * checks the mark after every operation and closes the ring. A fault
 * anywhere else goes to the handler that was there before (Python's
 * faulthandler, or the default action).
 *
 * mmap is not on POSIX's list of async-signal-safe functions, but on Linux
 * it is one system call with no user-space lock, and the handler touches
 * nothing else but the slot table (lock-free: a slot is published by a
 * release store of its start address and cleared before its munmap).
 */
#define KLR_MAX_GUARDED 4096

typedef struct {
    uintptr_t start;                /* 0: free slot */
    uintptr_t end;
    volatile sig_atomic_t faulted;
} klr_guard_slot;

static klr_guard_slot klr_guarded[KLR_MAX_GUARDED];
static struct sigaction klr_previous_sigbus;
static int klr_guard_installed;
static uintptr_t klr_page_size;

static void klr_sigbus(int sig, siginfo_t *info, void *uctx) {
    uintptr_t a = (uintptr_t)info->si_addr;
    for (int i = 0; i < KLR_MAX_GUARDED; i++) {
        uintptr_t start = __atomic_load_n(&klr_guarded[i].start, __ATOMIC_ACQUIRE);
        if (start && a >= start && a < klr_guarded[i].end) {
            uintptr_t page = a & ~(klr_page_size - 1);
            void *p = mmap((void *)page, klr_guarded[i].end - page, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
            if (p == MAP_FAILED) break;
            klr_guarded[i].faulted = 1;
            return;
        }
    }
    if (klr_previous_sigbus.sa_flags & SA_SIGINFO) {
        klr_previous_sigbus.sa_sigaction(sig, info, uctx);
    } else if (klr_previous_sigbus.sa_handler != SIG_DFL && klr_previous_sigbus.sa_handler != SIG_IGN) {
        klr_previous_sigbus.sa_handler(sig);
    } else {
        /* the default action: returning re-executes the access, which faults again */
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        sigaction(SIGBUS, &dfl, NULL);
    }
}

/* Register [start, start + size): the slot, or -1 when the table is full
 * or the handler cannot be installed. Called with the GIL held. */
static int klr_guard_add(void *start, size_t size) {
    if (!klr_guard_installed) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = klr_sigbus;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
        sigemptyset(&sa.sa_mask);
        klr_page_size = (uintptr_t)sysconf(_SC_PAGESIZE);
        if (sigaction(SIGBUS, &sa, &klr_previous_sigbus) != 0) return -1;
        klr_guard_installed = 1;
    }
    for (int i = 0; i < KLR_MAX_GUARDED; i++) {
        if (__atomic_load_n(&klr_guarded[i].start, __ATOMIC_RELAXED) == 0) {
            klr_guarded[i].end = (uintptr_t)start + size;
            klr_guarded[i].faulted = 0;
            __atomic_store_n(&klr_guarded[i].start, (uintptr_t)start, __ATOMIC_RELEASE);
            return i;
        }
    }
    return -1;
}

/* Before the mapping is unmapped. */
static void klr_guard_remove(int slot) {
    if (slot >= 0) __atomic_store_n(&klr_guarded[slot].start, 0, __ATOMIC_RELEASE);
}

static int klr_guard_faulted(int slot) {
    return slot >= 0 && klr_guarded[slot].faulted;
}

#endif /* KAFKALITE_SHM_RING_H */
