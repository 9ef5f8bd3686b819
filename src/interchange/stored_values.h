// Parameter values as the interchange files store them. In memory a ModelState holds
// f32; a file holds f32, bf16 or f16 (kStoredDTypes), little-endian, written with
// round-to-nearest-even (core/dtype.h's convert) and widened to f32 exactly on reading.
// Shared by the safetensors and llm.c readers and writers.
#pragma once

#include "core/dtype.h"
#include "core/output_file.h"

#include <array>
#include <istream>
#include <string>
#include <vector>

namespace ndt {

inline constexpr std::array<DType, 3> kStoredDTypes = {DType::f32, DType::bf16, DType::f16};

// Whether `dtype` is one of kStoredDTypes.
bool is_stored_dtype(DType dtype);
// "f32, bf16, f16": the names of kStoredDTypes, for error messages.
std::string stored_dtype_names();

// Throws naming `destination`, the tensor, the element and its value when a value is not
// finite or would not be once stored as `dtype` (f16 above 65504 rounds to inf): a file
// never holds weights that no reader can use.
void check_storable(const std::string& destination, const std::string& tensor, const std::vector<float>& values,
                    DType dtype);

// Appends `values` to `out` as `dtype` (one of kStoredDTypes; throws otherwise).
void write_values(AtomicFile& out, const std::vector<float>& values, DType dtype);
// Reads values.size() elements stored as `dtype` from `in` into `values`; false when
// the stream ends (or fails) before all of them are read.
bool read_values(std::istream& in, DType dtype, std::vector<float>& values);

}  // namespace ndt
