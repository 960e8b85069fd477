// Checkpoint files: atomic writes, pruning, torn and corrupt files skipped, a
// checkpoint of another model refused, and when the next one is due; and the
// freeze watch that tells a SIGSTOPped server its round went on without it.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include <csignal>
#include <thread>

#include <sys/wait.h>
#include <unistd.h>

#include "base/freeze_watch.hpp"
#include "corrupt.hpp"
#include "models/checkpoint.hpp"

namespace fs = std::filesystem;
using swarm::checkpoint_header;
using swarm::checkpoint_store;
using kind = checkpoint_header::kind;
using swarm::test::flip_byte;

namespace {

struct temp_dir {
  fs::path path;
  temp_dir() {
    char tmpl[] = "/tmp/swarm-ckpt-test-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~temp_dir() { fs::remove_all(path); }
};

checkpoint_header stage_header(int stage, int64_t step, uint64_t hash = 42) {
  return {kind::stage, stage, 2, hash, step};
}

std::string payload_of(int64_t step) {
  return std::string(1000 + static_cast<size_t>(step), static_cast<char>('a' + step % 26));
}

}  // namespace

TEST_CASE("checkpoints round-trip, newest first, the last few kept", "[checkpoint]") {
  temp_dir dir;
  checkpoint_store store{dir.path.string(), 2};
  CHECK_FALSE(store.newest(kind::stage, 0, 2, 42)->has_value());
  for (int64_t step : {10, 20, 30}) {
    auto path = store.write(stage_header(0, step), payload_of(step));
    REQUIRE(path);
    CHECK(fs::exists(*path));
  }
  auto found = store.newest(kind::stage, 0, 2, 42);
  REQUIRE(found);
  REQUIRE(found->has_value());
  CHECK((*found)->header.step == 30);
  CHECK((*found)->payload == payload_of(30));
  CHECK((*found)->skipped == 0);
  // keep = 2: step 10 is gone, and no temporary file is left.
  int files = 0;
  for (const auto& e : fs::directory_iterator(store.folder(kind::stage, 0))) {
    ++files;
    CHECK(e.path().filename().string()[0] != '.');
  }
  CHECK(files == 2);
  auto latest = store.latest_written(kind::stage, 0);
  REQUIRE(latest);
  CHECK(latest->step == 30);
  CHECK_FALSE(store.latest_written(kind::stage, 1));
}

TEST_CASE("torn and corrupt checkpoints are skipped, never loaded", "[checkpoint]") {
  temp_dir dir;
  checkpoint_store store{dir.path.string(), 5};
  std::vector<std::string> paths;
  for (int64_t step : {1, 2, 3, 4})
    paths.push_back(*store.write(stage_header(1, step), payload_of(step)));
  fs::resize_file(paths[3], fs::file_size(paths[3]) - 7);  // step 4 torn
  flip_byte(paths[2], 64 + 100);                           // step 3: a payload byte
  auto found = store.newest(kind::stage, 1, 2, 42);
  REQUIRE(found);
  REQUIRE(found->has_value());
  CHECK((*found)->header.step == 2);
  CHECK((*found)->skipped == 2);
  flip_byte(paths[1], 20);        // step 2: a header byte
  fs::resize_file(paths[0], 10);  // step 1: shorter than a header
  found = store.newest(kind::stage, 1, 2, 42);
  REQUIRE(found);
  CHECK_FALSE(found->has_value());
  // A file renamed to another step is refused too.
  auto good = *store.write(stage_header(1, 7), payload_of(7));
  fs::rename(good, fs::path(good).parent_path() / "step-000000000009.ckpt");
  found = store.newest(kind::stage, 1, 2, 42);
  REQUIRE(found);
  CHECK_FALSE(found->has_value());
}

TEST_CASE("a checkpoint of another model config or stage count is refused", "[checkpoint]") {
  temp_dir dir;
  checkpoint_store store{dir.path.string(), 3};
  REQUIRE(store.write(stage_header(0, 5, 42), payload_of(5)));
  auto other_model = store.newest(kind::stage, 0, 2, 43);
  REQUIRE_FALSE(other_model);
  CHECK(other_model.error().code() == swarm::errc::BAD_CONFIG);
  CHECK_THAT(swarm::describe(other_model.error()), Catch::Contains("config hash 42"));
  CHECK_FALSE(store.newest(kind::stage, 0, 3, 42));
  auto all = store.check_all(2, 43);
  CHECK(all.code() == swarm::errc::BAD_CONFIG);
  CHECK_FALSE(store.check_all(2, 42));
  // Trainer folders are checked as well.
  REQUIRE(store.write({kind::trainer, 0, 2, 99, 3}, "position"));
  CHECK(store.check_all(2, 42));
}

TEST_CASE("temporary files of dead writers are removed, live ones kept", "[checkpoint]") {
  temp_dir dir;
  checkpoint_store store{dir.path.string(), 3};
  REQUIRE(store.write(stage_header(0, 1), payload_of(1)));
  const auto folder = fs::path(store.folder(kind::stage, 0));
  const auto dead = folder / ".step-000000000002.ckpt.tmp.999999999";  // no such pid
  const auto live = folder / (".step-000000000002.ckpt.tmp." + std::to_string(::getppid()));
  std::ofstream(dead) << "half";
  std::ofstream(live) << "half";
  auto found = store.newest(kind::stage, 0, 2, 42);
  REQUIRE(found);
  CHECK((*found)->header.step == 1);
  CHECK_FALSE(fs::exists(dead));
  CHECK(fs::exists(live));
}

TEST_CASE("a checkpoint is due every N steps or every N seconds", "[checkpoint]") {
  using latest = checkpoint_store::latest;
  // Steps: multiples of N, never step 0, never twice.
  CHECK(swarm::checkpoint_due(10, std::nullopt, 10, 0, 0));
  CHECK_FALSE(swarm::checkpoint_due(11, std::nullopt, 10, 0, 0));
  CHECK_FALSE(swarm::checkpoint_due(0, std::nullopt, 10, 0, 0));
  CHECK_FALSE(swarm::checkpoint_due(20, latest{20, 0}, 10, 0, 0));
  CHECK(swarm::checkpoint_due(30, latest{20, 0}, 10, 0, 0));
  // Seconds: by the newest file's age; with none, by the time since the writer started.
  CHECK_FALSE(swarm::checkpoint_due(5, latest{3, 29.0}, 0, 30, 100));
  CHECK(swarm::checkpoint_due(5, latest{3, 30.5}, 0, 30, 0));
  CHECK_FALSE(swarm::checkpoint_due(5, std::nullopt, 0, 30, 12));
  CHECK(swarm::checkpoint_due(5, std::nullopt, 0, 30, 31));
}

TEST_CASE("a trainer's position round-trips, and each running trainer gets its own slot", "[checkpoint]") {
  swarm::trainer_position p{37, 2368, "1 2 3 4 5"};
  auto back = swarm::decode_position(swarm::encode_position(p));
  REQUIRE(back);
  CHECK(back->step == 37);
  CHECK(back->samples == 2368);
  CHECK(back->rng == "1 2 3 4 5");
  CHECK_FALSE(swarm::decode_position("garbage"));
  CHECK_FALSE(swarm::decode_position("swarm-trainer-position 1\nstep -3\nsamples 0\nrng 1\n"));
  temp_dir dir;
  checkpoint_store store{dir.path.string(), 2};
  // flock locks belong to open files: this process holding slot 0 makes the next claim slot 1.
  auto first = swarm::claim_trainer_slot(store);
  auto second = swarm::claim_trainer_slot(store);
  REQUIRE(first);
  REQUIRE(second);
  CHECK(*first == 0);
  CHECK(*second == 1);
  // --trainer-slot: that slot or a clear refusal, never another one.
  auto wanted = swarm::claim_trainer_slot(store, 5);
  REQUIRE(wanted);
  CHECK(*wanted == 5);
  auto held = swarm::claim_trainer_slot(store, 1);
  REQUIRE_FALSE(held);
  CHECK(held.error().code() == swarm::errc::BAD_CONFIG);
  CHECK(held.error().what().find("trainer slot 1") != std::string::npos);
  auto next = swarm::claim_trainer_slot(store);
  REQUIRE(next);
  CHECK(*next == 2);
}

namespace {

/// In a child process: watches for freezes of 300 ms, lets the parent act for
/// 2 s, and exits 0 when it stood still meanwhile (and measured a stall of at
/// least 600 ms), 1 when not (no stall of 300 ms), 2 when the two answers
/// disagree (-100 - the signal that ended it otherwise).
int child_stood_still(bool stop_it) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    // A group of its own: under ctest this process leads its own session, so
    // its group has no parent outside it (an orphaned group), and the kernel
    // may hang up (SIGHUP) the stopped members of such a group. Two suite runs
    // saw this child end by a signal here.
    ::setpgid(0, 0);
    swarm::watch_freezes(std::chrono::milliseconds(300));
    const auto since = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(std::chrono::seconds(2));
    const bool thawed = swarm::thawed_after(since).has_value();
    const auto stall = swarm::longest_stall_between(since, std::chrono::steady_clock::now());
    ::_exit(thawed && stall >= std::chrono::milliseconds(600)   ? 0
            : !thawed && stall < std::chrono::milliseconds(300) ? 1
                                                                : 2);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  if (stop_it) {
    ::kill(pid, SIGSTOP);
    std::this_thread::sleep_for(std::chrono::milliseconds(800));
    ::kill(pid, SIGCONT);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -100 - WTERMSIG(status);
}

}  // namespace

TEST_CASE("a process knows it stood still longer than the gap, and for how long (SIGSTOP)", "[freeze]") {
  CHECK(child_stood_still(true) == 0);
  CHECK(child_stood_still(false) == 1);
}
