#include "models/hf_weights.hpp"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>

#include <torch/torch.h>

#include "models/checkpoint.hpp"
#include "models/stage_module.hpp"
#include "models/hf_format.hpp"
#include "models/safetensors.hpp"
#include "models/stage_worker.hpp"

namespace swarm {

namespace {

namespace fs = std::filesystem;

std::string shape_text(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i)
    out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

at::ScalarType dtype_of(const std::string& name) {
  if (name == "F32")
    return torch::kFloat;
  if (name == "F16")
    return torch::kHalf;
  if (name == "BF16")
    return torch::kBFloat16;
  if (name == "F64")
    return torch::kDouble;
  return torch::kByte;  // not a weight type: refused by the caller
}

bool readable_dtype(const std::string& name) {
  return name == "F32" || name == "F16" || name == "BF16" || name == "F64";
}

/// A file tensor as float32 in the parameter's layout (transposed back for GPT-2's Conv1D).
torch::Tensor to_param(const safetensor& t, bool transposed) {
  // Copied out rather than wrapped: the file's offsets promise no alignment.
  auto raw = torch::empty(t.shape, torch::TensorOptions().dtype(dtype_of(t.dtype)));
  std::memcpy(raw.data_ptr(), t.data.data(), t.data.size());
  auto f = raw.to(torch::kFloat);
  return (transposed ? f.t() : f).contiguous();
}

/// Names of buffers that Hugging Face files may carry and the model recomputes.
bool recomputed_buffer(const std::string& name) {
  auto ends_with = [&](const std::string& s) {
    return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  return ends_with("rotary_emb.inv_freq") || ends_with(".attn.bias") || ends_with(".attn.masked_bias");
}

/// The name `want` has in `f`: its own, or the first of the family's aliases
/// the file holds (GPT-2 files as OpenAI's conversion wrote them).
std::string file_alias(const safetensors_file& f, const hf_tensor& want, const model_family& family) {
  if (f.find(want.file_name) || !family.hf_aliases)
    return want.file_name;
  for (const auto& alias : family.hf_aliases(want.file_name))
    if (f.find(alias))
      return alias;
  return want.file_name;
}

}  // namespace

result<std::string> write_hf_weights(const model_config& m, const named_tensors& params) {
  const auto layout = hf_layout(m);
  std::vector<torch::Tensor> keep;  // owns the bytes the safetensor views point at
  std::vector<safetensor> tensors;
  keep.reserve(layout.size());
  for (const auto& t : layout) {
    const auto it = params.find(t.param);
    if (it == params.end())
      return error(errc::BAD_REQUEST, "no parameter " + t.param + " for " + t.file_name);
    auto v = it->second.detach().to(torch::kCPU, torch::kFloat);
    keep.push_back((t.transposed ? v.t() : v).contiguous());
    const auto& k = keep.back();
    if (k.sizes().vec() != t.shape)
      return error(errc::BAD_REQUEST, "parameter " + t.param + " is " + shape_text(k.sizes().vec()) + ", " +
                                          t.file_name + " must be " + shape_text(t.shape));
    tensors.push_back(
        {t.file_name, "F32", t.shape, std::string_view(static_cast<const char*>(k.data_ptr()), k.nbytes())});
  }
  // "format": transformers reads a safetensors file only when it says pt.
  return write_safetensors(tensors, {{"format", "pt"}, {"swarm_model", m.arch}});
}

result<named_tensors> read_hf_weights(const model_config& m, const std::string& path) {
  auto bad = [&](const std::string& what) { return error(errc::BAD_CONFIG, path + ": " + what); };
  if (auto err = whole_model_error(m, path))
    return err;
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return bad("cannot open: " + std::string{std::strerror(errno)});
  // Read once into one buffer: weights files run to gigabytes, and a stream
  // buffer copied into a string would hold them twice before the tensors a third time.
  in.seekg(0, std::ios::end);
  const auto size = static_cast<std::streamoff>(in.tellg());
  in.seekg(0);
  if (size < 0)
    return bad("cannot tell its size");
  std::string bytes(static_cast<size_t>(size), '\0');
  if (!in.read(bytes.data(), size))
    return bad("could read only " + std::to_string(in.gcount()) + " of its " + std::to_string(size) + " bytes");
  auto file = parse_safetensors(bytes);
  if (!file)
    return bad(file.error().what());
  const auto layout = hf_layout(m);
  named_tensors out;
  std::set<std::string> used;
  for (const auto& want : layout) {
    const std::string name = file_alias(*file, want, family_of(m));
    const auto* t = file->find(name);
    if (!t)
      return bad("tensor " + want.file_name + " is missing (this model: " + m.arch + ", " + std::to_string(m.n_layers) +
                 " layers, d_model " + std::to_string(m.d_model) + ")");
    used.insert(name);
    if (!readable_dtype(t->dtype))
      return bad("tensor " + name + " is " + t->dtype + ": only F32, F16, BF16 and F64 weights can be read");
    if (t->shape != want.shape)
      return bad("tensor " + name + " is " + shape_text(t->shape) + ", this model needs " + shape_text(want.shape));
    auto value = to_param(*t, want.transposed);
    if (!all_finite(value))
      return bad("tensor " + name + " holds NaN or Inf");
    const auto [it, first] = out.emplace(want.param, value);
    // A shared block is written once per layer applying it: every copy must agree.
    if (!first && !torch::equal(it->second, value))
      return bad("tensor " + name + " differs from the other layers of its run, which --share-layers " +
                 std::to_string(m.share_layers) + " ties into one block");
  }
  for (const auto& t : file->tensors)
    if (!used.count(t.name) && !recomputed_buffer(t.name))
      return bad("tensor " + t.name + " is not part of this model (more layers, or another family?)");
  return out;
}

result<checkpoint_parameters> read_checkpoint_parameters(const model_config& m, const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return error(errc::BAD_CONFIG, "checkpoint folder " + dir + " does not exist");
  checkpoint_store store(dir, 1);
  const auto found_stages = store.indices(checkpoint_header::kind::stage);
  if (found_stages.empty())
    return error(errc::BAD_CONFIG, dir + " holds no stage checkpoints (stage-K folders)");
  const int stages = found_stages.back() + 1;
  checkpoint_parameters out;
  out.stages = stages;
  for (int k = 0; k < stages; ++k) {
    auto found = store.newest(checkpoint_header::kind::stage, k, static_cast<uint32_t>(stages), m.hash());
    if (!found)
      return found.error();
    if (!*found)
      return error(errc::BAD_CONFIG, store.folder(checkpoint_header::kind::stage, k) +
                                         " holds no usable checkpoint: every stage is needed");
    std::optional<stage_worker> worker;
    try {
      worker.emplace(m, k, stages, "cpu");
    } catch (const std::exception& e) {
      return error(errc::BAD_CONFIG, dir + " holds " + std::to_string(stages) + " stages: " + e.what());
    }
    if (auto err = worker->import_state((*found)->payload))
      return error(errc::BAD_CONFIG, (*found)->path + ": " + err.what());
    const int64_t step = (*found)->header.step;
    out.min_step = k ? std::min(out.min_step, step) : step;
    out.max_step = k ? std::max(out.max_step, step) : step;
    for (auto& [name, value] : worker->named_parameters())
      out.params.emplace(name, value);
  }
  return out;
}

}  // namespace swarm
