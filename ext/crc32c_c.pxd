# C-level CRC-32C, for cimport by other Cython modules (each gets its own copy
# of the tables from the header; call kl_crc32c_init() at module init).
cdef extern from "crc32c_impl.h" nogil:
    void kl_crc32c_init()
    int kl_crc32c_has_hw()
    unsigned int kl_crc32c(unsigned int crc, const unsigned char *p, size_t n)
    unsigned int kl_crc32c_sw(unsigned int crc, const unsigned char *p, size_t n)
    unsigned int kl_crc32c_hw(unsigned int crc, const unsigned char *p, size_t n)
