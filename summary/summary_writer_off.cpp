// SummaryWriter in a build without protobuf (PRECIS_TENSORBOARD=OFF, or AUTO where protobuf or
// ISA-L was not found): constructing one says how to get the real one. CMake compiles this file
// instead of summary_writer.cpp and tfrecord.cpp then.
#include "core/error.h"
#include "summary/summary_writer.h"

namespace precis::summary {

struct SummaryWriter::Impl {
  std::string log_dir, path;
};

SummaryWriter::SummaryWriter(std::string log_dir, SummaryWriterOptions) {
  throw NotImplementedError(::precis::detail::str_cat(
      "SummaryWriter('", log_dir, "'): this precis was built without TensorBoard support (PRECIS_TENSORBOARD is "
      "OFF, or AUTO and protobuf or ISA-L was not found); install libprotobuf-dev protobuf-compiler libisal-dev "
      "(scripts/install-deps.sh does) and reconfigure with -DPRECIS_TENSORBOARD=ON"));
}
SummaryWriter::~SummaryWriter() = default;
void SummaryWriter::add_scalar(const std::string&, double, int64_t, std::optional<double>) {}
void SummaryWriter::add_histogram(const std::string&, const Tensor&, int64_t, int64_t, std::optional<double>) {}
void SummaryWriter::add_text(const std::string&, const std::string&, int64_t, std::optional<double>) {}
void SummaryWriter::flush() {}
void SummaryWriter::close() {}
const std::string& SummaryWriter::log_dir() const { return impl_->log_dir; }
const std::string& SummaryWriter::file_path() const { return impl_->path; }

}  // namespace precis::summary
