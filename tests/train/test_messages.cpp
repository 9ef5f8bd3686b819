// Messages that mislead (issue 35, class 6), each example fixed as a class: a value's
// message lists what its own key accepts (not another key's); a value a user types as a
// list may have spaces after its separators, everywhere such lists are read; an option
// that does nothing is refused, never ignored; prepare says what is not text instead of
// taking it, or leaving it out, without a word. (A model's own llm.c export refused by
// init_from, convert's .pt destination, NaN and f16 overflow: tests/train/
// test_saved_model_reuse.cpp and tests/interchange/test_convert.cpp.)
#include "../common/command.h"
#include "../common/temp_dir.h"
#include "core/text_list.h"
#include "data/shard.h"
#include "interchange/hf_names.h"
#include "model/transformer.h"
#include "parallel/pipeline/stages.h"
#include "test_support.h"
#include "train/config.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

namespace ndt {
namespace {

const std::string kNdtrain = std::string(NDT_BINARY_DIR) + "/ndtrain";

std::string config_error(std::vector<std::string> sets) {
  try {
    read_run_config("", sets).validate_layout();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Catches: a key's value refused with another key's list (precision.reduce_dtype = "int8"
// called "not a compute dtype" and offered fp16, which reduce_dtype refuses).
TEST(Messages, AValueIsRefusedWithItsOwnKeysChoices) {
  EXPECT_EQ(config_error({"precision.reduce_dtype=int8"}),
            "precision.reduce_dtype = \"int8\" is not a gradient reduction dtype: fp32 or bf16");
  EXPECT_EQ(config_error({"precision.reduce_dtype=fp16"}),
            "precision.reduce_dtype = \"fp16\": gradient sums can overflow fp16's range (65504); use bf16 or fp32");
  EXPECT_EQ(config_error({"precision.compute=int8"}), "precision.compute = \"int8\" is not a compute dtype: fp32, bf16 or fp16");
  EXPECT_EQ(config_error({"precision.reduce_dtype=bf16"}), "");
}

// Catches: "2, 2" refused for its space (parallel.pp_layers), and the other lists a user
// types (debug.corrupt_batches, the CLI's comma lists) parsed by their own rules.
TEST(Messages, ListsMayHaveSpacesAfterTheirSeparators) {
  EXPECT_EQ(split_trimmed(" a ,b,\tc "), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(split_trimmed("a,,b"), (std::vector<std::string>{"a", "", "b"}));
  EXPECT_EQ(split_trimmed(""), (std::vector<std::string>{""}));
  EXPECT_EQ(parse_pipeline_layers("2, 2"), (std::vector<int>{2, 2}));
  EXPECT_EQ(parse_pipeline_layers(" 1 ,3"), (std::vector<int>{1, 3}));
  EXPECT_EQ(config_error({"model.preset=gpt2-tiny", "parallel.pp=2", "parallel.pp_layers=2, 2"}), "");
  EXPECT_EQ(config_error({"parallel.pp=2", "parallel.pp_layers=2,,2"}),
            "parallel.pp_layers = \"2,,2\": \"\" is not a number of blocks");
  EXPECT_EQ(parse_batch_window("40: 2"), (std::pair<int64_t, int64_t>{40, 2}));
  try {
    parse_batch_window("9223372036854775807:2");
    ADD_FAILURE() << "a window ending past 2^63 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("FIRST + COUNT below 2^63"), std::string::npos) << e.what();
  }
}

// Catches: an option that does nothing accepted in silence (--validate-dir without
// --validate; --validate with a model to plan; convert's --n-head for a file that says
// its heads; bench's --cp-mode without --cp).
TEST(Messages, AnOptionThatDoesNothingIsRefused) {
  testing::CommandResult r = testing::run_command(kNdtrain + " plan --validate-dir /tmp/somewhere");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--validate-dir requires --validate"), std::string::npos) << r.output;
  r = testing::run_command(kNdtrain + " plan --validate --preset llama3-8b");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--preset excludes --validate"), std::string::npos) << r.output;
  r = testing::run_command(kNdtrain + " bench train --cp-mode ulysses");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--cp-mode requires --cp"), std::string::npos) << r.output;

  testing::TempDir dir;
  save_safetensors_hf(state_of(Transformer(ModelConfig::preset("gpt2-tiny"), 1)), dir.file("m.safetensors"));
  r = testing::run_command(kNdtrain + " convert --from " + dir.file("m.safetensors") + " --to " + dir.file("out") +
                           " --n-head 4");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--n-head 4 completes a safetensors file without ndtrain metadata, but " +
                          dir.file("m.safetensors") + " (Hugging Face safetensors) describes its model (n_head = 4)"),
            std::string::npos)
      << r.output;
}

// Catches: bench train's --model taking a key outside the model section, or one no model
// has, in silence; and a good one not reaching the model it benchmarks.
TEST(Messages, BenchModelKeysAreTheModelSections) {
  testing::CommandResult r = testing::run_command(kNdtrain + " bench train --model d_model=96 --steps 1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--model d_model=96: give a key of the model section and its value, model.KEY=VALUE"),
            std::string::npos)
      << r.output;
  r = testing::run_command(kNdtrain + " bench train --model model.d_modl=96 --steps 1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("unknown config key \"model.d_modl\""), std::string::npos) << r.output;
  r = testing::run_command(kNdtrain +
                           " bench train --preset gpt2-tiny --model model.n_layer=1 --batch 1 --seq 8 --steps 1 "
                           "--threads 1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const std::string one_layer = fmt::format("({:.2f}M parameters", [] {
    ModelConfig c = ModelConfig::preset("gpt2-tiny");
    c.n_layer = 1;
    return count_parameters(c) / 1e6;
  }());
  EXPECT_NE(r.output.find("bench train: gpt2-tiny model.n_layer=1 " + one_layer), std::string::npos) << r.output;
}

// Catches: prepare tokenising a binary file named on its command line without a word, or
// leaving a folder's binary files out without one.
TEST(Messages, PrepareSaysWhatIsNotText) {
  testing::TempDir dir;
  testing::write_bytes(dir.file("in/blob.dat"), std::string("ab\0cd", 5));
  testing::write_bytes(dir.file("in/text.txt"), "one line of text\nand another one\n");
  testing::CommandResult r = testing::run_command(kNdtrain + " prepare " + dir.file("in/blob.dat") + " --out " +
                                                  dir.file("out"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("prepare input \"" + dir.file("in/blob.dat") + "\" is not text: it holds a NUL byte at "
                          "offset 2"),
            std::string::npos)
      << r.output;
  r = testing::run_command(kNdtrain + " prepare " + dir.file("in") + " --out " + dir.file("out"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("prepare: left out 1 file of " + dir.file("in") + " that is not text (a NUL byte in the first "
                          "64 KiB): " + dir.file("in/blob.dat")),
            std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace ndt
