// Real SIGKILLs of precis-train: at every file operation of a checkpoint write (precis-train's
// PRECIS_FAULT_INJECT=kill@N kills the process just before operation N), and at random moments
// of runs that resume from whatever the previous kill left. After every kill, every checkpoint
// the folder offers loads (no partial file is ever taken for one) and the newest is the last one
// completed; every chain of killed and resumed runs ends bit for bit where the uninterrupted run
// ends. Prints the figures (kill points, kills during a checkpoint write, lost checkpoints).
#include <catch2/catch.hpp>

#ifdef PRECIS_HAS_TRAIN_EXE

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <iostream>
#include <random>
#include <regex>
#include <sstream>
#include <thread>

#include "tests/models/train_support.h"
#include "tests/support/paths.h"

extern char** environ;

using namespace precis;
using namespace precis::train_testing;

namespace {

// precis-train's arguments for `o` (the options the kill tests use).
std::vector<std::string> cli_args(const train::TrainOptions& o) {
  return {"resnet", "--data", o.data, "--width", std::to_string(o.width), "--epochs", std::to_string(o.epochs),
          "--batch", std::to_string(o.batch), "--lr", "0.05", "--threads", "1", "--workers", "1",
          "--eval-batch", std::to_string(o.eval_batch), "--precision", "bf16", "--checkpoint", o.checkpoint_dir,
          "--checkpoint-every", "1", "--keep", std::to_string(o.keep), "--quiet"};
}

train::TrainOptions kill_run(const std::string& data, const std::string& ckpt) {
  train::TrainOptions o = tiny_resnet(data, ckpt);
  o.precision = DType::bf16;
  o.checkpoint_every = 1;
  o.keep = 2;
  return o;  // 2 epochs of 6 steps (tiny_resnet's OneCycle SGD, lr 0.05, 1 thread)
}

// Starts precis-train with `args`, its output to `log`, PRECIS_FAULT_INJECT=fault when not empty.
pid_t spawn_train(std::vector<std::string> args, const std::string& fault, const std::string& log) {
  std::vector<std::string> env_store;
  for (char** e = environ; *e != nullptr; ++e)
    if (std::strncmp(*e, "PRECIS_FAULT_INJECT=", 20) != 0) env_store.emplace_back(*e);
  if (!fault.empty()) env_store.push_back("PRECIS_FAULT_INJECT=" + fault);
  std::vector<char*> env;
  for (std::string& e : env_store) env.push_back(e.data());
  env.push_back(nullptr);
  args.insert(args.begin(), testing::train_exe());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), env.data());
  posix_spawn_file_actions_destroy(&actions);
  REQUIRE(rc == 0);
  return pid;
}

// Waits for `pid`; returns the raw wait status.
int wait_for(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

bool killed(int status) { return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL; }

// Temporary files process `pid` left in `dir`: it was killed while writing a checkpoint.
size_t temporaries(const std::string& dir, pid_t pid) {
  const std::string mark = ".tmp." + std::to_string(pid) + ".";
  size_t n = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) n += e.path().filename().string().find(mark) != std::string::npos;
  return n;
}

// After a kill: every offered checkpoint loads; returns the newest step (0 when none).
int64_t check_folder(const std::string& dir) {
  int64_t newest = 0;
  for (const std::string& f : train::list_checkpoints(dir)) {
    INFO("after a kill, " << f);
    train::Checkpoint c = train::load_checkpoint(f);  // throws (fails the test) on a partial file
    newest = std::max(newest, c.state.at("trainer.global_step").item<int64_t>());
  }
  return newest;
}

// Resumes from the folder in this process and compares with the uninterrupted run.
void resume_matches(train::TrainOptions o, const std::string& reference_final) {
  o.resume = train::latest_checkpoint(o.checkpoint_dir).has_value();
  std::ostringstream log;
  const train::TrainSummary s = train::train(o, log);
  REQUIRE(s.steps == 12);
  require_same_state(train::latest_checkpoint(o.checkpoint_dir).value_or(""), reference_final);
}

}  // namespace

TEST_CASE("precis-train killed at every file operation of a checkpoint loses no checkpoint", "[train][kill]") {
  TempDir dir("kill-ops");
  const std::string data = image_data(dir);
  std::ostringstream log;
  const train::TrainSummary reference = train::train(kill_run(data, dir / "reference"), log);

  // The file operations of a run that stops after step 3: three checkpoints, the third also
  // removes the first (--keep 2).
  train::TrainOptions o = kill_run(data, dir / "trace");
  std::vector<std::string> args = cli_args(o);
  args.insert(args.end(), {"--stop-after-steps", "3"});
  REQUIRE(wait_for(spawn_train(args, "trace", dir / "trace.log")) == 0);
  std::vector<std::string> ops;
  {
    std::istringstream trace(read_file(dir / "trace.log"));
    const std::regex line(R"(precis-train: file op (\d+): (\w+) (.*))");
    std::string l;
    std::smatch m;
    while (std::getline(trace, l))
      if (std::regex_match(l, m, line)) ops.push_back(m[2].str() + " " + fs::path(m[3].str()).filename().string());
  }
  REQUIRE(ops.size() >= 3 * 7 + 1);

  int64_t lost = 0, during_write = 0;
  for (size_t n = 1; n <= ops.size(); ++n) {
    INFO("killed before file operation " << n << ": " << ops[n - 1]);
    o.checkpoint_dir = dir / ("kill-" + std::to_string(n));
    std::vector<std::string> a = cli_args(o);
    a.insert(a.end(), {"--stop-after-steps", "3"});
    const pid_t pid = spawn_train(a, "kill@" + std::to_string(n), dir / "run.log");
    const int status = wait_for(pid);
    INFO(read_file(dir / "run.log"));
    REQUIRE(killed(status));
    during_write += temporaries(o.checkpoint_dir, pid) > 0;
    // The newest checkpoint is the last one whose rename happened before the kill.
    int64_t completed = 0;
    for (size_t i = 0; i + 1 < n; ++i)
      if (ops[i].rfind("rename ", 0) == 0) ++completed;
    const int64_t newest = check_folder(o.checkpoint_dir);
    lost += newest != completed;
    REQUIRE(newest == completed);
    // Each stage of the write (before the temporary exists, a partial temporary, after the
    // fsync, after the rename, between removals) resumed to the end at least once.
    if (n % 4 == 1 || ops[n - 1].rfind("write", 0) != 0) resume_matches(o, reference.last_checkpoint);
  }
  std::cout << "kill at every file operation: " << ops.size() << " kill points, " << during_write
            << " with a temporary file left, " << lost << " lost checkpoints" << std::endl;
  REQUIRE(lost == 0);
}

TEST_CASE("precis-train killed at random moments resumes to the uninterrupted result", "[train][kill]") {
  TempDir dir("kill-random");
  const std::string data = image_data(dir);
  std::ostringstream log;
  const train::TrainSummary reference = train::train(kill_run(data, dir / "reference"), log);

  // How long an uninterrupted run of the command takes here; kills fall uniformly in [0, that).
  train::TrainOptions o = kill_run(data, dir / "timing");
  const auto t0 = std::chrono::steady_clock::now();
  REQUIRE(wait_for(spawn_train(cli_args(o), "", dir / "run.log")) == 0);
  const double run_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  // Under ASan each run of the command is several times slower; 40 kills still land in every stage
  // of a run (the ordinary build makes 200).
  constexpr int kKills = kSanitizedBuild ? 40 : 200;
  if (kSanitizedBuild) std::cout << "random kills: sanitized build, 40 kills (the ordinary build makes 200)" << std::endl;
  std::mt19937 rng(20240613);
  std::uniform_real_distribution<double> delay(0.0, run_s);
  int kills = 0, during_write = 0, chains = 0, finished_runs = 0;
  int64_t lost = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(8);
  while (kills < kKills) {
    REQUIRE(std::chrono::steady_clock::now() < deadline);
    // One chain: runs that resume from what the previous kill left, until one finishes.
    o.checkpoint_dir = dir / ("chain-" + std::to_string(chains++));
    int64_t newest = 0;
    for (;;) {
      std::vector<std::string> args = cli_args(o);
      if (train::latest_checkpoint(o.checkpoint_dir)) args.push_back("--resume");
      const pid_t pid = spawn_train(args, "", dir / "run.log");
      std::this_thread::sleep_for(std::chrono::duration<double>(delay(rng)));
      ::kill(pid, SIGKILL);
      const int status = wait_for(pid);
      if (!killed(status)) {
        INFO(read_file(dir / "run.log"));
        REQUIRE(status == 0);  // finished before the kill
        ++finished_runs;
        break;
      }
      ++kills;
      during_write += temporaries(o.checkpoint_dir, pid) > 0;
      const int64_t now = check_folder(o.checkpoint_dir);
      lost += now < newest;  // a kill never takes away a checkpoint that existed
      newest = std::max(newest, now);
      if (kills >= kKills) break;
    }
    resume_matches(o, reference.last_checkpoint);  // completes an unfinished chain; checks either way
  }
  std::cout << "random kills: " << kills << " kill points in " << chains << " chains (" << finished_runs
            << " runs finished first), " << during_write << " with a temporary file left, " << lost
            << " lost checkpoints, run time " << run_s << " s" << std::endl;
  REQUIRE(lost == 0);
}

#endif  // PRECIS_HAS_TRAIN_EXE
