// scripts/launch.sh, the documented way to launch on several hosts (docs/multinode.md):
// the command it builds for a hostfile and under Slurm, and its refusals. The hostfile
// recipe also runs for real across emulated hosts (tests/hosts).
#include "../common/command.h"
#include "../common/temp_dir.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

namespace ndt {
namespace {

const std::string kLaunch = "bash " + std::string(NDT_SOURCE_DIR) + "/scripts/launch.sh";

// Catches: a hostfile run that does not place R ranks on each node, or loses the
// ndtrain arguments.
TEST(LaunchScript, AHostfileRunPlacesRanksPerNode) {
  testing::TempDir dir;
  std::ofstream(dir.file("hosts")) << "# the cluster\nhost-a slots=8\n\nhost-b slots=8\nhost-c slots=8\n";
  const testing::CommandResult r = testing::run_command(kLaunch + " --hostfile " + dir.file("hosts") +
                                                        " --ranks-per-node 4 --dry-run -- ./build/ndtrain train c.toml "
                                                        "--set parallel.tp=4");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("mpirun --hostfile " + dir.file("hosts") + " -np 12 --map-by ppr:4:node --bind-to none"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("./build/ndtrain train c.toml --set parallel.tp=4"), std::string::npos) << r.output;
}

// Catches: srun started without PMIx (every task a separate one-rank run), or outside
// an allocation.
TEST(LaunchScript, SlurmRunsSrunWithPmixInsideAnAllocation) {
  const testing::CommandResult outside = testing::run_command("env -u SLURM_JOB_ID " + kLaunch + " --slurm -- ndtrain");
  EXPECT_NE(outside.exit_code, 0);
  EXPECT_NE(outside.output.find("--slurm runs inside a Slurm allocation"), std::string::npos) << outside.output;
  const testing::CommandResult inside =
      testing::run_command("SLURM_JOB_ID=7 " + kLaunch + " --slurm --dry-run -- ./build/ndtrain train c.toml");
  ASSERT_EQ(inside.exit_code, 0) << inside.output;
  EXPECT_NE(inside.output.find("srun --mpi=pmix --cpu-bind=none ./build/ndtrain train c.toml"), std::string::npos)
      << inside.output;
}

// Catches: ndtrain started by srun without an MPI interface training as N separate
// one-rank runs instead of refusing.
TEST(LaunchScript, NdtrainRefusesSrunTasksWithoutMpi) {
  const testing::CommandResult r = testing::run_command(
      "env -u OMPI_COMM_WORLD_SIZE -u PMIX_RANK -u PMI_SIZE SLURM_NTASKS=4 " + std::string(NDT_BINARY_DIR) +
      "/ndtrain train " + std::string(NDT_SOURCE_DIR) + "/configs/demo.toml");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("started by srun as one of SLURM_NTASKS = 4 tasks, but without an MPI process-management "
                          "interface"),
            std::string::npos)
      << r.output;
}

TEST(LaunchScript, BadOptionsAreNamed) {
  EXPECT_NE(testing::run_command(kLaunch + " --hostfile /nonexistent --ranks-per-node 2 -- x").output.find(
                "--hostfile /nonexistent cannot be read"),
            std::string::npos);
  EXPECT_NE(testing::run_command(kLaunch + " --hostfile /dev/null --ranks-per-node two -- x").output.find(
                "--ranks-per-node must be a positive number, got 'two'"),
            std::string::npos);
  EXPECT_NE(testing::run_command(kLaunch + " -- x").output.find("choose --hostfile FILE or --slurm"), std::string::npos);
}

}  // namespace
}  // namespace ndt
