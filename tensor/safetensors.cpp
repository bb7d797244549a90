#include "core/strings.h"
#include "tensor/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <numeric>
#include <set>

#include "core/checked_math.h"
#include "tensor/file_io.h"
#include "tensor/json.h"

namespace precis {

namespace {

// The reference implementation refuses headers above 100 MB; so do we, before allocating.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr const char* kMetadataKey = "__metadata__";
constexpr const char* kSupported = "F64, F32, F16, BF16, I64, I32, BOOL, F8_E4M3, F8_E5M2, and U8, I8, U16, I16, "
                                   "U32 widened";

struct DTypeName {
  DType dtype;
  const char* name;
};
constexpr DTypeName kDTypeNames[] = {{DType::f64, "F64"},  {DType::f32, "F32"}, {DType::f16, "F16"},
                                     {DType::bf16, "BF16"}, {DType::i64, "I64"}, {DType::i32, "I32"},
                                     {DType::boolean, "BOOL"}, {DType::f8_e4m3, "F8_E4M3"},
                                     {DType::f8_e5m2, "F8_E5M2"}};

// Integer dtypes precis has no tensor type for, read widened to one that holds every value
// (PyTorch checkpoints carry uint8 masks and buffers; the whole file was unloadable before).
struct WidenedName {
  const char* name;
  int bytes;
  bool is_signed;
  DType to;
};
constexpr WidenedName kWidenedNames[] = {{"U8", 1, false, DType::i32},  {"I8", 1, true, DType::i32},
                                         {"U16", 2, false, DType::i32}, {"I16", 2, true, DType::i32},
                                         {"U32", 4, false, DType::i64}};

// ---- byte order ---------------------------------------------------------------------------------
// t (i32 or i64, contiguous) = the little-endian integers of w's width in raw.
void widen_integers(const unsigned char* raw, const WidenedName& w, const Tensor& t) {
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) {
    uint64_t u = 0;
    for (int b = 0; b < w.bytes; ++b) u |= static_cast<uint64_t>(raw[i * w.bytes + b]) << (8 * b);
    int64_t v = static_cast<int64_t>(u);
    if (w.is_signed && w.bytes < 8 && (u >> (8 * w.bytes - 1)) != 0) v -= int64_t{1} << (8 * w.bytes);
    if (t.dtype() == DType::i32) t.data_ptr<int32_t>()[i] = static_cast<int32_t>(v);
    else t.data_ptr<int64_t>()[i] = v;
  }
}

void store_u64_le(uint64_t v, unsigned char* out) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<unsigned char>(v >> (8 * i));
}
uint64_t load_u64_le(const unsigned char* in) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(in[i]) << (8 * i);
  return v;
}
// Reverses the bytes of each element in place (only needed on big-endian hosts).
void swap_elements(void* data, size_t nbytes, size_t elem) {
  auto* p = static_cast<unsigned char*>(data);
  for (size_t i = 0; i + elem <= nbytes; i += elem) std::reverse(p + i, p + i + elem);
}

// ---- writing ------------------------------------------------------------------------------------
void check_names(const NamedTensors& tensors) {
  std::set<std::string_view> seen;
  for (const auto& [name, t] : tensors) {
    PRECIS_CHECK(!name.empty(), "save_safetensors: tensor names must not be empty");
    PRECIS_CHECK(name != kMetadataKey, "save_safetensors: \"", kMetadataKey,
                 "\" is reserved for metadata and cannot name a tensor");
    PRECIS_CHECK(json::is_valid_utf8(name), "save_safetensors: tensor name '", name, "' is not valid UTF-8");
    PRECIS_CHECK(seen.insert(name).second, "save_safetensors: duplicate tensor name '", name, "'");
    PRECIS_CHECK(t.defined(), "save_safetensors: tensor '", name, "' is undefined");
  }
}

void check_metadata(const std::map<std::string, std::string>& metadata) {
  for (const auto& [k, v] : metadata)
    PRECIS_CHECK(json::is_valid_utf8(k) && json::is_valid_utf8(v), "save_safetensors: metadata entry '", k,
                 "' is not valid UTF-8");
}

// The layout of a file to write: the 8-byte length plus padded header, and the order in which the
// tensors' bytes follow. The header lists tensors in the caller's order, but the data is laid out
// by decreasing element size so that every tensor starts at a multiple of its element size
// (readers that map the file without copying then see aligned data). The format allows any data
// order as long as the buffer is covered without gaps.
struct Layout {
  std::string prefix;                // length + header
  std::vector<size_t> data_order;    // indices into the tensors
  uint64_t data_bytes = 0;
};

Layout plan(const NamedTensors& tensors, const std::map<std::string, std::string>& metadata) {
  check_names(tensors);
  check_metadata(metadata);
  Layout layout;
  layout.data_order.resize(tensors.size());
  std::iota(layout.data_order.begin(), layout.data_order.end(), size_t{0});
  std::stable_sort(layout.data_order.begin(), layout.data_order.end(), [&](size_t a, size_t b) {
    return tensors[a].second.element_size() > tensors[b].second.element_size();
  });
  std::vector<std::pair<uint64_t, uint64_t>> offsets(tensors.size());
  for (size_t i : layout.data_order) {
    const uint64_t n = static_cast<uint64_t>(tensors[i].second.numel()) * tensors[i].second.element_size();
    offsets[i] = {layout.data_bytes, layout.data_bytes + n};
    layout.data_bytes += n;
  }

  std::string header = "{";
  if (!metadata.empty()) {
    json::append_quoted(header, kMetadataKey);
    header += ":{";
    bool first = true;
    for (const auto& [k, v] : metadata) {
      if (!first) header += ',';
      first = false;
      json::append_quoted(header, k);
      header += ':';
      json::append_quoted(header, v);
    }
    header += '}';
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i].second;
    if (header.size() > 1) header += ',';
    json::append_quoted(header, tensors[i].first);
    header += ":{\"dtype\":\"";
    header += safetensors_dtype_name(t.dtype());
    header += "\",\"shape\":[";
    for (int64_t d = 0; d < t.dim(); ++d) {
      if (d > 0) header += ',';
      header += std::to_string(t.sizes()[d]);
    }
    header += "],\"data_offsets\":[" + std::to_string(offsets[i].first) + "," + std::to_string(offsets[i].second) +
              "]}";
  }
  header += '}';
  // Pad with spaces so the data starts 8-byte aligned in the file (as the reference writer does).
  header.append((8 - header.size() % 8) % 8, ' ');
  PRECIS_CHECK(header.size() <= kMaxHeaderBytes, "save_safetensors: the header would be ", header.size(),
               " bytes, over the format's limit of ", kMaxHeaderBytes, " (too many tensors or too much metadata)");

  layout.prefix.resize(8);
  store_u64_le(header.size(), reinterpret_cast<unsigned char*>(layout.prefix.data()));
  layout.prefix += header;
  return layout;
}

// t's elements in row-major order as host bytes, without a kernel (the tensor layer runs none):
// the storage span t covers is copied to the host by its allocator (a device copy for CUDA), then
// gathered with t's strides. A contiguous CPU tensor is passed through without a copy.
struct HostBytes {
  const char* data = nullptr;
  size_t size = 0;
  std::string owned;
};
HostBytes host_bytes(const Tensor& t) {
  HostBytes out;
  const size_t elem = t.element_size();
  out.size = static_cast<size_t>(t.numel()) * elem;
  if (out.size == 0) return out;
  if (t.device().is_cpu() && t.is_contiguous()) {
    out.data = static_cast<const char*>(t.data_ptr());
    return out;
  }
  // Views have non-negative strides (flip and friends copy), so the span is [0, last] elements.
  int64_t last = 0;
  for (int64_t d = 0; d < t.dim(); ++d) last += (t.sizes()[d] - 1) * t.strides()[d];
  const size_t span = static_cast<size_t>(last + 1) * elem;
  std::string raw(span, '\0');
  allocator_for(t.device()).copy_to_host(raw.data(), t.data_ptr(), span);
  out.owned.resize(out.size);
  const Shape& sizes = t.sizes();
  const Shape& strides = t.strides();
  Shape index(sizes.size(), 0);
  for (size_t k = 0; k < out.size; k += elem) {
    int64_t at = 0;
    for (size_t d = 0; d < sizes.size(); ++d) at += index[d] * strides[d];
    std::memcpy(out.owned.data() + k, raw.data() + static_cast<size_t>(at) * elem, elem);
    for (size_t d = sizes.size(); d-- > 0;) {  // odometer: advance the row-major index
      if (++index[d] < sizes[d]) break;
      index[d] = 0;
    }
  }
  out.data = out.owned.data();
  return out;
}

// Streams the file: one contiguous host copy at a time, so saving needs little extra memory.
void emit(const NamedTensors& tensors, const Layout& layout, const ByteSink& sink) {
  sink(layout.prefix.data(), layout.prefix.size());
  for (size_t i : layout.data_order) {
    const Tensor& t = tensors[i].second;
    HostBytes b = host_bytes(t);
    if (b.size == 0) continue;
    if constexpr (std::endian::native == std::endian::little) {
      sink(b.data, b.size);
    } else {
      std::string le(b.data, b.size);
      swap_elements(le.data(), b.size, t.element_size());
      sink(le.data(), b.size);
    }
  }
}

// ---- reading ------------------------------------------------------------------------------------
struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin;
  uint64_t end;
  const WidenedName* widened = nullptr;  // stored as this narrower integer, read as `dtype`
};

struct Header {
  std::vector<Entry> entries;
  std::map<std::string, std::string> metadata;
};

template <typename... Args>
[[noreturn]] void fail(const std::string& what, const Args&... args) {
  throw IOError(detail::str_cat(what, ": ", args...));
}

// A non-negative JSON integer, or an IOError saying which field of which tensor is wrong.
uint64_t non_negative_integer(const json::Value& v, const std::string& what, const std::string& name,
                              const char* field) {
  if (v.kind == json::Value::Kind::number && !v.is_integer && v.text[0] != '-' &&
      v.text.find_first_of(".eE") == std::string::npos)
    fail(what, "tensor '", name, "': ", field, " holds ", v.text, ", larger than the largest size precis reads (",
         std::numeric_limits<int64_t>::max(), "); the file is corrupt");
  if (v.kind != json::Value::Kind::number || !v.is_integer || v.integer < 0)
    fail(what, "tensor '", name, "': ", field, " must hold non-negative integers, found ", json::kind_name(v));
  return static_cast<uint64_t>(v.integer);
}

Entry parse_entry(const std::string& name, const json::Value& v, uint64_t buffer_bytes, const std::string& what) {
  using Kind = json::Value::Kind;
  if (v.kind != Kind::object) fail(what, "tensor '", name, "': expected an object, found ", json::kind_name(v));
  Entry e{name, DType::f32, {}, 0, 0};

  const json::Value* dtype = v.find("dtype");
  if (dtype == nullptr || dtype->kind != Kind::string)
    fail(what, "tensor '", name, "': missing or non-string \"dtype\"");
  bool known = false;
  for (const auto& d : kDTypeNames) {
    if (dtype->string == d.name) {
      e.dtype = d.dtype;
      known = true;
    }
  }
  for (const auto& w : kWidenedNames) {
    if (dtype->string == w.name) {
      e.dtype = w.to;
      e.widened = &w;
      known = true;
    }
  }
  if (!known) fail(what, "tensor '", name, "': unsupported dtype \"", dtype->string, "\" (precis reads ", kSupported, ")");

  const json::Value* shape = v.find("shape");
  if (shape == nullptr || shape->kind != Kind::array) fail(what, "tensor '", name, "': missing or non-array \"shape\"");
  for (const json::Value& d : shape->array)
    e.shape.push_back(static_cast<int64_t>(non_negative_integer(d, what, name, "shape")));
  // The checks of the tensor constructor, so that a shape accepted here is accepted there.
  const std::optional<int64_t> numel = checked_numel(e.shape);
  if (!numel) fail(what, "tensor '", name, "': shape ", shape_str(e.shape), " has more elements than fit in 64 bits");

  const json::Value* offsets = v.find("data_offsets");
  if (offsets == nullptr || offsets->kind != Kind::array || offsets->array.size() != 2)
    fail(what, "tensor '", name, "': \"data_offsets\" must be an array [begin, end]");
  e.begin = non_negative_integer(offsets->array[0], what, name, "data_offsets");
  e.end = non_negative_integer(offsets->array[1], what, name, "data_offsets");
  if (e.end < e.begin) fail(what, "tensor '", name, "': data_offsets [", e.begin, ", ", e.end, "] end before they begin");
  if (e.end > buffer_bytes)
    fail(what, "tensor '", name, "': data_offsets [", e.begin, ", ", e.end, "] reach past the end of the data (",
         buffer_bytes, " bytes); the file is truncated or corrupt");
  const std::optional<uint64_t> nbytes =
      checked_nbytes(*numel, e.widened != nullptr ? static_cast<size_t>(e.widened->bytes) : element_size(e.dtype));
  if (!nbytes || *nbytes != e.end - e.begin)
    fail(what, "tensor '", name, "': shape ", shape_str(e.shape), " of ", dtype->string, " needs ",
         nbytes ? std::to_string(*nbytes) : "more than " + std::to_string(kMaxAllocationBytes),
         " bytes but data_offsets [", e.begin, ", ", e.end, "] span ", e.end - e.begin);
  return e;
}

Header parse_header(std::string_view text, uint64_t buffer_bytes, const std::string& what) {
  const json::Value root = json::parse(text, what);
  if (root.kind != json::Value::Kind::object) fail(what, "the header must be a JSON object, found ", json::kind_name(root));
  Header h;
  for (const auto& [key, v] : root.object) {
    if (key == kMetadataKey) {
      if (v.kind != json::Value::Kind::object) fail(what, "\"", kMetadataKey, "\" must be an object of strings");
      for (const auto& [mk, mv] : v.object) {
        if (mv.kind != json::Value::Kind::string)
          fail(what, "metadata value for '", mk, "' must be a string, found ", json::kind_name(mv));
        h.metadata[mk] = mv.string;
      }
      continue;
    }
    h.entries.push_back(parse_entry(key, v, buffer_bytes, what));
  }

  // The data must be covered exactly: sorted by offset, each tensor starts where the previous
  // ends (the reference reader rejects gaps, overlaps and trailing bytes alike).
  std::vector<const Entry*> by_offset;
  for (const Entry& e : h.entries) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(), [](const Entry* a, const Entry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t expected = 0;
  const Entry* prev = nullptr;
  for (const Entry* e : by_offset) {
    if (e->begin < expected)
      fail(what, "tensors '", prev->name, "' [", prev->begin, ", ", prev->end, ") and '", e->name, "' [", e->begin, ", ",
           e->end, ") overlap");
    if (e->begin > expected)
      fail(what, "bytes [", expected, ", ", e->begin, ") of the data belong to no tensor (a gap before '", e->name,
           "')");
    expected = e->end;
    prev = e;
  }
  if (expected != buffer_bytes)
    fail(what, "the file has ", buffer_bytes - expected, " bytes after the last tensor's data (expected ", expected,
         " data bytes, found ", buffer_bytes, ")");
  return h;
}

using ReadAt = std::function<void(uint64_t offset, void* dst, size_t n)>;

// Reads the header first and validates it completely against the total size, then gives each
// tensor its own allocation and reads its bytes straight into it. Each tensor owning its storage
// (rather than all being views of one file-sized buffer) means: no second copy of the file in
// memory, every tensor is aligned by the allocator (offsets in the file need not be), and keeping
// one tensor of a checkpoint alive does not pin the whole file's memory.
SafetensorsFile read_safetensors(uint64_t total, const ReadAt& read_at, const std::string& what) {
  if (total < 8) fail(what, "file is ", total, " bytes, shorter than the 8-byte header length; not a safetensors file");
  unsigned char len_bytes[8];
  read_at(0, len_bytes, 8);
  const uint64_t n = load_u64_le(len_bytes);
  if (n > kMaxHeaderBytes)
    fail(what, "header length ", n, " exceeds the format's limit of ", kMaxHeaderBytes,
         " bytes; not a safetensors file or corrupt");
  if (n > total - 8)
    fail(what, "header length ", n, " is larger than the rest of the file (", total - 8,
         " bytes); the file is truncated or not a safetensors file");
  std::string text(n, '\0');
  read_at(8, text.data(), n);
  Header h = parse_header(text, total - 8 - n, what);

  SafetensorsFile out;
  out.metadata = std::move(h.metadata);
  out.tensors.reserve(h.entries.size());
  const uint64_t data_start = 8 + n;
  for (Entry& e : h.entries) {
    Tensor t = detail::new_contiguous(e.shape, e.dtype, Device::cpu());
    const size_t nbytes = static_cast<size_t>(e.end - e.begin);
    if (e.widened != nullptr) {
      std::vector<unsigned char> raw(nbytes);
      if (nbytes > 0) read_at(data_start + e.begin, raw.data(), nbytes);
      widen_integers(raw.data(), *e.widened, t);
      out.tensors.emplace_back(std::move(e.name), std::move(t));
      continue;
    }
    if (nbytes > 0) read_at(data_start + e.begin, t.data_ptr(), nbytes);
    if constexpr (std::endian::native != std::endian::little) swap_elements(t.data_ptr(), nbytes, t.element_size());
    if (e.dtype == DType::boolean) {
      // A bool holding anything but 0 or 1 is undefined behaviour in C++: reject it.
      const auto* b = static_cast<const unsigned char*>(t.data_ptr());
      for (size_t i = 0; i < nbytes; ++i)
        if (b[i] > 1) fail(what, "tensor '", e.name, "': BOOL element ", i, " holds byte ", int{b[i]}, " (not 0 or 1)");
    }
    out.tensors.emplace_back(std::move(e.name), std::move(t));
  }
  return out;
}


}  // namespace

// ---- public API ---------------------------------------------------------------------------------
std::string_view safetensors_dtype_name(DType dtype) {
  for (const auto& d : kDTypeNames)
    if (d.dtype == dtype) return d.name;
  PRECIS_INTERNAL_ASSERT(false, "dtype without a safetensors name");
  return "";
}

DType dtype_from_safetensors_name(std::string_view name) {
  for (const auto& d : kDTypeNames)
    if (name == d.name) return d.dtype;
  throw ValueError(detail::str_cat("unsupported safetensors dtype \"", name, "\"; precis reads ", kSupported));
}

bool SafetensorsFile::contains(const std::string& name) const {
  return std::any_of(tensors.begin(), tensors.end(), [&](const auto& p) { return p.first == name; });
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  for (const auto& p : tensors) out.push_back(p.first);
  return out;
}

Tensor SafetensorsFile::get(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return t;
  // Suggest the closest names: within a third of the name's length, at most three.
  std::vector<std::pair<size_t, std::string_view>> close;
  for (const auto& p : tensors) {
    const size_t d = edit_distance(name, p.first);
    if (d <= std::max<size_t>(2, name.size() / 3)) close.emplace_back(d, p.first);
  }
  std::stable_sort(close.begin(), close.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::string hint;
  for (size_t i = 0; i < std::min<size_t>(close.size(), 3); ++i)
    hint += std::string(i ? ", '" : "'") + std::string(close[i].second) + "'";
  throw ValueError(detail::str_cat("safetensors: no tensor named '", name, "' among ", tensors.size(), " tensors",
                                   hint.empty() ? std::string() : "; did you mean " + hint + "?"));
}

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  const Layout layout = plan(tensors, metadata);
  write_file_atomic(path, [&](const ByteSink& sink) { emit(tensors, layout, sink); });
}

std::string to_safetensors_bytes(const NamedTensors& tensors, const std::map<std::string, std::string>& metadata) {
  const Layout layout = plan(tensors, metadata);
  std::string out;
  out.reserve(layout.prefix.size() + layout.data_bytes);
  emit(tensors, layout, [&](const void* p, size_t n) { out.append(static_cast<const char*>(p), n); });
  return out;
}

SafetensorsFile load_safetensors(const std::string& path) {
  const ReadOnlyFile file(path);
  return read_safetensors(
      file.size(), [&](uint64_t off, void* dst, size_t n) { file.read_at(off, dst, n); }, "safetensors file '" + path + "'");
}

SafetensorsFile from_safetensors_bytes(std::string_view bytes) {
  return read_safetensors(
      bytes.size(), [&](uint64_t off, void* dst, size_t n) { std::memcpy(dst, bytes.data() + off, n); }, "safetensors <memory>");
}

}  // namespace precis
