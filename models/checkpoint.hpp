#pragma once
// Checkpoint files on this machine's disk: a stage's state (parameters, AdamW
// state, step: stage_worker::export_state) or a trainer's position. No torch.
//
// Layout under --checkpoint-dir:
//   stage-K/step-000000000120.ckpt   newest `keep` of stage K, any server of it may write
//   trainer-N/step-000000000037.ckpt  trainer slot N (a trainer holds trainer-N.lock while it runs)
// A file is a fixed header (magic, format version, kind, stage, stages, model
// config hash, step, payload size, payload FNV-1a, header FNV-1a) and the
// payload. It is written to `.step-....tmp.<pid>`, fsynced, renamed into place
// and the folder fsynced, so a reader sees a whole file or none. A torn or
// corrupt file (short, bad magic, a checksum that does not match, a step that
// is not its name's) is skipped with a warning and never loaded; temporary
// files of dead writers are removed.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/error.hpp"

namespace swarm {

struct checkpoint_header {
  enum class kind : uint32_t { stage = 1, trainer = 2 };
  kind what = kind::stage;
  int32_t index = 0;         ///< the stage (kind stage) or the trainer slot (kind trainer)
  uint32_t num_stages = 0;   ///< stages the model is cut into
  uint64_t config_hash = 0;  ///< model_config::hash() of the writer
  int64_t step = 0;          ///< optimizer steps (stage) or steps reported (trainer)
};

/// A checkpoint read back and checked.
struct checkpoint_data {
  std::string path;
  checkpoint_header header;
  std::string payload;
  int skipped = 0;  ///< newer files of the same folder that were torn or corrupt
};

class checkpoint_store {
public:
  checkpoint_store(std::string dir, int keep);

  [[nodiscard]] const std::string& dir() const { return dir_; }
  /// dir/stage-K or dir/trainer-N.
  [[nodiscard]] std::string folder(checkpoint_header::kind what, int index) const;

  /// Writes atomically (see above) and removes all but the newest `keep`; the
  /// path written, or an INTERNAL error naming the file and errno's reason.
  [[nodiscard]] result<std::string> write(const checkpoint_header& h, const std::string& payload) const;

  /// The newest whole, uncorrupted checkpoint of a folder (nullopt when none),
  /// each bad file skipped with a warning. BAD_CONFIG when that newest one was
  /// written by another model config or stage count: never loaded.
  [[nodiscard]] result<std::optional<checkpoint_data>> newest(checkpoint_header::kind what, int index,
                                                              uint32_t num_stages, uint64_t config_hash) const;

  /// Step of the newest file by name alone (no reading) and its age in seconds;
  /// nullopt when the folder holds none. Decides when the next one is due.
  struct latest {
    int64_t step = 0;
    double age_s = 0;
  };
  [[nodiscard]] std::optional<latest> latest_written(checkpoint_header::kind what, int index) const;

  /// The indices of this folder's stage-K or trainer-N folders, ascending.
  [[nodiscard]] std::vector<int> indices(checkpoint_header::kind what) const;

  /// Start-up check: the newest valid checkpoint of every stage-* and trainer-*
  /// folder fits the model config and stage count; BAD_CONFIG naming the file otherwise.
  [[nodiscard]] error check_all(uint32_t num_stages, uint64_t config_hash) const;

  /// Removes the temporary file a write of this process is in the middle of,
  /// if any: called just before the process exits without unwinding.
  static void abandon_partial_write();

private:
  std::string dir_;
  int keep_;
};

/// --checkpoint-dir and when to write, as a role hands it to its actors.
/// One checkpoint file's bytes checked (magic, checksums, version, length, and
/// the step its name says): its header and payload, or why it is unusable.
[[nodiscard]] result<checkpoint_data> parse_checkpoint(const std::string& bytes, int64_t named_step);

struct checkpoint_settings {
  std::shared_ptr<const checkpoint_store> store;  ///< null: no checkpoints
  int64_t every_steps = 0;                        ///< write every this many optimizer steps, or
  double every_s = 0;                             ///< every this many seconds
};

/// A trainer's place in training (the payload of its checkpoints).
struct trainer_position {
  int64_t step = 0;     ///< steps reported
  int64_t samples = 0;  ///< samples completed
  std::string rng;      ///< the data sampler's generator (std::mt19937_64 as text): where the data goes on
};
[[nodiscard]] std::string encode_position(const trainer_position& p);
/// BAD_REQUEST when the text is not one encode_position() wrote.
[[nodiscard]] result<trainer_position> decode_position(const std::string& text);

/// Claims the lowest trainer slot of `store` that no running process holds (an
/// flock on dir/trainer-N.lock, released when the process ends, however it
/// ends), so trainers started again on the same folder each resume one slot.
/// With `wanted` >= 0 only that slot (--trainer-slot): BAD_CONFIG when it is held.
[[nodiscard]] result<int> claim_trainer_slot(const checkpoint_store& store, int wanted = -1);

/// Whether a checkpoint is due after `step` given the newest on disk (none: the
/// first is due once `every_steps` steps or `every_s` seconds since `since_s`
/// passed). Pure: the caller reads the clock and the folder.
[[nodiscard]] bool checkpoint_due(int64_t step, const std::optional<checkpoint_store::latest>& newest,
                                  int64_t every_steps, double every_s, double since_s);

}  // namespace swarm
