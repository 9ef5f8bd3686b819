#include "train/model_source.h"

#include "core/error.h"
#include "core/input_file.h"
#include "interchange/hf_folder.h"
#include "interchange/hf_names.h"
#include "interchange/hf_slice_reader.h"
#include "interchange/llmc.h"
#include "train/model_checkpoint.h"

#include <filesystem>
#include <optional>
#include <set>

namespace ndt {

namespace fs = std::filesystem;

ModelFormat model_format_of(const std::string& path) {
  const fs::path p(path);
  if (is_hf_folder(path)) return ModelFormat::hf_folder;
  if (fs::is_directory(p)) return ModelFormat::checkpoint;
  if (p.extension() == ".safetensors") return ModelFormat::safetensors;
  if (p.extension() == ".bin") return ModelFormat::llmc;
  NDT_CHECK(!fs::exists(p), "cannot tell the format of {}: expected *.safetensors, *.bin (llm.c) or a "
            "checkpoint directory", path);
  // A new path with another extension is a checkpoint folder to create, unless the
  // extension names a model file format: "model.pt" is not a folder (a dotted folder name
  // such as "gpt2-1.5b" is).
  static const std::set<std::string> other_formats = {".pt",  ".pth", ".ckpt", ".gguf",  ".ggml", ".onnx",
                                                      ".h5",  ".hdf5", ".keras", ".pb",   ".tflite", ".npz",
                                                      ".npy", ".pkl", ".pickle", ".msgpack", ".json", ".txt",
                                                      ".tar", ".zip", ".gz"};
  NDT_CHECK(!other_formats.count(p.extension().string()),
            "cannot write {}: {} files are not a format ndtrain writes (*.safetensors: Hugging Face names; *.bin: "
            "llm.c; a checkpoint folder: any other path)",
            path, p.extension().string());
  return ModelFormat::checkpoint;
}

const char* model_format_name(ModelFormat format) {
  switch (format) {
    case ModelFormat::safetensors: return "Hugging Face safetensors";
    case ModelFormat::llmc: return "llm.c checkpoint";
    case ModelFormat::hf_folder: return "Hugging Face model folder";
    case ModelFormat::checkpoint: return "ndtrain checkpoint";
  }
  return "";
}

namespace {

void check_model_file(const std::string& path) {
  const std::string problem = input_file_problem(path);
  NDT_CHECK(problem.empty(), "model file {} {}", path, problem);
}

}  // namespace

ModelState read_model_file(const std::string& path, const std::optional<ModelConfig>& hint) {
  switch (model_format_of(path)) {
    case ModelFormat::safetensors:
      check_model_file(path);
      return load_safetensors_hf(path, hint);
    case ModelFormat::llmc:
      check_model_file(path);
      return load_llmc(path);
    case ModelFormat::hf_folder: return read_hf_folder_model(open_hf_folder(path));
    case ModelFormat::checkpoint: return read_model_checkpoint(resolve_checkpoint(path));
  }
  fail("unknown model format of {}", path);
}

}  // namespace ndt
