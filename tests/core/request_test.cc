#include "gpumux/core/request.h"

#include <gtest/gtest.h>

#include <ostream>
#include <string>

#include "tests/testing/builders.h"

namespace gpumux::core {
namespace {

using test::RequestBuilder;

struct ValidateCase {
  const char* name;
  Request request;
  bool valid;
  const char* message;  // part of the error when invalid
};
void PrintTo(const ValidateCase& c, std::ostream* os) { *os << c.name; }

class RequestValidate : public ::testing::TestWithParam<ValidateCase> {};

TEST_P(RequestValidate, Checks) {
  const ValidateCase& c = GetParam();
  auto r = c.request.Validate();
  EXPECT_EQ(r.has_value(), c.valid);
  if (!c.valid && !r) {
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(r.error().message.find(c.message), std::string::npos) << r.error().message;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Table, RequestValidate,
    ::testing::Values(
        ValidateCase{"a_cpu_only_request_is_valid", RequestBuilder().Cpu(100), true, ""},
        ValidateCase{"a_zero_request_is_valid", RequestBuilder(), true, ""},
        ValidateCase{"one_milli_gpu_is_valid", RequestBuilder().Share(1), true, ""},
        ValidateCase{"a_whole_gpu_is_valid", RequestBuilder().Gpus(8), true, ""},
        ValidateCase{"negative_cpu_is_refused", RequestBuilder("p").Cpu(-1), false,
                     "request p: negative cpu_milli -1"},
        ValidateCase{"negative_memory_is_refused", RequestBuilder().Memory(-2), false,
                     "negative memory_mib"},
        ValidateCase{"negative_gpu_count_is_refused", RequestBuilder().Gpus(-1, 0), false,
                     "negative gpu_count"},
        ValidateCase{"zero_milli_on_a_gpu_request_is_refused", RequestBuilder().Share(0), false,
                     "outside 1..1000"},
        ValidateCase{"more_than_1000_milli_is_refused", RequestBuilder().Share(1001), false,
                     "gpu_milli 1001 outside 1..1000"},
        ValidateCase{"gpu_milli_without_gpus_is_refused", RequestBuilder().Gpus(0, 500), false,
                     "gpu_count is 0"},
        ValidateCase{"gpu_memory_without_gpus_is_refused", RequestBuilder().GpuMemory(5), false,
                     "gpu_count is 0"},
        ValidateCase{"negative_gpu_memory_is_refused", RequestBuilder().Share(100).GpuMemory(-1),
                     false, "negative gpu_mib"}),
    test::CaseName());

TEST(Request, TotalGpuMilliIsPerGpuTimesCount) {
  const Request r = RequestBuilder().Gpus(3, 400);
  EXPECT_TRUE(r.wants_gpu());
  EXPECT_EQ(r.total_gpu_milli(), 1200);
  EXPECT_FALSE(Request{}.wants_gpu());
  EXPECT_EQ(Request{}.total_gpu_milli(), 0);
}

}  // namespace
}  // namespace gpumux::core
