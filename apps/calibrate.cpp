// `swarm --role calibrate`: measures what one request of each stage costs on
// this machine with the config's model (one torch thread unless --threads says
// otherwise, as a server of a local cluster runs), fits the cost model of
// models/shape/cost_model.hpp and writes the file swarm-sim reads.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <thread>

#include "apps/roles.hpp"
#include "base/clock.hpp"
#include "messages/errors.hpp"
#include "messages/tensor_codec.hpp"
#include "messages/wire.hpp"
#include "models/shape/cost_model.hpp"
#include "models/stage_worker.hpp"

namespace swarm {

namespace {

/// Median seconds of `reps` runs of `f` after `warmup` unmeasured ones.
template <class F>
double median_seconds(int warmup, int reps, F&& f) {
  for (int i = 0; i < warmup; ++i)
    f();
  std::vector<double> s;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    s.push_back(seconds_since(t0));
  }
  std::sort(s.begin(), s.end());
  return s[s.size() / 2];
}

std::string machine_name() {
  std::ifstream cpu("/proc/cpuinfo");
  std::string line, model = "unknown cpu";
  while (std::getline(cpu, line))
    if (line.rfind("model name", 0) == 0) {
      model = line.substr(line.find(':') + 2);
      break;
    }
  return model + ", " + std::to_string(std::thread::hardware_concurrency()) + " cores, " +
         std::to_string(torch::get_num_threads()) + " torch thread(s)";
}

/// The wire codec of activations and their gradients, both ends: seconds and
/// bytes per value of `values`.
void measure_codec(calibration& cal, const torch::Tensor& values, int reps) {
  const auto codec = codec_of(cal.shape.compression);
  std::string encoded;
  const double codec_s = median_seconds(1, reps, [&] {
    encoded = encode_values(values, codec);
    auto back = decode_values(encoded, codec, values.numel(), at::kCPU, "calibration");
    if (!back)
      throw std::runtime_error("calibrate: the codec failed: " + describe(back.error()));
  });
  cal.codec_s_per_value = codec_s / static_cast<double>(values.numel());
  cal.bytes_per_value = static_cast<double>(encoded.size()) / static_cast<double>(values.numel());
}

}  // namespace

int run_calibrate(const app_config& cfg) {
  set_torch_threads(cfg.threads > 0 ? cfg.threads : 1);
  const auto& m = cfg.model;
  calibration cal;
  cal.shape = {m, cfg.stages, cfg.trainer.compression};
  torch::manual_seed(1);
  const auto acts = [&] { return torch::randn({m.microbatch, m.seq_len, m.d_model}); };
  const auto tokens = [&] { return torch::randint(0, m.vocab, {m.microbatch, m.seq_len}, torch::kLong); };
  const int reps = 5;
  int64_t parameters = 0;
  double step_s = 0, state_s = 0, state_bytes = 0;
  std::vector<cost_point> points;
  // The config itself, then a twice wider one: two widths pin the seconds per
  // multiply-add apart from the fixed cost of a request.
  for (const int64_t width : {m.d_model, 2 * m.d_model}) {
    model_config mc = m;
    mc.d_model = width;
    const model_shape shape{mc, cal.shape.stages, cal.shape.compression};
    for (int k = 0; k < cfg.stages; ++k) {
      stage_worker worker(mc, k, cfg.stages, cfg.device);
      const bool last = k == cfg.stages - 1;
      const auto in = k == 0 ? tokens() : torch::randn({m.microbatch, m.seq_len, width});
      const auto targets = tokens();
      const auto grad = torch::randn({m.microbatch, m.seq_len, width});
      const auto check = [](const auto& r) {
        if (!r)
          throw std::runtime_error("calibrate: a stage request failed: " + describe(r.error()));
      };
      const double fwd = median_seconds(2, reps, [&] { check(worker.forward(in, last ? &targets : nullptr)); });
      const double bwd = last ? 0.0 : median_seconds(2, reps, [&] { check(worker.backward(in, grad)); });
      points.push_back({request_madds(shape, k, false), fwd});
      if (!last)
        points.push_back({request_madds(shape, k, true), bwd});
      std::cerr << "calibrate: d-model " << width << ", stage " << k << ": forward " << fwd << " s, backward " << bwd
                << " s\n";
      if (width != m.d_model)
        continue;
      std::string state;
      state_s += median_seconds(1, 3, [&] {
        state = worker.export_state();
        if (auto err = worker.import_state(state))
          throw std::runtime_error("calibrate: import_state: " + describe(err));
      });
      state_bytes += static_cast<double>(state.size());
      cal.forward_s.push_back(fwd);
      cal.backward_s.push_back(bwd);
      parameters += worker.parameter_count();
      step_s += median_seconds(1, 3,
                               [&] {
                                 check(worker.forward(in, last ? &targets : nullptr));
                                 worker.apply_step();
                               }) -
                fwd;
    }
  }
  cal.step_s_per_parameter = std::max(step_s, 0.0) / static_cast<double>(parameters);
  cal.state_s_per_byte = state_s / state_bytes;
  measure_codec(cal, acts().flatten(), reps);
  cal.machine = machine_name();
  fit_calibration(cal, points);
  const auto text = format_calibration(cal);
  if (cfg.out == "-") {
    std::cout << text;
  } else {
    std::ofstream out(cfg.out);
    if (!(out << text)) {
      std::cerr << "calibrate: cannot write " << cfg.out << "\n";
      return 1;
    }
    std::cerr << "calibrate: wrote " << cfg.out << " (" << cal.seconds_per_madd * 1e9 << " ns per multiply-add, "
              << cal.request_overhead_s * 1e3 << " ms per request)\n";
  }
  return 0;
}

}  // namespace swarm
