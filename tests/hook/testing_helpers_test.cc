// The test helpers the hook tests stand on (tests/testing/process.h, fake_gpu_host.h).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <csignal>
#include <cstdlib>
#include <string>

#include "tests/testing/builders.h"
#include "tests/testing/fake_gpu_host.h"
#include "tests/testing/process.h"

namespace gpumux::test {
namespace {

TEST(RunCaptured, GivesExitStatusStdoutStderrAndTakesStdin) {
  ScratchDir dir;
  const Captured c =
      RunCaptured({.argv = {"sh", "-c", "read line; echo \"got $line\"; echo oops >&2; exit 3"}},
                  dir.path(), "t", "hello\n");
  EXPECT_TRUE(c.exit.Exited(3));
  EXPECT_EQ(c.out, "got hello\n");
  EXPECT_EQ(c.err, "oops\n");
}

TEST(RunProcess, ReportsTheSignalThatKilledIt) {
  const ProcessExit e = RunProcess({.argv = {"sh", "-c", "kill -9 $$"}});
  EXPECT_EQ(e.signal, SIGKILL);
  EXPECT_EQ(e.code, -1);
  EXPECT_FALSE(e.Exited(0));
}

TEST(RunProcess, SetsAndUnsetsEnvironmentVariablesAndTheFolder) {
  ScratchDir dir;
  ::setenv("GPUMUX_TEST_HELPER_UNSET_ME", "present", 1);
  const Captured c =
      RunCaptured({.argv = {"sh", "-c", "echo \"$A|${GPUMUX_TEST_HELPER_UNSET_ME-gone}|$(pwd)\""},
                   .set_env = {"A=1", "B=x", "A=2"},
                   .unset_env = {"GPUMUX_TEST_HELPER_UNSET_ME"},
                   .cwd = dir.path().string()},
                  dir.path(), "env");
  ::unsetenv("GPUMUX_TEST_HELPER_UNSET_ME");
  EXPECT_TRUE(c.exit.Exited(0)) << c.err;
  EXPECT_EQ(c.out, "2|gone|" + std::filesystem::canonical(dir.path()).string() + "\n");
}

TEST(RunProcess, AProgramThatCannotRunExits127SayingWhy) {
  ScratchDir dir;
  const Captured c = RunCaptured({.argv = {"/nonexistent/program"}}, dir.path(), "missing");
  EXPECT_TRUE(c.exit.Exited(127));
  EXPECT_NE(c.err.find("cannot run /nonexistent/program"), std::string::npos) << c.err;
}

TEST(MakeFakeDevDir, MakesNvidiaCharacterDevices) {
  if (!IsRoot()) GTEST_SKIP() << "not root: mknod needs CAP_MKNOD";
  ScratchDir dir;
  ASSERT_EQ(MakeFakeDevDir(dir.path() / "dev", 2), "");
  struct stat st {};
  ASSERT_EQ(::stat((dir.path() / "dev" / "nvidia1").c_str(), &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  EXPECT_EQ(major(st.st_rdev), kNvidiaMajor);
  EXPECT_EQ(minor(st.st_rdev), 1u);
  ASSERT_EQ(::stat((dir.path() / "dev" / "nvidiactl").c_str(), &st), 0);
  EXPECT_EQ(minor(st.st_rdev), kNvidiaCtlMinor);
  ASSERT_EQ(::stat((dir.path() / "dev" / "nvidia-uvm").c_str(), &st), 0);
  EXPECT_EQ(major(st.st_rdev), kNvidiaUvmMajor);
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "dev" / "nvidia2"));
  EXPECT_NE(MakeFakeDevDir(dir.path() / "dev", 1), "") << "an existing node is an error";
}

}  // namespace
}  // namespace gpumux::test
