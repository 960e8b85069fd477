#include "apps/weight_roles.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>

#include "apps/remote_logits.hpp"
#include "apps/roles.hpp"
#include "models/generator.hpp"
#include "models/stage_module.hpp"
#include "models/hf_format.hpp"
#include "models/hf_weights.hpp"

namespace swarm {

namespace {

namespace fs = std::filesystem;

/// Writes `bytes` to dir/name through a temporary file and a rename: a reader sees all or nothing.
error write_file(const fs::path& dir, const std::string& name, const std::string& bytes) {
  const auto tmp = dir / ("." + name + ".tmp");
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    if (!out)
      return error(errc::INTERNAL, "cannot write " + tmp.string() + ": " + std::strerror(errno));
  }
  std::error_code ec;
  fs::rename(tmp, dir / name, ec);
  if (ec)
    return error(errc::INTERNAL, "cannot rename " + tmp.string() + ": " + ec.message());
  return error{};
}

/// The whole model's weights from --checkpoint-dir or --init-from; says where they came from on stderr.
result<named_tensors> source_weights(const app_config& cfg, const char* who) {
  if (auto err = whole_model_error(cfg.model, who))
    return err;
  if (!cfg.init_from.empty()) {
    auto w = read_hf_weights(cfg.model, cfg.init_from);
    if (w)
      std::cerr << who << ": weights from " << cfg.init_from << "\n";
    return w;
  }
  auto c = read_checkpoint_parameters(cfg.model, cfg.checkpoint.dir);
  if (!c)
    return c.error();
  std::cerr << who << ": weights from " << cfg.checkpoint.dir << ": " << c->stages << " stage(s) at optimizer step "
            << c->min_step;
  if (c->max_step != c->min_step)
    std::cerr << ".." << c->max_step << " (the stages' newest checkpoints differ)";
  std::cerr << "\n";
  return std::move(c->params);
}

/// Prints tokens as text as they come, decoded after the prompt's (so that
/// SentencePiece keeps the space a first piece starts with). It may need the
/// next token to finish a character (byte fallback): text ending in U+FFFD waits.
class text_printer {
public:
  text_printer(const tokenizer& tok, const std::vector<int64_t>& context) : tok_(tok) {
    ids_.assign(context.begin(), context.end());
    if (auto text = tok_.decode(ids_)) {
      printed_text_ = *text;
      printed_ = text->size();
    }
  }
  void add(int64_t id) {
    ids_.push_back(static_cast<int>(id));
    auto text = tok_.decode(ids_);
    if (!text)
      return;
    const std::string replacement = "\xEF\xBF\xBD";
    const bool partial = !tok_.is_bytes() && text->size() >= 3 && text->compare(text->size() - 3, 3, replacement) == 0;
    if (partial || text->size() < printed_ || text->compare(0, printed_, printed_text_) != 0)
      return;
    std::fwrite(text->data() + printed_, 1, text->size() - printed_, stdout);
    std::fflush(stdout);
    printed_text_ = *text;
    printed_ = text->size();
  }

private:
  const tokenizer& tok_;
  std::vector<int> ids_;
  std::string printed_text_;
  size_t printed_ = 0;
};

}  // namespace

result<std::shared_ptr<const named_tensors>> initial_weights(const app_config& cfg) {
  if (cfg.init_from.empty())
    return std::shared_ptr<const named_tensors>{};
  auto w = read_hf_weights(cfg.model, cfg.init_from);
  if (!w)
    return w.error();
  return std::make_shared<const named_tensors>(std::move(*w));
}

int run_export(const app_config& cfg, const tokenizer& tok) {
  auto weights = source_weights(cfg, "export");
  if (!weights) {
    std::cerr << "export: " << weights.error().what() << "\n";
    return 2;
  }
  auto file = write_hf_weights(cfg.model, *weights);
  if (!file) {
    std::cerr << "export: " << file.error().what() << "\n";
    return 2;
  }
  const fs::path out = cfg.out;
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec) {
    std::cerr << "export: cannot create " << out.string() << ": " << ec.message() << "\n";
    return 2;
  }
  std::vector<std::pair<std::string, std::string>> files = {{"model.safetensors", *file},
                                                            {"config.json", hf_config_json(cfg.model)}};
  if (!tok.is_bytes()) {
    std::ifstream in(tok.name(), std::ios::binary);
    std::string model((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof()) {
      std::cerr << "export: cannot read the tokenizer " << tok.name() << "\n";
      return 1;
    }
    files.emplace_back("tokenizer.model", model);
    // What transformers' LlamaTokenizer needs beside the model: --role tokenizer's special pieces.
    files.emplace_back("tokenizer_config.json",
                       "{\n  \"add_bos_token\": false,\n  \"add_eos_token\": false,\n  \"bos_token\": \"<s>\",\n"
                       "  \"eos_token\": \"</s>\",\n  \"tokenizer_class\": \"LlamaTokenizer\",\n"
                       "  \"unk_token\": \"<unk>\"\n}\n");
  }
  for (const auto& [name, bytes] : files)
    if (auto err = write_file(out, name, bytes)) {
      std::cerr << "export: " << err.what() << "\n";
      return 1;
    }
  std::cout << "export: wrote " << (out / "model.safetensors").string() << " (" << hf_layout(cfg.model).size()
            << " tensors, " << file->size() << " bytes, float32, Hugging Face " << family_of(cfg.model).hf_architecture
            << " names";
  if (cfg.model.share_layers > 1)
    std::cout << "; each shared block written once per layer applying it";
  std::cout << "), config.json";
  if (tok.is_bytes())
    std::cout << "; tokenizer bytes: token id = byte value, no file";
  else
    std::cout << ", tokenizer.model, tokenizer_config.json";
  std::cout << std::endl;
  return 0;
}

namespace {

/// What to generate: --prompt's tokens at a document's start, --generate's
/// knobs; nullopt (and why on stderr) when the prompt does not encode.
std::optional<generation_request> generation_of(const app_config& cfg, const tokenizer& tok) {
  const auto& g = cfg.generate;
  generation_request req;
  // A document's start: after its end-of-document token (bytes have none).
  if (tok.eos() >= 0)
    req.context.push_back(tok.eos());
  auto prompt = tok.encode(g.prompt);
  if (!prompt) {
    std::cerr << "generate: --prompt: " << prompt.error().what() << "\n";
    return std::nullopt;
  }
  req.context.insert(req.context.end(), prompt->begin(), prompt->end());
  if (req.context.empty())
    req.context.push_back('\n');
  req.max_new_tokens = g.max_new_tokens;
  req.eos = tok.eos();
  req.seq_len = cfg.model.seq_len;
  req.temperature = g.temperature;
  req.top_k = g.top_k;
  req.seed = g.sample_seed;
  return req;
}

}  // namespace

int run_generate(const app_config& cfg, const tokenizer& tok) {
  set_torch_threads(cfg.threads, 0, cfg.bf16());
  const auto& g = cfg.generate;
  auto prompted = generation_of(cfg, tok);
  if (!prompted)
    return 2;
  auto& req = *prompted;
  const auto& context = req.context;

  std::optional<local_model> local;
  std::unique_ptr<remote_logits> remote;
  next_logits_fn logits;
  std::string how;
  if (!cfg.server.coordinator.empty()) {
    auto r = remote_logits::connect(cfg);
    if (!r) {
      std::cerr << "generate: " << r.error().what() << "\n";
      return r.error().code() == errc::BAD_CONFIG ? 2 : 1;
    }
    remote = std::move(*r);
    logits = [&](const std::vector<int64_t>& tokens, int64_t window) { return remote->next(tokens, window); };
    how = "through the swarm at " + cfg.server.coordinator + ", the window recomputed per token";
  } else {
    auto weights = source_weights(cfg, "generate");
    if (!weights) {
      std::cerr << "generate: " << weights.error().what() << "\n";
      return 2;
    }
    try {
      local.emplace(cfg.model, *weights, g.kv_cache == "on", cfg.bf16());
    } catch (const std::exception& e) {
      std::cerr << "generate: " << e.what() << "\n";
      return 2;
    }
    logits = [&](const std::vector<int64_t>& tokens, int64_t window) { return local->next_logits(tokens, window); };
    how = g.kv_cache == "on" ? "local, KV cache" : "local, the window recomputed per token (--kv-cache off)";
    if (cfg.bf16())
      how += ", bf16";
  }
  req.stopped = [] { return stop_requested.load(); };
  text_printer printer(tok, context);
  result<generation_result> done = error(errc::INTERNAL, "not run");
  try {
    done = generate(req, logits, [&](int64_t id) { printer.add(id); });
  } catch (const std::exception& e) {  // unwinding would wait on the swarm's actor system
    done = error(errc::INTERNAL, e.what());
  }
  std::fputs("\n", stdout);
  std::fflush(stdout);
  if (!done) {
    std::cerr << "generate: " << done.error().what() << "\n";
    if (remote)
      remote->end(1);
    return 1;
  }
  const auto n = static_cast<double>(done->tokens.size());
  std::fprintf(stderr, "generate: %zu tokens in %.2f s: %.1f tokens/s (%s; prompt %zu tokens%s)\n", done->tokens.size(),
               done->seconds, n / std::max(done->seconds, 1e-9), how.c_str(), context.size(),
               done->ended         ? "; the model ended the document"
               : done->interrupted ? "; interrupted"
                                   : "");
  const int code = done->interrupted ? 1 : 0;
  if (remote)
    remote->end(code);
  return code;
}

}  // namespace swarm
