// Subcommands of the ndtrain CLI. Each returns the process exit code and throws
// ndt::Error for bad input (caught and printed once in main).
#pragma once

#include <string>
#include <vector>

namespace ndt {

int run_train(const std::string& config_path, const std::vector<std::string>& overrides);
int run_prepare(const std::vector<std::string>& inputs, const std::string& out_dir, double val_fraction);
int run_config_doc();

struct TrainBenchOptions {
  std::string preset = "gpt2-124m";
  int batch = 8;
  int seq_len = 256;
  int threads = 1;
  int steps = 3;
};
int run_bench_train(const TrainBenchOptions& options);

}  // namespace ndt
