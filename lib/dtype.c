/* dtype.c - the dtype table. */
#include "dtype.h"

#include <string.h>

static const struct {
	const char *name;
	unsigned bits;
} dtypes[US_DT_COUNT] = {
	[US_DT_BOOL] = {"BOOL", 8},       [US_DT_F4] = {"F4", 4},
	[US_DT_F6_E2M3] = {"F6_E2M3", 6}, [US_DT_F6_E3M2] = {"F6_E3M2", 6},
	[US_DT_U8] = {"U8", 8},           [US_DT_I8] = {"I8", 8},
	[US_DT_F8_E5M2] = {"F8_E5M2", 8}, [US_DT_F8_E4M3] = {"F8_E4M3", 8},
	[US_DT_F8_E8M0] = {"F8_E8M0", 8},
	[US_DT_F8_E4M3FNUZ] = {"F8_E4M3FNUZ", 8},
	[US_DT_F8_E5M2FNUZ] = {"F8_E5M2FNUZ", 8},
	[US_DT_I16] = {"I16", 16},
	[US_DT_U16] = {"U16", 16},        [US_DT_F16] = {"F16", 16},
	[US_DT_BF16] = {"BF16", 16},      [US_DT_I32] = {"I32", 32},
	[US_DT_U32] = {"U32", 32},        [US_DT_F32] = {"F32", 32},
	[US_DT_C64] = {"C64", 64},        [US_DT_F64] = {"F64", 64},
	[US_DT_I64] = {"I64", 64},        [US_DT_U64] = {"U64", 64},
};

const char *us_dtype_name(enum us_dtype dt)
{
	return (unsigned)dt < US_DT_COUNT ? dtypes[dt].name : "?";
}

unsigned us_dtype_bits(enum us_dtype dt)
{
	return (unsigned)dt < US_DT_COUNT ? dtypes[dt].bits : 0;
}

bool us_dtype_from_name(const char *name, enum us_dtype *out)
{
	for (unsigned i = 0; i < US_DT_COUNT; i++) {
		if (strcmp(dtypes[i].name, name) == 0) {
			*out = (enum us_dtype)i;
			return true;
		}
	}
	return false;
}
