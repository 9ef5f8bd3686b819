// The layers of src/ (docs/design.md): a folder may include headers only from the
// folders below it, so no arrow points up. In particular the model includes nothing
// from parallel/ or comm/ (tensor parallelism reaches it through the model-owned
// TensorParallelRegions), and the model and parallel code call kernels through the
// dispatch (kernels/kernels.h), never a backend such as kernels/cpu directly. CUDA
// sources (.cu) are held to the same layers.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

const fs::path kSource = fs::path(NDT_SOURCE_DIR) / "src";

// What each folder of src/ may include besides itself.
const std::map<std::string, std::set<std::string>> kAllowed = {
    {"core", {}},
    {"kernels", {"core"}},
    {"comm", {"core"}},
    {"tokenizer", {"core"}},
    // Loss masks are checksummed with the checkpoints' CRC32C.
    {"data", {"core", "tokenizer", "checkpoint"}},
    {"checkpoint", {"core"}},
    // Swap files and asynchronous I/O for offload: below parallel, which streams model
    // states through them; checksums are the checkpoints' CRC32C.
    {"offload", {"core", "checkpoint"}},
    {"model", {"core", "kernels"}},
    {"optim", {"core", "kernels", "model"}},
    {"interchange", {"core", "data", "model"}},  // not tokenizer: model files only
    {"parallel", {"core", "kernels", "comm", "model", "optim", "offload"}},
    {"train",
     {"core", "kernels", "comm", "tokenizer", "data", "checkpoint", "offload", "model", "optim", "interchange",
      "parallel"}},
    // The planner predicts what `ndtrain train` would do, so it sits above train.
    {"plan",
     {"core", "kernels", "comm", "tokenizer", "data", "checkpoint", "offload", "model", "optim", "interchange",
      "parallel", "train"}},
    // The run report reads a run's files; it draws pipeline timelines with parallel's renderer.
    {"report", {"core", "parallel"}},
};

std::string read(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<fs::path> sources_under(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    const std::string ext = entry.path().extension().string();
    if (entry.is_regular_file() && (ext == ".h" || ext == ".cpp" || ext == ".cu")) files.push_back(entry.path());
  }
  return files;
}

// The top folder of src/ a file lies in ("model" for src/model/block.cpp).
std::string layer_of(const fs::path& file) { return fs::relative(file, kSource).begin()->string(); }

TEST(Layering, EveryFolderOfSrcIsKnown) {
  for (const auto& entry : fs::directory_iterator(kSource)) {
    if (entry.is_directory()) {
      EXPECT_TRUE(kAllowed.count(entry.path().filename().string()))
          << "src/" << entry.path().filename().string() << " has no place in the layers of this test";
    }
  }
}

TEST(Layering, NoIncludeGoesUp) {
  const std::regex include(R"(#include\s+"([a-z_]+)/)");
  int checked = 0;
  for (const fs::path& file : sources_under(kSource)) {
    const std::string layer = layer_of(file), text = read(file);
    const std::set<std::string>& allowed = kAllowed.at(layer);
    for (std::sregex_iterator it(text.begin(), text.end(), include), end; it != end; ++it) {
      const std::string target = (*it)[1];
      ++checked;
      EXPECT_TRUE(target == layer || allowed.count(target))
          << fs::relative(file, kSource).string() << " includes " << target << "/ (src/" << layer
          << " may include only its own folder and the layers below it)";
    }
  }
  EXPECT_GT(checked, 100);  // the walk found the sources
}

// src/parallel by axis: what each axis's folder may include of parallel/ besides itself.
// The axes do not know each other, except that the data-parallel strategies read the tp
// group (the norm counts replicated gradients once) and the pipeline drives the gradient
// sync; parallelize(), the memory model and the full-parameter gather, at the top of
// parallel/, compose them and are included by none of them.
const std::map<std::string, std::set<std::string>> kAxisAllowed = {
    {"tensor", {}}, {"context", {}}, {"expert", {}}, {"data", {"tensor"}}, {"pipeline", {"data"}},
};

TEST(Layering, EachParallelAxisIncludesOnlyTheAxesBelowIt) {
  const std::regex include(R"(#include\s+"parallel/([a-z_]+)(/|\.h))");
  int checked = 0;
  for (const auto& entry : fs::directory_iterator(kSource / "parallel")) {
    if (!entry.is_directory()) continue;
    const std::string axis = entry.path().filename().string();
    ASSERT_TRUE(kAxisAllowed.count(axis)) << "src/parallel/" << axis << " has no place in kAxisAllowed";
    for (const fs::path& file : sources_under(entry.path())) {
      const std::string text = read(file);
      for (std::sregex_iterator it(text.begin(), text.end(), include), end; it != end; ++it) {
        const std::string target = (*it)[1], kind = (*it)[2];
        ++checked;
        EXPECT_TRUE(kind == "/" && (target == axis || kAxisAllowed.at(axis).count(target)))
            << fs::relative(file, kSource).string() << " includes parallel/" << target << kind
            << " (parallel/" << axis << " may include only itself and the axes kAxisAllowed lists)";
      }
    }
  }
  EXPECT_GT(checked, 20);
}

TEST(Layering, ModelAndParallelCallKernelsThroughTheDispatch) {
  const std::regex backend(R"((\bcpu::|#include\s+"kernels/cpu/))");
  int files = 0;
  for (const char* dir : {"model", "parallel"}) {
    for (const fs::path& file : sources_under(kSource / dir)) {
      ++files;
      const std::string text = read(file);
      std::smatch m;
      EXPECT_FALSE(std::regex_search(text, m, backend))
          << fs::relative(file, kSource).string() << " uses the CPU backend directly (" << m.str()
          << "): call ndt::kernels (kernels/kernels.h)";
    }
  }
  EXPECT_GT(files, 20);
}

}  // namespace
