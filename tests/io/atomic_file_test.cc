#include "gpumux/io/atomic_file.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <string>

#include "tests/testing/builders.h"

namespace gpumux::io {
namespace {

std::string ReadAll(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs `child` in a forked process (which exits 0 when it returns) and returns waitpid's status.
int InChild(const std::function<void()>& child) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    child();
    ::_exit(0);
  }
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) != pid) return -1;
  return status;
}

bool KilledBy(int status, int signal) { return WIFSIGNALED(status) && WTERMSIG(status) == signal; }
bool ExitedZero(int status) { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }

class AtomicFile : public ::testing::Test {
 protected:
  void TearDown() override { SetWriteFaultForTesting(std::nullopt); }
  test::ScratchDir dir_;
  std::string file_ = (dir_.path() / "state.json").string();
};

TEST_F(AtomicFile, ReplacesTheFileAndLeavesNoTemporary) {
  ASSERT_TRUE(WriteFileAtomically(file_, "one"));
  ASSERT_TRUE(WriteFileAtomically(file_, "two"));
  EXPECT_EQ(ReadAll(file_), "two");
  EXPECT_FALSE(std::filesystem::exists(file_ + ".tmp"));
}

// The folder's fsync makes the rename durable; its result was ignored.
TEST_F(AtomicFile, AFailedFolderSyncIsAnErrorNamingTheFolder) {
  ASSERT_TRUE(WriteFileAtomically(file_, "old"));
  SetWriteFaultForTesting(WriteFault::kFailDirectorySync);
  auto written = WriteFileAtomically(file_, "new");
  ASSERT_FALSE(written.has_value());
  EXPECT_EQ(written.error().code, core::ErrorCode::kIo);
  EXPECT_EQ(written.error().message, dir_.path().string() +
                                         ": syncing the folder after replacing " + file_ + ": " +
                                         std::strerror(EIO));
}

TEST_F(AtomicFile, AFolderThatIsGoneIsAnErrorNamingTheFile) {
  auto written = WriteFileAtomically((dir_.path() / "no" / "such.json").string(), "x");
  ASSERT_FALSE(written.has_value());
  // The file as the caller named it, not the temporary copy beside it (issue 33).
  EXPECT_EQ(written.error().message, (dir_.path() / "no" / "such.json").string() +
                                         ": cannot write: no folder " +
                                         (dir_.path() / "no").string());
  EXPECT_EQ(written.error().code, core::ErrorCode::kIo);
}

// Production writes must not consult the environment each time: GPUMUX_FAULT is read at the
// first write of the process only.
TEST_F(AtomicFile, GpumuxFaultIsReadOncePerProcessNotOnEveryWrite) {
  const int status = InChild([&] {
    ::unsetenv("GPUMUX_FAULT");
    if (!WriteFileAtomically(file_, "first")) std::_Exit(3);
    ::setenv("GPUMUX_FAULT", "kill-before-rename", 1);
    if (!WriteFileAtomically(file_, "second")) std::_Exit(4);
  });
  EXPECT_TRUE(ExitedZero(status)) << "status " << status
                                  << (KilledBy(status, SIGKILL) ? ": the second write read the "
                                                                  "environment again"
                                                                : "");
  EXPECT_EQ(ReadAll(file_), "second");
}

// Crash tests fork, then set GPUMUX_FAULT in the child: the child reads it at its first write
// even though the parent had written (and read the environment) before the fork.
TEST_F(AtomicFile, AForkedChildReadsGpumuxFaultAtItsFirstWrite) {
  ASSERT_TRUE(WriteFileAtomically(file_, "before"));
  const int status = InChild([&] {
    ::setenv("GPUMUX_FAULT", "kill-before-rename", 1);
    (void)WriteFileAtomically(file_, "lost");
  });
  EXPECT_TRUE(KilledBy(status, SIGKILL)) << "status " << status;
  EXPECT_EQ(ReadAll(file_), "before");
  EXPECT_EQ(ReadAll(file_ + ".tmp"), "lost");
}

TEST_F(AtomicFile, TheTestHookKillsBeforeTheRenameWithoutTheEnvironment) {
  ASSERT_TRUE(WriteFileAtomically(file_, "before"));
  const int status = InChild([&] {
    ::unsetenv("GPUMUX_FAULT");
    SetWriteFaultForTesting(WriteFault::kKillBeforeRename);
    (void)WriteFileAtomically(file_, "lost");
  });
  EXPECT_TRUE(KilledBy(status, SIGKILL)) << "status " << status;
  EXPECT_EQ(ReadAll(file_), "before");
  SetWriteFaultForTesting(WriteFault::kNone);
  ASSERT_TRUE(WriteFileAtomically(file_, "after")) << "the hook overrides the environment";
  EXPECT_EQ(ReadAll(file_), "after");
}

}  // namespace
}  // namespace gpumux::io
