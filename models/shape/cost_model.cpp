#include "models/shape/cost_model.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include "config/family.hpp"
#include "models/shape/partition.hpp"

namespace swarm {

bool model_shape::operator==(const model_shape& o) const {
  return model.arch == o.model.arch && model.d_model == o.model.d_model && model.seq_len == o.model.seq_len &&
         model.vocab == o.model.vocab && model.n_layers == o.model.n_layers &&
         model.kv_heads() * o.model.n_heads == o.model.kv_heads() * model.n_heads &&
         model.ffn_width() == o.model.ffn_width() && model.share_layers == o.model.share_layers &&
         model.microbatch == o.model.microbatch && stages == o.stages && compression == o.compression &&
         model.boundary == o.model.boundary;
}

double forward_madds(const model_shape& s, int stage) {
  const auto spans = partition_layers(s.model, s.stages);
  if (stage < 0 || stage >= static_cast<int>(spans.size()))
    return 0;
  const auto d = static_cast<double>(s.model.d_model);
  const auto t = static_cast<double>(s.model.seq_len);
  const auto& span = spans[static_cast<size_t>(stage)];
  const double head = span.has_head() ? d * static_cast<double>(s.model.vocab) : 0;
  return t * (span.blocks() * (block_matrix_madds(s.model) + 2 * t * d) + head);
}

int64_t stage_parameters(const model_shape& s, int stage) {
  const auto spans = partition_layers(s.model, s.stages);
  if (stage < 0 || stage >= static_cast<int>(spans.size()))
    return 0;
  const auto& span = spans[static_cast<size_t>(stage)];
  const int64_t d = s.model.d_model;
  const auto& family = family_of(s.model);
  const int64_t norm = family.norm == norm_kind::layer_norm ? 2 * d : d;         // gain and bias, or gain alone
  int64_t n = span.blocks() / s.model.share_layers * block_parameters(s.model);  // shared blocks count once
  if (span.has_embedding())  // a position embedding only where positions are not rotary
    n += (s.model.vocab + (family.learned_positions ? s.model.seq_len : 0)) * d;
  if (span.has_head())
    n += norm + d * s.model.vocab;   // final norm, head without bias
  if (s.model.boundary != "none") {  // --boundary: up into the stage, norm and down (bottleneck) out of it
    const int64_t w = s.model.wire_width(), bias = family.linear_bias ? 1 : 0;
    if (!span.has_embedding())
      n += (w + bias) * d;
    if (!span.has_head())
      n += norm + (s.model.boundary_kind().first == "bottleneck" ? (d + bias) * w : 0);
  }
  return n;
}

uint64_t largest_payload_bytes(const model_shape& s) {
  int64_t params = 0;
  for (int k = 0; k < s.stages; ++k)
    params = std::max(params, stage_parameters(s, k));
  const int64_t values = s.model.microbatch * s.model.seq_len * s.model.d_model;
  const int64_t largest = std::max(3 * 4 * params, 2 * 4 * values + 8 * s.model.microbatch * s.model.seq_len);
  return static_cast<uint64_t>(largest + largest / 4) + (uint64_t{1} << 20);
}

double nominal_bytes_per_value(const std::string& compression) {
  if (compression == "none")
    return 4;
  if (compression == "fp16")
    return 2;
  return 1.0 + 4.0 / static_cast<double>(blockwise8_block_values);
}

double wire_bytes_per_value(const std::string& compression, const calibration& cal) {
  if (compression != "none" && compression != "fp16" && compression == cal.shape.compression)
    return cal.bytes_per_value;
  return nominal_bytes_per_value(compression);
}

double request_madds(const model_shape& s, int stage, bool backward) {
  const double f = forward_madds(s, stage) * static_cast<double>(s.model.microbatch);
  const bool last = stage == s.stages - 1;
  if (backward)
    return last ? 0 : 3 * f;
  return last ? 3 * f : f;
}

std::vector<stage_cost> request_costs(const model_shape& s, const calibration& cal) {
  const auto spans = partition_layers(s.model, s.stages);
  if (spans.empty())
    return {};
  const auto madd_cost = stage_costs(s.model, s.stages);
  const bool measured = s == cal.shape && cal.forward_s.size() == spans.size() && cal.backward_s.size() == spans.size();
  const double values = static_cast<double>(s.model.microbatch * s.model.seq_len * s.model.wire_width());
  const double tokens = static_cast<double>(s.model.microbatch * s.model.seq_len);
  const double act = values * wire_bytes_per_value(s.compression, cal);
  const double codec = values * cal.codec_s_per_value;
  std::vector<stage_cost> out;
  for (const auto& span : spans) {
    const int k = span.stage;
    stage_cost c;
    const bool last = span.has_head();
    const auto model_s = [&](bool backward) {
      const double m = request_madds(s, k, backward);
      return m > 0 ? cal.request_overhead_s + cal.seconds_per_madd * m : 0.0;
    };
    c.forward_s = measured ? cal.forward_s[static_cast<size_t>(k)] : model_s(false);
    c.backward_s = measured ? cal.backward_s[static_cast<size_t>(k)] : model_s(true);
    // The server decodes what comes in and encodes what goes out (token ids are not coded).
    // Values coded per forward: its inputs decoded (after stage 0), then its
    // outputs encoded, or on the last stage the gradient of its inputs (none on stage 0).
    c.forward_s += codec * ((k > 0 ? 1 : 0) + (last ? (k > 0 ? 1 : 0) : 1));
    if (!last)
      c.backward_s += codec * ((k > 0 ? 2 : 1) + (k > 0 ? 1 : 0));
    const double in = k == 0 ? 8 * tokens : act;
    c.forward_in_bytes = in + (last ? 8 * tokens : 0);
    c.forward_out_bytes = last ? (k == 0 ? 8 : act) : act;
    c.backward_in_bytes = last ? 0 : in + act;
    c.backward_out_bytes = last ? 0 : (k == 0 ? 8 : act);
    c.parameters = stage_parameters(s, k);
    c.state_bytes = 3.0 * 4.0 * static_cast<double>(c.parameters);
    c.state_s = cal.state_s_per_byte * c.state_bytes;
    c.step_s = cal.step_s_per_parameter * static_cast<double>(c.parameters);
    c.madds_per_sample = madd_cost[static_cast<size_t>(k)];
    out.push_back(c);
  }
  return out;
}

void fit_calibration(calibration& cal, const std::vector<cost_point>& points) {
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& p : points) {
    if (p.madds <= 0)
      continue;
    n += 1, sx += p.madds, sy += p.seconds, sxx += p.madds * p.madds, sxy += p.madds * p.seconds;
  }
  if (n == 0 || sx <= 0)
    return;
  const double den = n * sxx - sx * sx;
  double slope = den > 0 ? (n * sxy - sx * sy) / den : sy / sx;
  double icpt = den > 0 ? (sy - slope * sx) / n : 0;
  if (icpt < 0 || slope <= 0) {  // through the origin instead: no negative overhead
    slope = sxy / sxx;
    icpt = 0;
  }
  cal.seconds_per_madd = slope;
  cal.request_overhead_s = icpt;
}

namespace {

std::string join(const std::vector<double>& v) {
  std::ostringstream o;
  o.precision(6);
  for (size_t i = 0; i < v.size(); ++i)
    o << (i ? "," : "") << v[i];
  return o.str();
}

}  // namespace

std::vector<double> stage_microbatch_seconds(const calibration& cal) {
  std::vector<double> out;
  for (const auto& c : request_costs(cal.shape, cal))
    out.push_back(c.forward_s + c.backward_s);
  return out;
}

double microbatch_seconds(const calibration& cal) {
  double s = 0;
  for (double x : stage_microbatch_seconds(cal))
    s += x;
  return s;
}

namespace {

/// A per-stage list's value for `stage` (one value: every stage's; empty: `otherwise`).
double of_stage(const std::vector<double>& v, int stage, double otherwise) {
  if (v.empty())
    return otherwise;
  return v.size() == 1 ? v[0] : v.at(static_cast<size_t>(stage));
}

}  // namespace

double cluster_scale(const calibration& cal, int stage) { return of_stage(cal.cluster_scale, stage, 1); }

double cluster_scale(const calibration& cal, int stage, double load) {
  const double busy = cluster_scale(cal, stage);
  if (cal.light_scale.empty() || !(cal.cluster_load > cal.light_load))
    return busy;
  const double light = of_stage(cal.light_scale, stage, busy);
  const double x = std::clamp((load - cal.light_load) / (cal.cluster_load - cal.light_load), 0.0, 1.0);
  return light + x * (busy - light);
}

std::string format_calibration(const calibration& c) {
  std::ostringstream o;
  o.precision(6);
  o << "# swarm calibration: one torch thread, measured by `swarm --role calibrate`; read by swarm-sim\n"
    << "machine = " << c.machine << "\n"
    << "d-model = " << c.shape.model.d_model << "\nseq-len = " << c.shape.model.seq_len
    << "\nvocab = " << c.shape.model.vocab << "\nn-layers = " << c.shape.model.n_layers
    << "\nstages = " << c.shape.stages << "\nmicrobatch = " << c.shape.model.microbatch
    << "\ncompression = " << c.shape.compression << "\n"
    << "forward-s = " << join(c.forward_s) << "   # per stage, one microbatch\n"
    << "backward-s = " << join(c.backward_s) << "\n"
    << "seconds-per-madd = " << c.seconds_per_madd << "\n"
    << "request-overhead-s = " << c.request_overhead_s << "\n"
    << "codec-s-per-value = " << c.codec_s_per_value << "\n"
    << "bytes-per-value = " << c.bytes_per_value << "\n"
    << "step-s-per-parameter = " << c.step_s_per_parameter << "\n"
    << "microbatch-s = " << microbatch_seconds(c)
    << "   # derived: one microbatch through every stage, model and codec (read by scripts/calibrate.sh)\n"
    << "stage-microbatch-s = " << join(stage_microbatch_seconds(c)) << "   # derived: the same per stage\n"
    << "state-s-per-byte = " << c.state_s_per_byte << "\n"
    << "cluster-scale = " << (c.cluster_scale.empty() ? std::string("1") : join(c.cluster_scale)) << "\n"
    << "cluster-load = " << c.cluster_load << "\n"
    << (c.light_scale.empty() ? std::string() : "light-scale = " + join(c.light_scale) + "\n")
    << "light-load = " << c.light_load << "\n"
    << "trainer-s-per-request = " << c.trainer_s_per_request << "\n"
    << "coordinator-s-per-request = " << c.coordinator_s_per_request << "\n"
    << "server-idle-cores = " << c.server_idle_cores << "\n";
  return o.str();
}

namespace {

std::string trim(const std::string& s) {
  const auto a = s.find_first_not_of(" \t\r");
  const auto b = s.find_last_not_of(" \t\r");
  return a == std::string::npos ? std::string() : s.substr(a, b - a + 1);
}

/// The `key = value` lines of `in` ('#' starts a comment); the first line that
/// is neither blank nor one of those: its number in `bad_line`, nullopt.
std::optional<std::map<std::string, std::string>> key_values(std::istream& in, int& bad_line, std::string& bad) {
  std::map<std::string, std::string> kv;
  std::string line;
  for (int no = 1; std::getline(in, line); ++no) {
    if (auto hash = line.find('#'); hash != std::string::npos)
      line.resize(hash);
    if (trim(line).empty())
      continue;
    const auto eq = line.find('=');
    if (eq == std::string::npos) {
      bad_line = no, bad = trim(line);
      return std::nullopt;
    }
    kv[trim(line.substr(0, eq))] = trim(line.substr(eq + 1));
  }
  return kv;
}

/// `text` as a finite number >= 0, else invalid_argument naming it as `what`.
double non_negative(const std::string& text, const std::string& what) {
  size_t used = 0;
  double v = -1;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
  }
  if (used == 0 || text.find_first_not_of(" \t", used) != std::string::npos || !std::isfinite(v) || v < 0)
    throw std::invalid_argument(what + " is not a finite number >= 0");
  return v;
}

}  // namespace

std::optional<calibration> read_calibration(const std::string& path, std::string* error) {
  const auto fail = [&](int line, const std::string& why) -> std::optional<calibration> {
    if (error)
      *error = path + (line > 0 ? ":" + std::to_string(line) : std::string()) + ": " + why;
    return std::nullopt;
  };
  std::ifstream in(path);
  if (!in)
    return fail(0, "cannot read the calibration file (make one with `swarm --role calibrate --out FILE`)");
  int bad_line = 0;
  std::string bad;
  auto read = key_values(in, bad_line, bad);
  if (!read)
    return fail(bad_line, "not key = value: " + bad);
  auto& kv = *read;
  calibration c;
  try {
    const auto num = [&](const char* key, double& into) {
      if (auto it = kv.find(key); it != kv.end())
        into = non_negative(it->second, std::string(key) + " = " + it->second);
    };
    const auto list = [&](const char* key, std::vector<double>& into) {
      if (auto it = kv.find(key); it != kv.end()) {
        std::stringstream ss(it->second);
        for (std::string item; std::getline(ss, item, ',');)
          into.push_back(non_negative(item, std::string(key) + ": " + item));
      }
    };
    double d = 0, t = 0, voc = 0, layers = 0, stages = 0, mb = 0;
    num("d-model", d), num("seq-len", t), num("vocab", voc), num("n-layers", layers), num("stages", stages),
        num("microbatch", mb);
    if (d < 1 || t < 1 || voc < 1 || layers < 1 || stages < 1 || mb < 1)
      return fail(0, "needs d-model, seq-len, vocab, n-layers, stages and microbatch, each >= 1");
    c.shape.model.d_model = static_cast<int64_t>(d);
    c.shape.model.seq_len = static_cast<int64_t>(t);
    c.shape.model.vocab = static_cast<int64_t>(voc);
    c.shape.model.n_layers = static_cast<int64_t>(layers);
    c.shape.model.microbatch = static_cast<int64_t>(mb);
    c.shape.stages = static_cast<int>(stages);
    c.shape.compression = kv.count("compression") ? kv["compression"] : "blockwise8";
    list("forward-s", c.forward_s);
    list("backward-s", c.backward_s);
    num("seconds-per-madd", c.seconds_per_madd);
    num("request-overhead-s", c.request_overhead_s);
    num("codec-s-per-value", c.codec_s_per_value);
    num("bytes-per-value", c.bytes_per_value);
    num("step-s-per-parameter", c.step_s_per_parameter);
    num("state-s-per-byte", c.state_s_per_byte);
    list("cluster-scale", c.cluster_scale);
    list("light-scale", c.light_scale);
    num("cluster-load", c.cluster_load);
    num("light-load", c.light_load);
    num("trainer-s-per-request", c.trainer_s_per_request);
    num("coordinator-s-per-request", c.coordinator_s_per_request);
    num("server-idle-cores", c.server_idle_cores);
    c.machine = kv.count("machine") ? kv["machine"] : "";
  } catch (const std::exception& e) {
    return fail(0, std::string("bad value: ") + e.what());
  }
  if (c.forward_s.size() != static_cast<size_t>(c.shape.stages) || c.backward_s.size() != c.forward_s.size())
    return fail(0, "forward-s and backward-s need one value per stage (" + std::to_string(c.shape.stages) + ")");
  if (c.seconds_per_madd <= 0)
    return fail(0, "seconds-per-madd must be > 0");
  for (const auto& [key, v] : {std::pair{"cluster-scale", &c.cluster_scale}, std::pair{"light-scale", &c.light_scale}})
    if (v->size() > 1 && v->size() != c.forward_s.size())
      return fail(0, std::string(key) + " needs one value, or one per stage (" + std::to_string(c.shape.stages) + ")");
  if (!c.light_scale.empty() && !(c.light_load < c.cluster_load && c.cluster_load <= 1))
    return fail(0, "light-scale needs 0 <= light-load < cluster-load <= 1 (busy fractions of the cores)");
  return c;
}

}  // namespace swarm
