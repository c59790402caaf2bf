#include "gpumux/io/csv.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>

namespace gpumux::io {
namespace {

TEST(CsvReader, ReadsRowsByColumnNameAndSkipsBlankLines) {
  std::istringstream in("a, b ,c\r\n1,x y,3\r\n\n  \n4,,-6\n");
  CsvReader csv(in, "t.csv");
  ASSERT_TRUE(csv.ReadHeader({"a", "b"}));
  EXPECT_TRUE(csv.HasColumn("c"));
  EXPECT_FALSE(csv.HasColumn("d"));

  auto more = csv.Next();
  ASSERT_TRUE(more.has_value());
  ASSERT_TRUE(*more);
  EXPECT_EQ(csv.line(), 2);
  EXPECT_EQ(csv.Field("a"), "1");
  EXPECT_EQ(csv.Field("b"), "x y");
  EXPECT_EQ(*csv.Int("c"), 3);

  more = csv.Next();
  ASSERT_TRUE(more.has_value());
  ASSERT_TRUE(*more);
  EXPECT_EQ(csv.line(), 5) << "blank lines count toward line numbers";
  EXPECT_EQ(csv.Field("b"), "");
  EXPECT_EQ(*csv.Int("c"), -6);
  EXPECT_DOUBLE_EQ(*csv.Double("a"), 4.0);

  more = csv.Next();
  ASSERT_TRUE(more.has_value());
  EXPECT_FALSE(*more);
  EXPECT_EQ(csv.source(), "t.csv");
}

TEST(CsvReader, SkipsAUtf8ByteOrderMark) {
  std::istringstream in("\xEF\xBB\xBFname,x\np,1\n");
  CsvReader csv(in, "bom.csv");
  ASSERT_TRUE(csv.ReadHeader({"name"}));
  ASSERT_TRUE(*csv.Next());
  EXPECT_EQ(csv.Field("name"), "p");
}

TEST(CsvReader, NumbersMustBeWholeFields) {
  std::istringstream in("n,d\n12abc,1.5x\n");
  CsvReader csv(in, "num.csv");
  ASSERT_TRUE(csv.ReadHeader({"n", "d"}));
  ASSERT_TRUE(*csv.Next());
  auto n = csv.Int("n");
  ASSERT_FALSE(n.has_value());
  EXPECT_EQ(n.error().message, "num.csv:2: column 'n': '12abc' is not an integer");
  EXPECT_EQ(n.error().code, core::ErrorCode::kInvalidArgument);
  auto d = csv.Double("d");
  ASSERT_FALSE(d.has_value());
  EXPECT_EQ(d.error().message, "num.csv:2: column 'd': '1.5x' is not a number");
}

TEST(CsvReader, AnEmptyFieldIsNotANumber) {
  std::istringstream in("n,m\n,5\n");
  CsvReader csv(in, "e.csv");
  ASSERT_TRUE(csv.ReadHeader({"n"}));
  ASSERT_TRUE(*csv.Next());
  auto n = csv.Int("n");
  ASSERT_FALSE(n.has_value());
  EXPECT_EQ(n.error().message, "e.csv:2: column 'n': '' is not an integer");
}

TEST(CsvReader, ARowOfEmptyFieldsStillCountsItsFields) {
  std::istringstream in("n\n \n,\n");  // a blank line, then two empty fields
  CsvReader csv(in, "e.csv");
  ASSERT_TRUE(csv.ReadHeader({"n"}));
  auto more = csv.Next();
  ASSERT_FALSE(more.has_value());
  EXPECT_EQ(more.error().message, "e.csv:3: expected 1 fields, found 2");
}

TEST(CsvReader, ErrorHereNamesSourceAndLine) {
  std::istringstream in("a\n1\n");
  CsvReader csv(in, "<embedded x>");
  ASSERT_TRUE(csv.ReadHeader({}));
  ASSERT_TRUE(*csv.Next());
  const core::Error e = csv.ErrorHere("bad thing");
  EXPECT_EQ(e.message, "<embedded x>:2: bad thing");
  EXPECT_EQ(e.code, core::ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace gpumux::io
