#pragma once
// Configuration of every role: one struct per role, each field with its unit and
// default. Every field is also a command-line flag and a key of the config files
// in this folder (`key = value`, key spelled like the flag without dashes in
// front); flags override the file. The flags are declared once, in the table of
// config/keys.cpp; parse_config() is the only parser.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "policy/admission.hpp"
#include "policy/attempt.hpp"
#include "policy/rebalancing.hpp"
#include "policy/routing.hpp"

namespace swarm {

enum class role {
  coordinator,
  server,
  trainer,
  local,
  cluster,
  status,
  calibrate,
  tokenizer,
  prepare,
  export_weights,
  generate
};

[[nodiscard]] const char* to_string(role r);

/// Hyperparameters of the model (models/); identical on every peer of a swarm.
struct model_config {
  /// The model family (--model): a name in config/family.cpp's table, whose
  /// descriptor says what its blocks are.
  std::string arch = "gpt";
  int64_t d_model = 128;      ///< hidden width, features
  int64_t n_heads = 4;        ///< attention heads; must divide d_model
  int64_t n_layers = 4;       ///< transformer blocks in the whole model
  int64_t n_kv_heads = 0;     ///< llama: key/value heads (grouped-query attention), dividing n_heads; 0 = n_heads
  int64_t ffn_dim = 0;        ///< llama: SwiGLU hidden width; 0 = 8/3 d_model rounded up to a multiple of 256
  double norm_eps = 1e-5;     ///< llama: RMSNorm epsilon
  double rope_theta = 10000;  ///< llama: rotary embedding base
  /// ALBERT-style sharing (the paper's setup): each run of this many layers is
  /// one block applied that many times; stages never split a run. 1 = none.
  int64_t share_layers = 1;
  /// What a stage cut carries (the paper's compression ablation): none (the
  /// hidden state as it is) | bottleneck:K (LayerNorm and a learned projection
  /// down to d_model / K before the cut, a learned projection back up after it)
  /// | maxout:K (LayerNorm and the max of each K neighbouring features before,
  /// a learned projection up after). The layers belong to the stages on either side.
  std::string boundary = "none";
  int64_t seq_len = 128;     ///< context length, bytes per sample
  int64_t microbatch = 8;    ///< samples per microbatch
  int64_t vocab = 256;       ///< vocabulary size: the tokenizer's (256 for bytes), set once it is opened
  bool vocab_fixed = false;  ///< --vocab was given: the tokenizer must have exactly `vocab` ids
  /// `bytes` or a SentencePiece model file (data/tokenizer.hpp). Every role of a
  /// swarm opens it: its file hash is part of the model hash.
  std::string tokenizer = "bytes";
  uint64_t tokenizer_hash = 0;  ///< FNV-1a of the tokenizer file, 0 for bytes (set when it is opened)
  double lr = 1e-3;             ///< AdamW learning rate
  double weight_decay = 0.1;    ///< AdamW decoupled weight decay (2-D weights only)
  double beta1 = 0.9;           ///< AdamW first-moment decay
  double beta2 = 0.95;          ///< AdamW second-moment decay
  /// The model's gradient-norm clip per optimizer step (see stage_worker::apply_gradient); 0 = off
  double grad_clip = 1.0;
  std::string optimizer = "adamw";       ///< adamw | lamb (layer-wise trust ratios: no norm crosses stages)
  std::string lr_schedule = "constant";  ///< constant | cosine (decays to min_lr at decay_steps)
  int64_t warmup_steps = 0;              ///< linear warm-up from lr / warmup_steps to lr over this many steps
  double min_lr = 0;                     ///< cosine: the rate at decay_steps and after
  int64_t decay_steps = 0;               ///< cosine: the step it reaches min_lr (--max-steps, copied at load)
  uint64_t seed = 1;                     ///< parameter initialisation seed

  /// Key/value heads as built: n_kv_heads, or n_heads when it is 0 (and always
  /// for a family without grouped-query attention, such as gpt).
  [[nodiscard]] int64_t kv_heads() const;
  /// The MLP's hidden width as built (the family's rule): gpt 4 d; llama
  /// ffn_dim, or Llama's rounding of 8/3 d up to a multiple of 256.
  [[nodiscard]] int64_t ffn_width() const;
  /// "none", "bottleneck" or "maxout", and its K (1 for none).
  [[nodiscard]] std::pair<std::string, int64_t> boundary_kind() const;
  /// Features of the hidden states that cross a stage cut: d_model / K.
  [[nodiscard]] int64_t wire_width() const { return d_model / boundary_kind().second; }

  /// Stable hash of every field; peers with different hashes refuse each other.
  [[nodiscard]] uint64_t hash() const;
  /// "bytes", or "FILE (hash 0123456789abcdef)": how refusals name a peer's tokenizer.
  [[nodiscard]] std::string tokenizer_label() const;
};

/// Transport settings shared by every networked role.
struct net_config {
  double heartbeat_s = 1.0;           ///< CAF middleman heartbeat interval, seconds
  double connection_timeout_s = 5.0;  ///< drop a silent connection after, seconds
  /// How long a node keeps dialing a coordinator it cannot reach (at start, or
  /// after losing it) before it gives up with exit 1, seconds.
  double coordinator_wait_s = 30.0;
  /// etcd://HOST:PORT[,HOST:PORT...]: coordinators are candidates elected
  /// through that etcd cluster, and every node follows its leader
  /// (apps/control.hpp); empty: one coordinator at --coordinator.
  std::string control;
  /// The leader's etcd lease, seconds: a dead leader's successor leads about
  /// this long after it died; a live leader cut off from etcd stops ordering
  /// before it. etcd raises it to its own minimum (2 s with etcd's default
  /// timings; the cluster's own members allow 1 s).
  int64_t control_lease_s = 2;
  /// TLS to etcd, its own beside --tls-*: PEM files of the CA that signed
  /// etcd's certificates, and of this node's client certificate and key (for
  /// etcd's --client-cert-auth). CA alone: server-authenticated TLS; none: plain HTTP.
  std::string control_ca, control_cert, control_key;
  /// Largest message payload, bytes. Measured here (scripts/bench_transfer.sh): one
  /// 16 MiB message moves at ~500 MB/s, one 64 MiB message at ~270 MB/s, and every
  /// extra message costs ~35 ms, so payloads up to 16 MiB go whole.
  int64_t chunk_bytes = 16 << 20;
  /// Payloads of at least this many bytes (requests, replies, all-reduce pieces)
  /// go over the bulk connection, the CAF message naming them; 0 = never. Measured
  /// (scripts/bench_transfer.sh): CAF alone moves 16-64 MiB at 0.1-0.3 of raw TCP.
  int64_t bulk_min_bytes = 64 << 10;
  /// Bytes of bulk frames being received at once, all peers together (what a
  /// stranger can make a node hold), MiB; 0 = 4x the model's largest payload,
  /// at least 256 MiB (apps/node.cpp).
  int64_t bulk_budget_mib = 0;
  /// Mutual TLS with a cluster CA on every connection (CAF links and bulk):
  /// PEM files of the CA, this node's certificate and its unencrypted key. All
  /// three or none; none = plain TCP. scripts/make_certs.sh makes them.
  std::string tls_ca, tls_cert, tls_key;
};

struct coordinator_config {
  int port = 0;                         ///< TCP port to publish on; 0 = any free port
  std::string port_file;                ///< write the bound port here once listening (for scripts)
  int http_port = 0;                    ///< status page, /api/status and /metrics; 0 = none
  std::string http_host = "127.0.0.1";  ///< address the HTTP port binds to
  /// When not empty, the HTTP port answers only requests carrying it
  /// (`Authorization: Bearer TOKEN` or `?token=TOKEN`); others get 401.
  std::string http_token;
  /// No round outlives this, seconds; its clock's multiples are policy::round_clock.
  double averaging_timeout_s = 30.0;
  std::string rebalance = "on";  ///< on: move servers between stages; off: servers stay where they started
  /// Seconds between load moves (one server at most each). The paper's 300 s suits
  /// stages of ~1B parameters whose download takes minutes at 200 Mb/s; ours
  /// download in under a second and runs last minutes, so 30 s lets the swarm
  /// adapt within a run while a period still holds thousands of samples to measure
  /// rates on. Empty and under-replicated stages are served at once, not per period.
  double rebalance_period_s = 30.0;
  /// The moves' rule (--rebalance-min-gain, --min-replicas); its cooldown_s is
  /// two periods, set by the rebalancer.
  policy::rebalance_config moves;
  /// A server a trainer's verification banned (issue #47) is refused this long, seconds.
  double ban_cooldown_s = 600.0;
  /// How the stages' all-reduces combine their members' gradients (issue
  /// #47): "mean" (weighted by samples) or "centered-clip"
  /// (policy::centered_clip) with this radius and iterations. Sent with every
  /// round order, so every member of a round reduces alike and replicas stay
  /// bit-identical.
  std::string aggregation = "mean";
  double clip_radius = 1.0;
  int clip_iterations = 3;
};

struct server_config {
  std::string coordinator;         ///< HOST:PORT of the coordinator
  int stage = -1;                  ///< pipeline stage served, 0-based; -1: auto (the coordinator places it)
  std::string host = "127.0.0.1";  ///< address trainers use to reach this server
  int port = 0;                    ///< TCP port to publish on; 0 = any free port
  int bulk_port = 0;               ///< TCP port of the bulk connection (server and trainer); 0 = any free port
  int64_t batch_size = 64;         ///< samples per stage-wide optimizer step (the coordinator's target batch size)
  double slowdown = 1.0;           ///< emulate a device this many times slower (>= 1)
  std::string averaging_compression = "fp16";  ///< none | fp16 | blockwise8: the all-reduce pieces it sends
  /// A request that would add gradients while a round of its stage runs waits
  /// up to this long for the round's step (else its gradient is a step stale); 0 = never waits.
  double stale_wait_s = 1.0;
  /// MiB of forwards kept with their graphs for their backward, which then
  /// need not recompute them (estimated sizes; oldest dropped first); 0 = off.
  int64_t activation_cache_mb = 1024;
  /// Room it grants trainers (--max-outstanding), through its door (actors/door.hpp).
  policy::admission_config admission;
  /// Test hook: the fault_after-th request of this kind hangs forever, holding it,
  /// after a `fault` metrics event, so a test can kill -9 a server mid-request.
  /// hang_round: hang in the fault_after-th averaging round, after sending its parts;
  /// fail_round: give the fault_after-th round it holds gradient in up before
  /// sending any part (as a peer that cannot be dialed makes it), and go on;
  /// hang_state: when asked for its state (by a joining or reloading peer).
  /// The lies of issue #47 (each needs allow_faults; deterministic per server id):
  /// noise: every forward's outputs and backward's input gradients are noise
  /// of their own scale; flip: its averaging contribution is negated and
  /// scaled by 10; stale: its forwards and backwards run on the parameters
  /// stale_steps (at most kept_versions) steps old, while it claims the
  /// current step; drop_half: every second microbatch's gradient is never
  /// computed, yet its samples are claimed in the round.
  enum class fault_kind {
    none,
    hang_forward,
    hang_backward,
    hang_round,
    fail_round,
    hang_state,
    noise,
    flip,
    stale,
    drop_half
  } fault = fault_kind::none;
  int64_t fault_after = 1;  ///< the fault hits the Nth request of its kind
  /// --allow-faults: a fault that makes the server lie is refused without it.
  bool allow_faults = false;
  /// Whether `fault` makes this server lie (rather than hang or fail).
  [[nodiscard]] bool lies() const { return fault >= fault_kind::noise; }
};

struct trainer_config {
  std::string coordinator;                           ///< HOST:PORT of the coordinator
  std::string corpus = "/usr/share/games/fortunes";  ///< file or folder of text files
  std::string data;             ///< folder of token shards (--role prepare); empty: train on --corpus
  int64_t eval_every = 0;       ///< measure the validation loss every this many steps (and at 0); 0 = never
  int64_t eval_tokens = 65536;  ///< validation tokens per measurement
  /// Which trainer of the swarm this is: seeds its data sampler (with the
  /// model seed) and names its checkpoint slot. -1 (auto): the lowest free
  /// checkpoint slot with --checkpoint-dir, else the process id.
  int slot = -1;
  int in_flight = 4;                       ///< microbatches in the pipeline at once
  int64_t batch_size = 64;                 ///< samples per reported step (loss averaged over it)
  int64_t max_steps = 0;                   ///< stop after this many steps; 0 = run until stopped
  double forward_timeout_s = 30.0;         ///< deadline of one forward request, seconds
  double backward_timeout_s = 75.0;        ///< deadline of one backward request, seconds
  std::string compression = "blockwise8";  ///< none | fp16 | blockwise8: activations and gradients between stages
  /// The stage router's knobs (--ema-alpha, --backward-cost, --ban-base, --ban-max).
  policy::routing_config router;
  /// Which server each attempt goes to (--routing, --max-retries, --busy-retries).
  policy::attempt_config attempts;
  double commit_grace = 0.1;        ///< servers must commit this fraction of the deadline before it
  double no_server_wait_s = 600.0;  ///< how long a request waits for a stage with no server, seconds
  /// Verified work (issue #47): the share of forwards re-sent to a second
  /// server of the stage and compared (a third decides a disagreement); 0 = off.
  double verify_fraction = 0.03;
  int verify_strikes = 3;  ///< charges that ban a server (and report it to the coordinator)
  /// Probation: every answer of a server new to this trainer is verified
  /// until it agreed this many times (policy/verification.hpp); 0 = none.
  int verify_probation = 3;
};

/// --role tokenizer and --role prepare (data/): text in, a tokenizer or token shards out.
struct data_config {
  std::string input;            ///< text files and folders, one per line (--input takes several)
  int vocab_size = 8000;        ///< tokenizer: ids in the model to train
  bool encode = false;          ///< tokenizer: print the ids of each standard-input line instead of training
  double val_fraction = 0.005;  ///< prepare: fraction of documents held out for validation
  int64_t shard_tokens = int64_t{1} << 26;  ///< prepare: tokens per shard file

  [[nodiscard]] std::vector<std::string> inputs() const;
};

/// Checkpoints (models/checkpoint.hpp): servers, trainers and --role local.
struct checkpoint_config {
  std::string dir;            ///< folder of checkpoints on this machine; empty = none written or loaded
  std::string every = "60s";  ///< "N": every N optimizer steps; "Ns": every N seconds
  int keep = 3;               ///< newest checkpoints kept per stage (and per trainer)
  // Parsed from `every` by parse_config: exactly one is > 0.
  int64_t every_steps = 0;
  double every_s = 60;
};

struct cluster_config {
  int servers_per_stage = 2;   ///< server processes per stage
  int trainers = 1;            ///< trainer processes
  std::string chaos = "none";  ///< none | kill (SIGKILL, fresh process later) | stop (SIGSTOP, SIGCONT later) | mixed
                               ///< (either, at random)
  double chaos_every_s = 20;   ///< one random server hit every this many seconds
  double chaos_down_s = 10;    ///< restarted (kill) or continued (stop) after this many seconds
  int chaos_stage = -1;        ///< only servers of this stage; -1 = any stage
  uint64_t chaos_seed = 1;     ///< seed of the victim choice
  double chaos_coordinator_every_s = 0;  ///< SIGKILL the coordinator this often (it is restarted at once); 0 = never
  /// kill (SIGKILL) or stop (SIGSTOP, SIGCONT after chaos_down_s): what
  /// chaos_coordinator_every_s does to the (leading) coordinator.
  std::string chaos_coordinator_action = "kill";
  /// 0: one coordinator, restarted when it dies; N: N etcd members on loopback
  /// (data in the run's folder) and two coordinator candidates elected through them.
  int control_replicas = 0;
  double chaos_wipe_at_s = 0;    ///< once, this many seconds in: SIGKILL every server of one stage; 0 = never
  std::string server_slowdowns;  ///< per-server --slowdown, comma-separated in launch order (stage-major)
  std::string stage_servers;     ///< servers per stage in stage order, e.g. "3,1"; empty: servers_per_stage each

  /// Servers to start on each of `stages` stages.
  [[nodiscard]] std::vector<int> servers_of_stages(int stages) const;
};

/// --role generate: sampling a continuation of --prompt.
struct generate_config {
  std::string prompt;            ///< text to continue (empty: from a document's start)
  int64_t max_new_tokens = 200;  ///< tokens to generate at most (fewer when the model ends the document)
  double temperature = 0.8;      ///< softmax temperature; 0 = greedy (argmax)
  int64_t top_k = 40;            ///< sample among the k likeliest tokens; 0 = all
  uint64_t sample_seed = 1;      ///< seed of the sampling (--seed is the model's, in its hash)
  std::string kv_cache = "on";   ///< on: keep keys and values of past positions; off: recompute the window per token
};

/// Everything one process needs; each role reads its own part.
struct app_config {
  role which = role::local;
  std::string config_file;     ///< the file the values came from, if any
  int stages = 2;              ///< pipeline stages the model is cut into
  int threads = 0;             ///< torch intra-op threads; 0 = all cores (cluster: cores / servers)
  std::string device = "cpu";  ///< torch device of the stage: cpu, cuda, cuda:N (CUDA needs a CUDA build of libtorch)
  /// fp32, or bf16: forwards in bfloat16 under autocast, with float32 master
  /// parameters, gradients, optimizer state, all-reduce and wire tensors.
  std::string precision = "fp32";
  [[nodiscard]] bool bf16() const { return precision == "bf16"; }
  std::string metrics;             ///< JSON-lines metrics file to append to; empty = none
  std::string out = "-";           ///< calibrate: where the calibration goes (- = standard output)
  std::string log_level = "info";  ///< trace, debug, info, warn, error
  std::string init_from;  ///< safetensors file (Hugging Face names) to start the stages from; empty = random init
  model_config model;
  net_config net;
  coordinator_config coordinator;
  server_config server;
  trainer_config trainer;
  checkpoint_config checkpoint;
  cluster_config cluster;
  data_config data;
  generate_config generate;
};

/// Result of parsing: a config, or an exit (help printed: code 0; error: code 2
/// with `message` saying what to fix).
struct parse_result {
  std::optional<app_config> config;
  int exit_code = 0;
  std::string message;
  /// What is allowed but probably not meant (config_warnings); main prints them.
  std::vector<std::string> warnings;
};

/// Parses flags and the optional --config file; validates every value.
[[nodiscard]] parse_result parse_config(int argc, const char* const* argv);

/// Checks ranges and cross-field rules; returns an empty string when valid.
[[nodiscard]] std::string validate(const app_config& cfg);

/// Settings that are valid but weaken the swarm, one sentence each saying
/// how to fix it: etcd over plain HTTP off this machine beside a TLS swarm.
[[nodiscard]] std::vector<std::string> config_warnings(const app_config& cfg);

/// Whether `host` names this machine only (127.0.0.0/8, ::1, localhost): a
/// plain port or a plain etcd there is not open to the network.
[[nodiscard]] bool is_loopback_host(const std::string& host);

/// Renders a config back to flags: for the cluster launcher's children the keys
/// every process of a swarm shares; with `every_key`, every key (--role too).
[[nodiscard]] std::vector<std::string> to_flags(const app_config& cfg, bool every_key = false);

/// Splits "host:port"; nullopt when malformed.
[[nodiscard]] std::optional<std::pair<std::string, uint16_t>> split_host_port(const std::string& s);
/// The members named by `--control etcd://H1:P1,H2:P2,...`; nullopt, with
/// `why` saying what is wrong, otherwise.
[[nodiscard]] std::optional<std::vector<std::pair<std::string, uint16_t>>> parse_control(const std::string& url,
                                                                                         std::string& why);

}  // namespace swarm
