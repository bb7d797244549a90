#pragma once
// Reading and writing the safetensors format (https://github.com/huggingface/safetensors), the
// checkpoint format shared with PyTorch / Hugging Face:
//
//   [8 bytes: N, little-endian u64] [N bytes: JSON header, space-padded to a multiple of 8] [data]
//   header: {"__metadata__": {"k": "v"}, "name": {"dtype": "F32", "shape": [2, 3],
//            "data_offsets": [begin, end]}, ...}     (offsets relative to the start of data)
//
// Supported dtypes: F64, F32, F16, BF16, I64, I32, BOOL, F8_E4M3, F8_E5M2. Data is little-endian and row-major.
// Reading validates everything (a malformed, truncated or hostile file raises precis::IOError
// naming the file and the problem; it never crashes or yields garbage).
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tensor/tensor.h"

namespace precis {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

/// A loaded safetensors file: tensors in header order (CPU, contiguous, requires_grad false) and
/// the string metadata.
struct SafetensorsFile {
  NamedTensors tensors;  ///< (name, tensor) in header order
  std::map<std::string, std::string> metadata;  ///< the header's "__metadata__" (empty when absent)

  /// Whether a tensor called `name` is in the file.
  bool contains(const std::string& name) const;
  /// The tensor called `name`. Throws ValueError listing the closest names when there is none.
  Tensor get(const std::string& name) const;
  /// Names in header order.
  std::vector<std::string> names() const;
};

/// Writes `tensors` (any device, dtype and layout; written as contiguous CPU data) to `path`.
/// The header lists them in the given order. Names must be unique, non-empty, valid UTF-8 and not
/// "__metadata__" (ValueError otherwise). Atomic: the bytes go to "<path>.tmp.<pid>.<n>", are
/// fsync'ed and renamed over `path` (then the directory is fsync'ed), so `path` holds either the
/// old file or the complete new one, never a partial write. I/O failures raise IOError.
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});
// No std::map<std::string, Tensor> overload on purpose: it makes the natural brace call
// save_safetensors(path, {{"w", w}}) ambiguous. Pass NamedTensors(map.begin(), map.end()).

/// Reads a safetensors file. Throws IOError naming `path` when it cannot be read or is malformed.
/// Integer dtypes precis has no tensor type for are widened, every value exact: U8, I8, U16 and
/// I16 are read as i32, U32 as i64 (U64 is refused).
SafetensorsFile load_safetensors(const std::string& path);

/// In-memory variants: the exact bytes save_safetensors writes, and a reader over such bytes
/// (errors name "<memory>").
std::string to_safetensors_bytes(const NamedTensors& tensors, const std::map<std::string, std::string>& metadata = {});
SafetensorsFile from_safetensors_bytes(std::string_view bytes);

/// The safetensors dtype string ("F32", "BF16", "BOOL", ...) of a dtype, and its inverse (throws
/// ValueError for names precis has no dtype for, e.g. "U8", which load_safetensors widens).
std::string_view safetensors_dtype_name(DType dtype);
DType dtype_from_safetensors_name(std::string_view name);

}  // namespace precis
