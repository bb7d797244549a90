// write_file_atomic's fault hook (each system call in order, failed in turn, leaves the old file
// and no temporary) and its gathering of small pieces into few write calls.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/error.h"
#include "tensor/file_io.h"
#include "tests/support/scratch_dir.h"

namespace precis {
namespace {

namespace fs = std::filesystem;

// A scratch folder; also uninstalls a test's fault hook at scope exit.
struct Scratch : testing::ScratchDir {
  Scratch() : ScratchDir("file-io") {}
  ~Scratch() { set_file_fault_hook(nullptr); }
};

std::string contents(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Writes `pieces` through write_file_atomic.
void write_pieces(const std::string& path, const std::vector<std::string>& pieces) {
  write_file_atomic(path, [&](const ByteSink& sink) {
    for (const std::string& p : pieces) sink(p.data(), p.size());
  });
}

TEST_CASE("write_file_atomic calls the fault hook before each system call, in order", "[tensor][file_io]") {
  Scratch s;
  const std::string path = (s.path() / "f.bin").string();
  std::vector<FileOp> ops;
  set_file_fault_hook([&](FileOp op, const std::string&) {
    ops.push_back(op);
    return 0;
  });
  // 300 small pieces and one of 3 MiB: the small ones are gathered, the large one goes alone.
  std::vector<std::string> pieces(300, std::string(100, 'a'));
  pieces.push_back(std::string(3 << 20, 'b'));
  pieces.push_back("tail");
  write_pieces(path, pieces);
  set_file_fault_hook(nullptr);
  REQUIRE(ops == std::vector<FileOp>{FileOp::create, FileOp::write, FileOp::write, FileOp::write, FileOp::fsync,
                                     FileOp::close, FileOp::rename, FileOp::open_dir, FileOp::fsync_dir});
  std::string expected;
  for (const std::string& p : pieces) expected += p;
  REQUIRE(contents(path) == expected);
  REQUIRE(std::string(file_op_name(FileOp::fsync_dir)) == "fsync_dir");
}

TEST_CASE("a failure injected at any system call leaves the old file and no temporary", "[tensor][file_io]") {
  Scratch s;
  const std::string path = (s.path() / "f.bin").string();
  write_pieces(path, {"old"});
  const std::vector<std::string> pieces{std::string(100, 'x'), std::string(2 << 20, 'y')};
  for (int n = 1; n <= 8; ++n) {  // create, 2 writes, fsync, close, rename, open_dir, fsync_dir
    INFO("failing call " << n);
    int calls = 0;
    set_file_fault_hook([&](FileOp, const std::string&) { return ++calls == n ? ENOSPC : 0; });
    std::string message;
    try {
      write_pieces(path, pieces);
    } catch (const IOError& e) {
      message = e.what();
    }
    set_file_fault_hook(nullptr);
    REQUIRE_THAT(message, Catch::Matchers::Contains(std::strerror(ENOSPC)));
    REQUIRE(s.entries() == std::vector<std::string>{"f.bin"});
    // Before the rename the old file is untouched; after it the new one is complete.
    REQUIRE(contents(path) == (n <= 6 ? std::string("old") : pieces[0] + pieces[1]));
    write_pieces(path, {"old"});
  }
}

}  // namespace
}  // namespace precis
