/*
 * crc32c.h: CRC-32C (Castagnoli, the iSCSI polynomial 0x1EDC6F41, reflected
 * 0x82F63B78), the checksum of the journal's segment headers and records.
 * Vectors from RFC 3720, appendix B.4, are in tests/journal-test.c.
 */
#ifndef TPD_CRC32C_H
#define TPD_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/*
 * The CRC-32C of buf[0..len) continued from crc (0 to start): crc32c(0, "123456789", 9)
 * is 0xE3069283, and crc32c(crc32c(0, a, n), b, m) is the CRC of a then b.
 * Uses SSE4.2's crc32 instruction where the CPU has it, a table otherwise.
 * Any thread.
 */
uint32_t crc32c(uint32_t crc, const void *buf, size_t len);

/* The table version alone, for the tests (it gives the same result). */
uint32_t crc32c_sw(uint32_t crc, const void *buf, size_t len);

/* "sse4.2" or "table": what crc32c uses on this CPU. */
const char *crc32c_impl(void);

#endif
