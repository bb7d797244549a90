#pragma once
// Training checkpoints: ONE safetensors file per checkpoint holding every piece of state a run
// needs to continue bit for bit, under prefixes ("model.", "optimizer.", "scaler.", "scheduler.",
// "accumulator.", "trainer."), plus string metadata describing the run (model, precision, ...).
//
// Files are named step-<global step, 9 digits>.safetensors inside the checkpoint folder, and each
// is written atomically (save_safetensors: temporary file, fsync, rename, fsync of the folder), so
// a crash leaves either the old set of files or the old set plus the complete new one. After a new
// checkpoint is complete, older ones beyond `keep` are deleted: the previous checkpoint survives
// until its successor is whole. tests/models/checkpoint_fault_test.cpp fails and kills the writer
// at each of its system calls (tensor/file_io.h's fault hook) and fills the disk;
// train_kill_test.cpp kills precis-train at random moments.
//
// Integrity: the metadata carries a CRC-32 of every tensor's bytes ("precis.crc32") and the
// number of tensors; load_checkpoint recomputes both, so a file whose data region was damaged
// (not only a truncated or malformed one, which the safetensors reader already refuses) raises
// IOError naming the file instead of resuming from garbage.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tensor/state_dict.h"

namespace precis::train {

struct Checkpoint {
  StateDict state;
  std::map<std::string, std::string> metadata;
  std::string path;
};

/// The path of the checkpoint of `global_step` in `dir`.
std::string checkpoint_path(const std::string& dir, int64_t global_step);

/// Checkpoint files in `dir` (step-*.safetensors), oldest (lowest step) first. Temporary files
/// of an interrupted save are ignored. Empty when the folder does not exist.
std::vector<std::string> list_checkpoints(const std::string& dir);

/// The newest checkpoint in `dir`, or nothing.
std::optional<std::string> latest_checkpoint(const std::string& dir);

/// Writes `state` and `metadata` to checkpoint_path(dir, global_step) atomically (creating `dir`),
/// then deletes all but the newest `keep` (>= 1) checkpoints of `dir`. Returns the path. Temporary
/// files that killed writers left in `dir` are removed first. When the write fails (full disk,
/// read-only folder, I/O error) the IOError names the checkpoint, the failed system call and its
/// error, what the folder's state suggests (disk full, not writable), and the previous checkpoint,
/// which is intact.
std::string save_checkpoint(const std::string& dir, int64_t global_step, const StateDict& state,
                            std::map<std::string, std::string> metadata, int keep = 2);

/// Reads and verifies a checkpoint. IOError naming the file when it is missing, truncated,
/// malformed, lacks the integrity metadata or fails the checksum; the message names the other
/// checkpoints of its folder that could be resumed from instead.
Checkpoint load_checkpoint(const std::string& path);

}  // namespace precis::train
