/*
 * dtype.h - element types, named as safetensors names them.
 *
 * The enum order is the safetensors writer's order (increasing alignment):
 * its serializer sorts tensors by this order, descending, then by name, and
 * the safetensors view reproduces that exactly (see view/safetensors.c).
 */
#ifndef US_DTYPE_H
#define US_DTYPE_H

#include <stdbool.h>
#include <stdint.h>

enum us_dtype {
	US_DT_BOOL,
	US_DT_F4,
	US_DT_F6_E2M3,
	US_DT_F6_E3M2,
	US_DT_U8,
	US_DT_I8,
	US_DT_F8_E5M2,
	US_DT_F8_E4M3,
	US_DT_F8_E8M0,
	US_DT_F8_E4M3FNUZ,
	US_DT_F8_E5M2FNUZ,
	US_DT_I16,
	US_DT_U16,
	US_DT_F16,
	US_DT_BF16,
	US_DT_I32,
	US_DT_U32,
	US_DT_F32,
	US_DT_C64,
	US_DT_F64,
	US_DT_I64,
	US_DT_U64,
	US_DT_COUNT
};

/* us_dtype_name - the safetensors spelling ("F32", "BF16", ...). */
const char *us_dtype_name(enum us_dtype dt);
/* us_dtype_bits - bits per element (4 and 6 for the sub-byte float types). */
unsigned us_dtype_bits(enum us_dtype dt);
/* us_dtype_from_name - parse the safetensors spelling; false if unknown. */
bool us_dtype_from_name(const char *name, enum us_dtype *out);

#endif /* US_DTYPE_H */
