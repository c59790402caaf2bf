#include "gpumux/io/read_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <string>

#include "tests/testing/builders.h"

namespace gpumux::io {
namespace {

namespace fs = std::filesystem;

class ReadInputFileTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& text) {
    return dir_.Write(name, text);
  }
  test::ScratchDir dir_;
};

TEST_F(ReadInputFileTest, ReadsTheWholeFile) {
  const std::string text(200'000, 'x');
  auto read = ReadInputFile(Write("a.json", text));
  ASSERT_TRUE(read.has_value()) << read.error().message;
  EXPECT_EQ(*read, text);
}

TEST_F(ReadInputFileTest, ReadsAnEmptyFile) {
  auto read = ReadInputFile(Write("empty", ""));
  ASSERT_TRUE(read.has_value());
  EXPECT_TRUE(read->empty());
}

TEST_F(ReadInputFileTest, AMissingFileIsNotFoundAndNamed) {
  const std::string path = (dir_.path() / "nope.json").string();
  auto read = ReadInputFile(path);
  ASSERT_FALSE(read.has_value());
  EXPECT_EQ(read.error().code, core::ErrorCode::kNotFound);
  EXPECT_EQ(read.error().message, path + ": no such file");
}

TEST_F(ReadInputFileTest, AFolderIsRefusedAsAFolder) {
  const std::string path = (dir_.path() / "adir").string();
  fs::create_directory(path);
  auto read = ReadInputFile(path);
  ASSERT_FALSE(read.has_value());
  EXPECT_EQ(read.error().message, path + ": is a directory (expected a file)");
}

TEST_F(ReadInputFileTest, AFifoIsRefusedWithoutWaitingForAWriter) {
  const std::string path = (dir_.path() / "fifo").string();
  ASSERT_EQ(mkfifo(path.c_str(), 0600), 0);
  auto read = ReadInputFile(path);
  ASSERT_FALSE(read.has_value());
  EXPECT_NE(read.error().message.find("not a regular file"), std::string::npos);
}

TEST_F(ReadInputFileTest, AFileOverTheLimitIsRefusedNamingTheLimit) {
  auto read = ReadInputFile(Write("big", std::string(1001, 'x')), 1000);
  ASSERT_FALSE(read.has_value());
  EXPECT_NE(read.error().message.find("big: larger than 1000 bytes"), std::string::npos);
  EXPECT_TRUE(ReadInputFile(Write("fits", std::string(1000, 'x')), 1000).has_value());
}

}  // namespace
}  // namespace gpumux::io
