// ndtrain: distributed training of transformer language models.
//   ndtrain train CONFIG [--set section.key=value ...]
//   ndtrain prepare INPUT... --out DIR [--val-fraction F]
//   ndtrain bench train [--preset NAME] [--batch B] [--seq T] [--threads N] [--steps S]
//   ndtrain config
#include "apps/ndtrain/commands.h"
#include "core/error.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdio>
#include <exception>

int main(int argc, char** argv) {
  CLI::App app{"ndtrain: distributed training for transformer language models"};
  app.require_subcommand(1);

  std::string config_path;
  std::vector<std::string> overrides;
  auto* train = app.add_subcommand("train", "Train a model described by a TOML config");
  train->add_option("config", config_path, "Config file (see `ndtrain config` for every key)")->required();
  train->add_option("--set", overrides, "Override a config key: section.key=value (repeatable)");

  std::vector<std::string> inputs;
  std::string out_dir;
  double val_fraction = 0.1;
  auto* prepare = app.add_subcommand("prepare", "Turn text files or folders into byte-level token shards");
  prepare->add_option("inputs", inputs, "Text files or folders (folders: every text file inside, sorted)")
      ->required();
  prepare->add_option("--out", out_dir, "Folder for train.bin and val.bin")->required();
  prepare->add_option("--val-fraction", val_fraction, "Fraction of the bytes (the end) kept for validation");

  auto* config = app.add_subcommand("config", "Print every config key with its default and meaning");

  ndt::TrainBenchOptions bench_options;
  auto* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  auto* bench_train = bench->add_subcommand("train", "Training-step throughput against sgemm, and memory");
  bench_train->add_option("--preset", bench_options.preset, "Model preset");
  bench_train->add_option("--batch", bench_options.batch, "Sequences per step");
  bench_train->add_option("--seq", bench_options.seq_len, "Tokens per sequence");
  bench_train->add_option("--threads", bench_options.threads, "Compute threads");
  bench_train->add_option("--steps", bench_options.steps, "Timed steps (after one warm-up step)");

  CLI11_PARSE(app, argc, argv);
  try {
    if (*train) return ndt::run_train(config_path, overrides);
    if (*prepare) return ndt::run_prepare(inputs, out_dir, val_fraction);
    if (*config) return ndt::run_config_doc();
    if (*bench_train) return ndt::run_bench_train(bench_options);
  } catch (const ndt::Error& e) {
    std::fflush(stdout);
    fmt::print(stderr, "ndtrain: error: {}\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    fmt::print(stderr, "ndtrain: internal error: {}\n", e.what());
    return 2;
  }
  return 0;
}
