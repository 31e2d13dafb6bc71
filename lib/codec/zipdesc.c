/* zipdesc.c - zip data descriptors. */
#include "zipdesc.h"

#include "le.h"

#define SIG_DESC 0x08074b50u

enum us_status us_zip_desc_size(const unsigned char d[24], uint64_t *size)
{
	if (us_le(d, 4) != SIG_DESC)
		return US_E_FORMAT;
	/* The 8-byte form first: read as the 4-byte one, a size whose two
	 * halves are equal would pass; the other way round, the next
	 * record's signature never equals a stated size. */
	if (us_le(d + 8, 8) == us_le(d + 16, 8)) {
		*size = us_le(d + 8, 8);
		return US_OK;
	}
	if (us_le(d + 8, 4) == us_le(d + 12, 4)) {
		*size = us_le(d + 8, 4);
		return US_OK;
	}
	return US_E_FORMAT;
}

enum us_status us_zip_desc_check(const unsigned char d[24], uint64_t size,
				 uint32_t crc)
{
	uint64_t stated;
	uint32_t want = (uint32_t)us_le(d + 4, 4);

	if (us_zip_desc_size(d, &stated) != US_OK || stated != size)
		return US_E_FORMAT;
	return want == 0 || want == crc ? US_OK : US_E_FORMAT;
}
