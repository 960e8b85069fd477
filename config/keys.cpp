#include "config/keys.hpp"

#include "config/family.hpp"
#include "config/key_words.hpp"

#include <limits>
#include <sstream>

namespace swarm {

using namespace key_words;  // the word keys' text and help

namespace {

constexpr const char* http_token_rule = "may hold only letters, digits and - . _ ~ (it travels in URLs)";

bool valid_http_token(const std::string& t) {
  // It travels in URLs (?token=) unescaped: the characters a URL keeps as they are.
  return t.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~") == std::string::npos;
}

bool valid_interval(const std::string& every) {
  const auto [steps, seconds] = checkpoint_interval(every);
  return steps > 0 || seconds > 0;
}

}  // namespace

bool valid_device(const std::string& d) {
  if (d == "cpu" || d == "cuda")
    return true;
  const std::string index = d.rfind("cuda:", 0) == 0 ? d.substr(5) : "";
  return !index.empty() && index.size() <= 3 && index.find_first_not_of("0123456789") == std::string::npos;
}

bool valid_boundary(const std::string& b) {
  if (b == "none")
    return true;
  const auto colon = b.find(':');
  const auto kind = b.substr(0, colon);
  const auto k = colon == std::string::npos ? "" : b.substr(colon + 1);
  return (kind == "bottleneck" || kind == "maxout") && !k.empty() && k.size() <= 6 &&
         k.find_first_not_of("0123456789") == std::string::npos;
}

std::pair<int64_t, double> checkpoint_interval(const std::string& s) {
  const bool secs = !s.empty() && s.back() == 's';
  const auto number = secs ? s.substr(0, s.size() - 1) : s;
  if (number.empty() || number.find_first_not_of(secs ? "0123456789." : "0123456789") != std::string::npos ||
      number.size() > 12)
    return {0, 0};
  if (secs)
    return {0, std::strtod(number.c_str(), nullptr)};
  return {std::stoll(number), 0};
}

std::optional<std::vector<int>> int_list(const std::string& s) {
  std::vector<int> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) {
    if (item.empty() || item.size() > 6 || item.find_first_not_of("0123456789") != std::string::npos)
      return std::nullopt;
    out.push_back(std::stoi(item));
  }
  return out;
}

const std::vector<keys::row>& swarm_keys() {
  using keys::check;
  using keys::key;
  using app = app_config;
  using model = model_config;
  using net = net_config;
  using coord = coordinator_config;
  using server = server_config;
  using trainer = trainer_config;
  using ckpt = checkpoint_config;
  using cluster = cluster_config;
  using data = data_config;
  using gen = generate_config;
  const auto own = keys::reach::process;  // not passed on to a cluster's children
  const auto range = [](const char* spec) { return check::range(spec); };
  const auto one_of = [](std::vector<std::string> words) { return check::one_of(std::move(words)); };
  const auto compressions = one_of({"none", "fp16", "blockwise8"});
  // flag, member, unit, check, help[, own]; the unit ends the help text ("..., seconds").
  static const std::vector<keys::row> rows = {
      keys::text_key<app>(
          "role", role_text, set_role, one_of(role_names()),
          "what this process is: coordinator | server | trainer | local | cluster | status (print a "
          "running swarm's overview: --coordinator HOST:PORT) | calibrate (measure this machine's "
          "stage costs for swarm-sim: --out FILE) | tokenizer (train one: --input, --vocab-size, --out; "
          "or --encode) | prepare (token shards: --input, --tokenizer, --out) | export (Hugging Face weights: "
          "--checkpoint-dir or --init-from, --out) | generate (text: --checkpoint-dir, --init-from "
          "or --coordinator; --prompt)",
          own)
          .must_be_given(),
      key("out", &app::out, "", {},
          "calibrate: file to write the calibration to (- = standard output); tokenizer: the model file; prepare: the "
          "shards' folder; export: the folder for model.safetensors, config.json and the tokenizer",
          own),
      key("stages", &app::stages, "", range(">= 1"), "pipeline stages the model is cut into (1..n-layers)"),
      key("threads", &app::threads, "", range(">= 0"),
          "threads per process; 0 = all cores (cluster: cores / servers); torch gets them below d-model 512, OpenBLAS "
          "from 512 on"),
      key("device", &app::device, "", check::custom(valid_device, "must be cpu, cuda or cuda:N"),
          "server, local: torch device: cpu | cuda | cuda:N (needs a CUDA build of libtorch)"),
      key("precision", &app::precision, "", one_of({"fp32", "bf16"}),
          "server, local, generate: fp32 | bf16 (forwards under autocast: matrix products in bfloat16; parameters, "
          "gradients, optimizer state, all-reduce and what travels between stages stay float32)"),
      key("init-from", &app::init_from, "", {},
          "server, local, cluster, export, generate: start from this safetensors file (Hugging Face names, as "
          "--role export writes) instead of random weights; a checkpoint in --checkpoint-dir wins"),
      key("metrics", &app::metrics, "", {}, "append JSON-lines metrics to this file (see docs/metrics.md)"),
      key("log-level", &app::log_level, "", one_of({"trace", "debug", "info", "warn", "error"}),
          "trace | debug | info | warn | error"),

      with_help(key("model", &model::arch, "", one_of(family_names()), ""), model_help()),
      key("d-model", &model::d_model, "features", range(">= 1"), "hidden width"),
      key("n-heads", &model::n_heads, "", range(">= 1"), "attention heads (must divide d-model)"),
      key("n-layers", &model::n_layers, "", range(">= 1"), "transformer blocks in the whole model"),
      key("share-layers", &model::share_layers, "", range(">= 1"),
          "layer sharing (the paper's): each run of this many layers is one block applied that many times; 1 = none"),
      key("boundary", &model::boundary, "",
          check::custom(valid_boundary, "must be none, bottleneck:K or maxout:K (K a whole number)"),
          "what crosses a stage cut: none | bottleneck:K (LayerNorm, learned projection to d-model/K, learned "
          "projection back) | maxout:K (LayerNorm, max of K features, learned projection back); the paper's ablation"),
      family_key(key("n-kv-heads", &model::n_kv_heads, "", range(">= 0"),
                     "key/value heads (grouped-query attention), dividing n-heads; 0 = n-heads")),
      family_key(key("ffn-dim", &model::ffn_dim, "features", range(">= 0"),
                     "SwiGLU hidden width; 0 = 8/3 d-model rounded up to a multiple of 256")),
      family_key(key("norm-eps", &model::norm_eps, "", range("> 0"), "RMSNorm epsilon")),
      family_key(key("rope-theta", &model::rope_theta, "", range("> 0"), "rotary embedding base")),
      key("seq-len", &model::seq_len, "bytes per sample", range(">= 1"), "context length"),
      key("microbatch", &model::microbatch, "", range(">= 1"), "samples per microbatch"),
      key("lr", &model::lr, "", range("(0, 1)"), "peak learning rate"),
      key("weight-decay", &model::weight_decay, "", range(">= 0"), "decoupled weight decay on 2-D weights"),
      key("beta1", &model::beta1, "", range("[0, 1)"), "first-moment decay (AdamW, LAMB)"),
      key("beta2", &model::beta2, "", range("[0, 1)"), "second-moment decay (AdamW, LAMB)"),
      key("grad-clip", &model::grad_clip, "", range(">= 0"),
          "clip the model's gradient norm per step to this (a swarm's stage: its own norm with the other stages' "
          "latest); 0 = off"),
      key("optimizer", &model::optimizer, "", one_of({"adamw", "lamb"}),
          "adamw | lamb (AdamW's moments with a trust ratio per parameter tensor, the paper's for its 1B model)"),
      key("lr-schedule", &model::lr_schedule, "", one_of({"constant", "cosine"}),
          "constant | cosine (from --lr after --warmup-steps down to --min-lr at --max-steps), by the stage's "
          "optimizer step"),
      key("warmup-steps", &model::warmup_steps, "", range(">= 0"),
          "linear learning-rate warm-up over this many optimizer steps; 0 = none"),
      key("min-lr", &model::min_lr, "", range(">= 0"), "cosine: the learning rate at --max-steps"),
      key("seed", &model::seed, "", {}, "seed of parameter initialisation and data sampling"),
      key("tokenizer", &model::tokenizer, "", {},
          "bytes (each byte a token) or a SentencePiece model file (--role tokenizer makes one); every role of a swarm "
          "needs the same"),
      keys::text_key<model>("vocab", vocab_text, set_vocab, {},
                            "vocabulary size: auto (the tokenizer's: 256 for bytes) or a number the tokenizer must "
                            "have"),

      key("heartbeat", &net::heartbeat_s, "seconds", range("> 0"), "CAF heartbeat interval"),
      key("connection-timeout", &net::connection_timeout_s, "seconds", range("> 0"),
          "drop a connection silent this long"),
      key("coordinator-wait", &net::coordinator_wait_s, "seconds", range("> 0"),
          "keep dialing an unreachable coordinator this long (at start, or after losing it), then exit 1"),
      key("control", &net::control, "", {},
          "coordinator, server, trainer, status: etcd://HOST:PORT[,HOST:PORT...]: coordinators campaign for "
          "leadership through this etcd cluster and nodes follow the leader (no --coordinator needed); empty: one "
          "coordinator at --coordinator"),
      key("control-lease", &net::control_lease_s, "seconds", range(">= 1"),
          "coordinator with --control: the leader's etcd lease; a dead leader is replaced about this long after it "
          "died (etcd's minimum applies: 2 with its default timings)"),
      key("control-ca", &net::control_ca, "", {},
          "etcd over TLS (with --control): PEM certificate of the CA that signed etcd's certificates (etcd's own "
          "TLS, beside --tls-ca)"),
      key("control-cert", &net::control_cert, "", {},
          "etcd over TLS (with --control): this node's PEM client certificate for etcd (with --control-key; etcd's "
          "--client-cert-auth)"),
      key("control-key", &net::control_key, "", {},
          "etcd over TLS (with --control): the PEM key of --control-cert (unencrypted)"),
      key("chunk-bytes", &net::chunk_bytes, "bytes", range(">= 1024"), "largest single message payload"),
      key("bulk-min-bytes", &net::bulk_min_bytes, "bytes", range(">= 0"),
          "payloads at least this large go over a dedicated bulk connection (0 = all through CAF)"),
      key("bulk-budget", &net::bulk_budget_mib, "MiB", range(">= 0"),
          "bulk frames being received at once, all peers together (what a stranger can make a node hold); "
          "0 = 4x the model's largest payload, at least 256; never below one largest payload"),
      key("tls-ca", &net::tls_ca, "", {},
          "mutual TLS: PEM certificate of the cluster CA (with --tls-cert and --tls-key)"),
      key("tls-cert", &net::tls_cert, "", {},
          "mutual TLS: PEM certificate of this node, signed by the cluster CA and naming this node's --role "
          "(scripts/make_certs.sh ROLES; peers refuse what its roles do not send)"),
      key("tls-key", &net::tls_key, "", {}, "mutual TLS: PEM private key of this node's certificate (unencrypted)"),

      key("port", &coord::port, "", range("[0, 65535]"), "coordinator: TCP port to listen on; 0 = any free port", own),
      key("port-file", &coord::port_file, "", {}, "coordinator: write the bound port to this file", own),
      key("http-port", &coord::http_port, "",
          range("[-1, 65535]").says("must be in [0, 65535] (-1: none, for the cluster)"),
          "coordinator: serve the status page, /api/status and /metrics on this port; 0 = none (cluster: any "
          "free port, -1 = none)",
          own),
      key("http-host", &coord::http_host, "", {},
          "coordinator: address the HTTP port binds to (127.0.0.1: this machine only; 0.0.0.0: every interface)", own),
      key("http-token", &coord::http_token, "", check::custom(valid_http_token, http_token_rule),
          "coordinator: the status page, /api/status and /metrics answer only requests carrying this token "
          "(Authorization: Bearer TOKEN, or ?token=TOKEN in a browser), 401 otherwise; empty = anyone who reaches "
          "the port. Seen by ps on this machine: prefer the config file",
          own),
      key("averaging-timeout", &coord::averaging_timeout_s, "seconds", range("> 0"), averaging_timeout_help()),
      key("rebalance", &coord::rebalance, "", one_of({"on", "off"}),
          "coordinator: on | off (servers stay on their stage; cluster restarts go back to theirs)"),
      key("rebalance-period", &coord::rebalance_period_s, "seconds", range("> 0"),
          "coordinator: time between load moves (one server each; empty or thin stages are served at once)"),
      key("rebalance-min-gain", &coord::moves, &policy::rebalance_config::min_gain, "", range(">= 0"),
          "coordinator: move only when the slowest stage's predicted capacity rises by more than this fraction"),
      key("ban-cooldown", &coord::ban_cooldown_s, "seconds", range(">= 0"),
          "coordinator: a server banned on a trainer's verification evidence is refused this long"),
      key("min-replicas", &coord::moves, &policy::rebalance_config::min_replicas, "", range(">= 1"),
          "coordinator: servers per stage kept before optimising throughput, where other stages can spare them"),

      key("coordinator", &server::coordinator, "", {},
          "server, trainer, status, generate: HOST:PORT of the coordinator", own),
      keys::text_key<server>("stage", stage_text, set_stage, {},
                             "server: pipeline stage to serve, 0-based, or auto: where the coordinator needs it", own),
      key("host", &server::host, "", {},
          "server, trainer, coordinator: address peers use to reach this process (its actors and its bulk "
          "connection); without TLS its ports listen on this address only (127.0.0.1 unless given)",
          own),
      key("server-port", &server::port, "", range("[0, 65535]"), "server: TCP port to listen on; 0 = any free port",
          own),
      key("bulk-port", &server::bulk_port, "", range("[0, 65535]"),
          "server, trainer: TCP port of the bulk connection (activations, gradients, state) on --host; 0 = any free "
          "port",
          own),
      key("batch-size", &server::batch_size, "", range(">= 1"),
          "samples per optimizer step: stage-wide target batch (coordinator), batch (local), reported step "
          "(trainer)"),
      key("slowdown", &server::slowdown, "", range(">= 1"), "server: emulate a device this many times slower (>= 1)",
          own),
      key("averaging-compression", &server::averaging_compression, "", compressions,
          "server: encoding of the all-reduce pieces it sends: none | fp16 | blockwise8"),
      key("stale-wait", &server::stale_wait_s, "seconds", range(">= 0"),
          "server: a request that adds gradients waits up to this long for a round of its stage in flight to step, "
          "so its gradient is not a step stale; 0 = never waits (rounds overlap compute fully)"),
      key("activation-cache-mb", &server::activation_cache_mb, "MiB", range("[0, 1048576]"),
          "server: forwards kept with their autograd graphs for their backward, which then does not recompute "
          "them (estimated from the activations' shapes, oldest dropped first; a step drops them all); 0 = off"),
      key("max-outstanding", &server::admission, &policy::admission_config::max_outstanding, "", range(">= 0"),
          "server: requests it promises to take at once (granted and not yet answered: on their way, queued or "
          "computing); a trainer asking beyond it hears busy and tries another server; 0 = no limit"),
      keys::text_key<server>(
          "fault", fault_text, set_fault, one_of(fault_names()),
          "server, test hook: none | hang-forward | hang-backward | hang-round | fail-round (gives the Nth round it "
          "holds gradient in up before sending any part, then goes on) | hang-state; and lies, each needing "
          "--allow-faults: noise (every forward's outputs and backward's input gradients are noise of their scale) | "
          "flip (its all-reduce contribution negated and scaled by 10) | stale (computes on parameters --fault-after "
          "steps old, at most 3, claiming the current step) | drop-half (every second microbatch's gradient never "
          "computed, its samples claimed all the same)",
          own),
      key("fault-after", &server::fault_after, "", range(">= 1"),
          "server, test hook: the Nth request (or round) of that kind hangs; stale: steps behind", own),
      key("allow-faults", &server::allow_faults, "", {},
          "server: let --fault make this server lie (noise, flip, stale, drop-half), for tests and benchmarks of "
          "issue #47's defences only",
          own),
      key("aggregation", &coord::aggregation, "", one_of({"mean", "centered-clip"}),
          "coordinator: how each stage's all-reduce combines its members' gradients: mean (weighted by samples) | "
          "centered-clip (CenteredClip, robust to a minority of wrong gradients; see --clip-radius)"),
      key("clip-radius", &coord::clip_radius, "", range("> 0"),
          "coordinator, centered-clip: each member's pull on the mean is clipped to this many times the members' "
          "median "
          "distance from it"),
      key("clip-iterations", &coord::clip_iterations, "", range("[1, 100]"),
          "coordinator, centered-clip: iterations of the clipped mean"),

      key("corpus", &trainer::corpus, "", {}, "training text: a file, or a folder of text files (bytes; see --data)"),
      key("data", &trainer::data, "", {},
          "trainer, local: train on the token shards of this folder (--role prepare) instead of --corpus"),
      key("eval-every", &trainer::eval_every, "", range(">= 0"),
          "trainer, local: measure the validation loss (--data's held-out shards) at step 0 and every this many "
          "steps; 0 = never"),
      key("eval-tokens", &trainer::eval_tokens, "", range(">= 1"), "trainer, local: validation tokens per measurement"),
      keys::text_key<trainer>("trainer-slot", slot_text, set_slot, {},
                              "trainer: which trainer of the swarm this is, 0-based: seeds its data sampler and names "
                              "its checkpoint slot; auto: the lowest free slot with --checkpoint-dir, else its process "
                              "id (each run samples anew)",
                              own),
      key("in-flight", &trainer::in_flight, "", range(">= 1"), "trainer: microbatches in the pipeline at once"),
      key("max-steps", &trainer::max_steps, "", range(">= 0"), "stop after this many steps; 0 = until Ctrl-C"),
      key("forward-timeout", &trainer::forward_timeout_s, "seconds", range("> 0"),
          "trainer: deadline of one forward request"),
      key("backward-timeout", &trainer::backward_timeout_s, "seconds", range("> 0"),
          "trainer: deadline of one backward request"),
      key("max-retries", &trainer::attempts, &policy::attempt_config::max_attempts, "", range(">= 1"),
          "trainer: attempts per stage request before a microbatch is dropped"),
      key("no-server-wait", &trainer::no_server_wait_s, "seconds", range("> 0"),
          "trainer: how long a request waits for a stage without servers"),
      keys::text_key<trainer>("routing", routing_text, set_routing, one_of({"swarm", "static"}),
                              "trainer: swarm (throughput-weighted, rerouting) | static (pinned)"),
      key("compression", &trainer::compression, "", compressions,
          "trainer: encoding of activations and gradients between stages (all four directions): none | fp16 | "
          "blockwise8"),
      key("ema-alpha", &trainer::router, &policy::routing_config::alpha, "", range("(0, 1]"),
          "trainer: weight of the newest sample in the throughput average"),
      key("backward-cost", &trainer::router, &policy::routing_config::backward_cost, "", range("> 0"),
          "trainer: a backward counts as this many forwards"),
      key("ban-base", &trainer::router, &policy::routing_config::ban_base_s, "seconds", range("> 0"),
          "trainer: first ban of a failing server (doubles per repeat)"),
      key("ban-max", &trainer::router, &policy::routing_config::ban_max_s, "seconds", range("> 0"),
          "trainer: longest ban"),
      key("busy-retries", &trainer::attempts, &policy::attempt_config::busy_retries, "", range(">= 0"),
          "trainer: a request first asks its server for room; after this many busy answers it is sent without "
          "asking; 0 = never ask"),
      key("commit-grace", &trainer::commit_grace, "", range("[0, 1)"),
          "trainer: servers must commit this fraction of a request's deadline before it ends"),
      key("verify-fraction", &trainer::verify_fraction, "", range("[0, 1]"),
          "trainer: share of forwards re-sent to a second server of their stage and compared (a third decides a "
          "disagreement, the minority is charged); 0 = no verification"),
      key("verify-probation", &trainer::verify_probation, "", range(">= 0"),
          "trainer: every forward a server new to this trainer answers is verified until it agreed this many times "
          "(a liar early in a run does lasting harm), then --verify-fraction; 0 = no probation (each trainer checks "
          "each server: in a swarm of many trainers and servers this costs most)"),
      key("verify-strikes", &trainer::verify_strikes, "", range(">= 1"),
          "trainer: charges that ban a server from this trainer and report it, with the evidence, to the "
          "coordinator"),

      key("checkpoint-dir", &ckpt::dir, "", {},
          "server, trainer, local: keep checkpoints in this folder and resume from them; empty = none"),
      key("checkpoint-every", &ckpt::every, "",
          check::custom(valid_interval, "must be a number of steps (e.g. 100) or of seconds (e.g. 60s), above 0"),
          "checkpoint every N optimizer steps (N) or every N seconds (Ns)"),
      key("checkpoint-keep", &ckpt::keep, "", range(">= 1"), "newest checkpoints kept per stage and per trainer"),

      key("servers-per-stage", &cluster::servers_per_stage, "", range(">= 1"), "cluster: server processes per stage",
          own),
      key("trainers", &cluster::trainers, "", range(">= 1"), "cluster: trainer processes", own),
      key("chaos", &cluster::chaos, "", one_of({"none", "kill", "stop", "mixed"}),
          "cluster: none | kill (SIGKILL, fresh process later) | stop (SIGSTOP/SIGCONT) | mixed (either)", own),
      key("chaos-every", &cluster::chaos_every_s, "seconds", range("> 0"), "cluster: hit one random server this often",
          own),
      key("chaos-down", &cluster::chaos_down_s, "seconds", range(">= 0"),
          "cluster: restart (kill) or continue (stop) it after", own),
      key("chaos-stage", &cluster::chaos_stage, "", range(">= -1"), "cluster: only hit servers of this stage; -1 = any",
          own),
      key("chaos-seed", &cluster::chaos_seed, "", {}, "cluster: seed of the victim choice", own),
      key("chaos-coordinator-every", &cluster::chaos_coordinator_every_s, "seconds", range(">= 0"),
          "cluster: SIGKILL the coordinator this often (restarted at once on its port; 0 = never)", own),
      key("chaos-coordinator-action", &cluster::chaos_coordinator_action, "", one_of({"kill", "stop"}),
          "cluster: what --chaos-coordinator-every does to the (leading) coordinator: kill (SIGKILL) | stop (SIGSTOP, "
          "SIGCONT after --chaos-down)",
          own),
      key("control-replicas", &cluster::control_replicas, "", range("[0, 7]"),
          "cluster: 0 = one coordinator, restarted when it dies; N = N etcd members on loopback (data in the run's "
          "folder) and two coordinator candidates elected through them (--control is set for every child)",
          own),
      key("chaos-wipe-at", &cluster::chaos_wipe_at_s, "seconds", range(">= 0"),
          "cluster: once, this long after the start, SIGKILL every server of one stage (--chaos-stage, or random; "
          "0 = never)",
          own),
      key("server-slowdowns", &cluster::server_slowdowns, "", {},
          "cluster: per-server --slowdown, comma-separated, stage-major launch order (e.g. 1,3,1,1)", own),
      key("stage-servers", &cluster::stage_servers, "", {},
          "cluster: servers per stage in stage order (e.g. 3,1); overrides servers-per-stage", own),

      key("prompt", &gen::prompt, "", {}, "generate: the text to continue (empty: a document's start)", own),
      key("max-new-tokens", &gen::max_new_tokens, "", range(">= 1"),
          "generate: tokens to generate at most (fewer when the model ends the document)", own),
      key("temperature", &gen::temperature, "", range(">= 0"), "generate: softmax temperature; 0 = greedy (argmax)",
          own),
      key("top-k", &gen::top_k, "", range(">= 0"), "generate: sample among the k likeliest tokens; 0 = all", own),
      key("sample-seed", &gen::sample_seed, "", {},
          "generate: seed of the sampling (--seed is the model's initialisation, part of its hash)", own),
      key("kv-cache", &gen::kv_cache, "", one_of({"on", "off"}),
          "generate: on = keep past keys and values (linear in the length); off = recompute the window for "
          "every token",
          own),

      key("input", &data::input, "", {},
          "tokenizer, prepare: text files and folders to read (several: --input A B, or one per line in a config "
          "file)",
          own),
      key("vocab-size", &data::vocab_size, "", range("[300, 1000000]"), "tokenizer: ids in the model to train", own),
      key("encode", &data::encode, "", {},
          "tokenizer: print the ids of each line of standard input, space-separated (with --tokenizer FILE)", own),
      key("val-fraction", &data::val_fraction, "", range("[0, 0.5]"),
          "prepare: fraction of documents held out for validation (chosen by a hash of each document's name)", own),
      key("shard-tokens", &data::shard_tokens, "", range(">= 1024"), "prepare: tokens per shard file", own),
  };
  return rows;
}

std::vector<keys::binding> bind_keys(app_config& c) {
  return keys::bind_all(swarm_keys(), c, c.model, c.net, c.coordinator, c.server, c.trainer, c.checkpoint, c.cluster,
                        c.data, c.generate);
}

}  // namespace swarm
