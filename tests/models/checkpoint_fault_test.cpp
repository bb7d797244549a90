// Checkpoints survive failures of the writer: each system call of a checkpoint write (every
// write, the fsync, close, rename, the folder's open and fsync, the removal of an old checkpoint)
// is failed in turn through tensor/file_io.h's fault hook; a real full disk (a small tmpfs, when
// this process may mount one, else an injected ENOSPC) and a read-only folder. In every case: the
// error says what happened, no temporary or partial file is left or taken for a checkpoint, the
// previous checkpoint loads, and resuming from the folder ends bit for bit where the
// uninterrupted run ends.
#include <catch2/catch.hpp>

#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>

#include "core/error.h"
#include "tensor/file_io.h"
#include "tests/models/train_support.h"

using namespace precis;
using namespace precis::train_testing;

namespace {

// Installs a fault hook for its scope: it records every file operation and fails the n-th
// (1-based; 0: none) with `err`.
class FaultHook {
 public:
  explicit FaultHook(long fail_at = 0, int err = EIO) : fail_at_(fail_at), err_(err) {
    set_file_fault_hook([this](FileOp op, const std::string& path) {
      ops.emplace_back(op, path);
      return static_cast<long>(ops.size()) == fail_at_ ? err_ : 0;
    });
  }
  ~FaultHook() { set_file_fault_hook(nullptr); }
  FaultHook(const FaultHook&) = delete;
  FaultHook& operator=(const FaultHook&) = delete;
  std::vector<std::pair<FileOp, std::string>> ops;

 private:
  long fail_at_;
  int err_;
};

bool has_temporaries(const std::string& dir) {
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().find(".tmp.") != std::string::npos) return true;
  return false;
}

// Every file list_checkpoints offers loads and verifies; returns how many there are.
size_t all_checkpoints_load(const std::string& dir) {
  const std::vector<std::string> files = train::list_checkpoints(dir);
  for (const std::string& f : files) {
    INFO(f);
    REQUIRE_NOTHROW(train::load_checkpoint(f));
  }
  return files.size();
}

// ResNet-20 (width 4), bf16, a checkpoint after every step (keep 2), one epoch of 6 steps.
train::TrainOptions fault_run(const std::string& data, const std::string& ckpt) {
  train::TrainOptions o = tiny_resnet(data, ckpt);
  o.precision = DType::bf16;
  o.epochs = 1;
  o.checkpoint_every = 1;
  o.keep = 2;
  return o;
}

// Resumes `o` from its folder and checks it ends where the uninterrupted run ended.
void resume_matches(train::TrainOptions o, const std::string& reference_final) {
  o.resume = true;
  o.stop_after_steps = 0;
  std::ostringstream log;
  const train::TrainSummary s = train::train(o, log);
  REQUIRE(s.steps == 6);
  require_same_state(s.last_checkpoint, reference_final);
}

std::string errno_text(int err) { return std::strerror(err); }

}  // namespace

TEST_CASE("checkpoint writes failed at each system call leave the previous checkpoint", "[train][faults]") {
  TempDir dir("faults");
  const std::string data = image_data(dir);
  std::ostringstream log;
  const train::TrainSummary reference = train::train(fault_run(data, dir / "reference"), log);

  // Which file operations the checkpoint of step 3 makes (steps 1 and 2 exist; it also removes
  // step 1's file, --keep 2).
  train::TrainOptions o = fault_run(data, dir / "trace");
  o.stop_after_steps = 3;
  std::vector<std::pair<FileOp, std::string>> ops;
  {
    FaultHook trace;
    train::train(o, log);
    ops = trace.ops;
  }
  size_t first = 0;
  while (first < ops.size() && ops[first].second.find("step-000000003") == std::string::npos) ++first;
  REQUIRE(first < ops.size());
  REQUIRE(ops[first].first == FileOp::create);
  REQUIRE(ops.back().first == FileOp::remove);
  const size_t count = ops.size() - first;
  INFO("the checkpoint of step 3 makes " << count << " file operations");
  REQUIRE(count >= 8);  // create, writes, fsync, close, rename, open_dir, fsync_dir, remove

  int resumed = 0;
  for (size_t i = first; i < ops.size(); ++i) {
    const FileOp op = ops[i].first;
    const int err = op == FileOp::write ? ENOSPC : EIO;
    INFO("failing operation " << i + 1 << ": " << file_op_name(op) << " " << ops[i].second << " with "
                              << errno_text(err));
    o.checkpoint_dir = dir / ("fail-" + std::to_string(i));
    std::string message;
    {
      FaultHook fail(static_cast<long>(i + 1), err);
      try {
        train::train(o, log);
      } catch (const IOError& e) {
        message = e.what();
      }
    }
    REQUIRE_FALSE(has_temporaries(o.checkpoint_dir));
    const size_t files = all_checkpoints_load(o.checkpoint_dir);
    const std::string latest = train::latest_checkpoint(o.checkpoint_dir).value_or("");
    if (op == FileOp::remove) {
      // Not an error: the old checkpoint stays one save longer.
      REQUIRE(message.empty());
      REQUIRE(files == 3);
      REQUIRE(latest == train::checkpoint_path(o.checkpoint_dir, 3));
    } else {
      INFO(message);
      REQUIRE_THAT(message, Catch::Matchers::Contains("cannot write the checkpoint of step 3") &&
                                Catch::Matchers::Contains(errno_text(err)));
      const bool after_rename = op == FileOp::open_dir || op == FileOp::fsync_dir;
      REQUIRE(latest == train::checkpoint_path(o.checkpoint_dir, after_rename ? 3 : 2));
      if (after_rename) {
        REQUIRE_THAT(message, Catch::Matchers::Contains("renamed into place"));
      } else {
        REQUIRE_THAT(message, Catch::Matchers::Contains("previous checkpoint '" +
                                                        train::checkpoint_path(o.checkpoint_dir, 2) + "' is intact"));
      }
      const char* says = op == FileOp::create   ? "cannot create the temporary file"
                         : op == FileOp::write  ? "write failed"
                         : op == FileOp::fsync  ? "fsync failed"
                         : op == FileOp::close  ? "close failed"
                         : op == FileOp::rename ? "cannot rename"
                         : op == FileOp::open_dir ? "cannot open the directory"
                                                  : "fsync failed for the directory";
      REQUIRE_THAT(message, Catch::Matchers::Contains(says));
    }
    // Resuming from what is left ends bit for bit where the uninterrupted run ended (for each
    // kind of operation and for the first, a middle and the last write: the writes differ only
    // in how much of the temporary file existed).
    const bool write = op == FileOp::write;
    const bool edge_write = write && (ops[i - 1].first != FileOp::write || ops[i + 1].first != FileOp::write ||
                                      i == first + count / 2);
    if (!write || edge_write) {
      resume_matches(o, reference.last_checkpoint);
      ++resumed;
    }
  }
  std::cout << "checkpoint faults: " << count << " file operations of one checkpoint failed in turn, 0 lost; "
            << resumed << " of them resumed to the uninterrupted run's final state" << std::endl;
}

namespace {

// A tmpfs of `bytes` mounted on `dir` for its scope, when this process may mount (root with
// CAP_SYS_ADMIN); `mounted` says whether it worked and `why` why not.
struct SmallDisk {
  std::string dir;
  bool mounted = false;
  std::string why;
  SmallDisk(std::string d, uint64_t bytes) : dir(std::move(d)) {
    fs::create_directories(dir);
    const std::string opts = "size=" + std::to_string(bytes) + ",mode=0755";
    if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, opts.c_str()) == 0) {
      mounted = true;
    } else {
      why = errno_text(errno);
    }
  }
  // Remounts with new flags and size (MS_RDONLY for a read-only folder).
  bool remount(unsigned long flags, uint64_t bytes) {
    const std::string opts = "size=" + std::to_string(bytes);
    return ::mount("tmpfs", dir.c_str(), "tmpfs", MS_REMOUNT | flags, opts.c_str()) == 0;
  }
  ~SmallDisk() {
    if (mounted) ::umount2(dir.c_str(), MNT_DETACH);
  }
};

void say_not_run(const std::string& what, const std::string& why) {
  const std::string line = "NOT RUN: " + what + " (" + why + "); the injected-error variant ran instead";
  WARN(line);
  std::cerr << "checkpoint_fault_test: " << line << std::endl;
}

}  // namespace

TEST_CASE("a full disk fails the checkpoint with a message, keeps the previous one, and resumes", "[train][faults]") {
  TempDir dir("disk");
  const std::string data = image_data(dir);
  std::ostringstream log;
  const train::TrainSummary reference = train::train(fault_run(data, dir / "reference"), log);
  const uint64_t file_bytes = fs::file_size(reference.last_checkpoint);

  // Room for two checkpoints and half of a third: the save of step 3 (two files kept plus its
  // temporary file) runs out of space.
  SmallDisk disk(dir / "small", file_bytes * 5 / 2);
  train::TrainOptions o = fault_run(data, disk.dir + "/ckpt");
  std::string message;
  if (disk.mounted) {
    message = error_of<IOError>([&] { train::train(o, log); });
  } else {
    say_not_run("a real full disk: mounting a small tmpfs", disk.why);
    // The write that would not fit: the third checkpoint's first data write.
    long n = 0, fail_at = 0;
    set_file_fault_hook([&](FileOp op, const std::string& path) {
      ++n;
      if (fail_at == 0 && op == FileOp::write && path.find("step-000000003") != std::string::npos) fail_at = n + 1;
      return n == fail_at ? ENOSPC : 0;
    });
    message = error_of<IOError>([&] { train::train(o, log); });
    set_file_fault_hook(nullptr);
  }
  INFO(message);
  REQUIRE_THAT(message, Catch::Matchers::Contains("cannot write the checkpoint of step 3") &&
                            Catch::Matchers::Contains(errno_text(ENOSPC)) &&
                            Catch::Matchers::Contains("step-000000002.safetensors' is intact"));
  if (disk.mounted) REQUIRE_THAT(message, Catch::Matchers::Contains("The disk is full"));
  REQUIRE_FALSE(has_temporaries(o.checkpoint_dir));
  REQUIRE(all_checkpoints_load(o.checkpoint_dir) == 2);
  // Space freed (the tmpfs grown), the run resumes from the folder and ends where the
  // uninterrupted run ended.
  if (disk.mounted) REQUIRE(disk.remount(0, file_bytes * 8));
  resume_matches(o, reference.last_checkpoint);
}

TEST_CASE("a read-only checkpoint folder fails with a message and keeps the previous checkpoint", "[train][faults]") {
  TempDir dir("readonly");
  const std::string data = image_data(dir);
  std::ostringstream log;
  const train::TrainSummary reference = train::train(fault_run(data, dir / "reference"), log);

  SmallDisk disk(dir / "ro", fs::file_size(reference.last_checkpoint) * 8);
  const std::string folder = disk.mounted ? disk.dir : dir / "plain";
  train::TrainOptions o = fault_run(data, folder + "/ckpt");
  o.stop_after_steps = 2;
  train::train(o, log);
  o.stop_after_steps = 0;
  o.resume = true;

  // Read-only: a read-only remount (root), or permissions (other users; root ignores them), else
  // an injected EROFS.
  const uint64_t size = fs::file_size(reference.last_checkpoint) * 8;
  std::string how;
  if (disk.mounted && disk.remount(MS_RDONLY, size) && disk.remount(0, size)) {
    how = "read-only mount";
  } else if (::geteuid() != 0) {
    how = "mode 0500";
  } else {
    say_not_run("a read-only folder: neither a read-only mount nor permissions are possible here",
                disk.mounted ? "remount failed" : disk.why);
  }
  auto make_read_only = [&] {
    if (how == "read-only mount") REQUIRE(disk.remount(MS_RDONLY, size));
    if (how == "mode 0500") fs::permissions(o.checkpoint_dir, fs::perms::owner_read | fs::perms::owner_exec);
  };
  auto make_writable = [&] {
    if (how == "read-only mount") REQUIRE(disk.remount(0, size));
    if (how == "mode 0500") fs::permissions(o.checkpoint_dir, fs::perms::owner_all);
  };
  INFO(how);
  if (!how.empty()) {
    // Read-only when the run starts: refused before any data is read (models/train/outputs.h).
    make_read_only();
    const std::string early = error_of<IOError>([&] { train::train(o, log); });
    make_writable();
    INFO(early);
    REQUIRE_THAT(early, Catch::Matchers::Contains("--checkpoint " + o.checkpoint_dir) &&
                            Catch::Matchers::Contains(how == "read-only mount" ? "Read-only file system"
                                                                               : "Permission denied"));
    REQUIRE(all_checkpoints_load(o.checkpoint_dir) == 2);
  }
  // Read-only from step 3 on (made so at its gradient-ready point, so the save after it fails).
  train::TrainHooks hooks;
  hooks.gradients_ready = [&](const train::GradientsReady& g) {
    if (g.step == 3) make_read_only();
  };
  if (how.empty()) set_file_fault_hook([](FileOp op, const std::string&) { return op == FileOp::create ? EROFS : 0; });
  const std::string message = error_of<IOError>([&] { train::train(o, log, hooks); });
  if (how.empty()) set_file_fault_hook(nullptr);
  INFO(message);
  REQUIRE_THAT(message, Catch::Matchers::Contains("cannot write the checkpoint of step 3") &&
                            Catch::Matchers::Contains("cannot create the temporary file") &&
                            Catch::Matchers::Contains("step-000000002.safetensors' is intact"));
  if (how == "read-only mount") REQUIRE_THAT(message, Catch::Matchers::Contains("read-only file system"));
  if (how == "mode 0500") REQUIRE_THAT(message, Catch::Matchers::Contains("not writable"));
  REQUIRE(all_checkpoints_load(o.checkpoint_dir) == 2);
  // Writable again, the run resumes (from step 2: it stopped before any new checkpoint) and ends
  // where the uninterrupted run ended.
  make_writable();
  resume_matches(o, reference.last_checkpoint);
}

TEST_CASE("temporary files of killed writers are removed by the next save and never listed", "[train][faults]") {
  TempDir dir("stale");
  const std::string ckpt = dir / "ckpt";
  fs::create_directories(ckpt);
  // A dead writer's leftover (pid 2^22 + 1 is above Linux's pid_max default) and a live one's
  // (this process's parent).
  const std::string dead = ckpt + "/step-000000007.safetensors.tmp.4194305.0";
  const std::string live = ckpt + "/step-000000007.safetensors.tmp." + std::to_string(::getppid()) + ".0";
  for (const std::string& p : {dead, live}) std::ofstream(p) << "partial";
  REQUIRE(train::list_checkpoints(ckpt).empty());
  train::save_checkpoint(ckpt, 1, {{"w", state_real(1.0)}}, {}, 2);
  REQUIRE_FALSE(fs::exists(dead));
  REQUIRE(fs::exists(live));
  REQUIRE(train::list_checkpoints(ckpt) == std::vector<std::string>{train::checkpoint_path(ckpt, 1)});
}

TEST_CASE("checkpoint file names with numbers past int64 are refused by name or kept", "[train][faults]") {
  TempDir dir("hugestep");
  const std::string ckpt = dir / "ckpt";
  fs::create_directories(ckpt);
  // A temporary whose pid no pid_t holds: not a writer precis ran, so it is kept (std::stol threw
  // an untyped std::out_of_range from save_checkpoint).
  const std::string odd_temp = ckpt + "/step-000000003.safetensors.tmp.99999999999999999999999.0";
  std::ofstream(odd_temp) << "partial";
  train::save_checkpoint(ckpt, 1, {{"w", state_real(1.0)}}, {}, 2);
  REQUIRE(fs::exists(odd_temp));
  REQUIRE(train::list_checkpoints(ckpt) == std::vector<std::string>{train::checkpoint_path(ckpt, 1)});
  // int64's maximum is a step precis can write; one more is not (std::stoll threw std::out_of_range).
  const std::string max_step = ckpt + "/step-9223372036854775807.safetensors";
  std::ofstream(max_step) << "x";
  REQUIRE(train::list_checkpoints(ckpt).back() == max_step);
  fs::remove(max_step);
  const std::string huge = ckpt + "/step-9223372036854775808.safetensors";
  std::ofstream(huge) << "x";
  try {
    (void)train::latest_checkpoint(ckpt);
    FAIL("no exception");
  } catch (const IOError& e) {
    const std::string msg = e.what();
    CHECK(msg.find("named like a checkpoint") != std::string::npos);
    CHECK(msg.find(huge) != std::string::npos);
    CHECK(msg.find("exceeds 9223372036854775807") != std::string::npos);
    CHECK(msg.find("rename or move it") != std::string::npos);
  }
}
