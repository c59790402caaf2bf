// The record of a cluster run: written line by line, read back per job; bad input names the line.
#include "gpumux/runs/run_record.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace gpumux::runs {
namespace {

using nlohmann::json;

const char* kRun =
    R"({"event":"run","t":0,"version":1,"run":"r1","label":"gpumux","namespace":"default",)"
    R"("time_scale":0.01,"started_at":"2026-11-26T10:00:00.000Z","source":"jobs.yaml","objects":3})";

std::string Lines(std::initializer_list<std::string> lines) {
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

TEST(ParseRunRecord, BuildsEachJobFromItsEventsInWhateverOrderTheyCame) {
  const std::string text = Lines({
      kRun,
      // The watch saw j1's pod scheduled before its create call returned.
      R"({"event":"scheduled","t":0.2,"job":"j1","pod":"j1","node":"n1","gpus":["n1/0"]})",
      R"({"event":"submit","t":0.1,"job":"j1","kind":"Pod","name":"j1","namespace":"default","uid":"u1","class":"vgg16","submit_at_s":10,"due_t":0.1,"took_s":0.01})",
      R"({"event":"submit","t":0.5,"job":"j2","kind":"Pod","name":"j2","namespace":"default","class":"lstm","submit_at_s":50})",
      R"({"event":"error","t":0.6,"job":"j3","kind":"Pod","name":"j3","namespace":"default","http_status":409,"reason":"AlreadyExists","message":"pods \"j3\" already exists"})",
      R"({"event":"start","t":1.5,"job":"j1","pod":"j1","node":"n1","gpus":["n1/0"],"started_at":"2026-11-26T10:00:01Z"})",
      R"({"event":"unschedulable","t":1.6,"job":"j2","pod":"j2","reason":"Unschedulable","message":"0/1 nodes are available"})",
      R"({"event":"finish","t":9.25,"job":"j1","pod":"j1","node":"n1","phase":"Succeeded","reason":"Completed","exit_code":0})",
      R"({"event":"end","t":10,"reason":"interrupted","submitted":2,"errors":1})",
  });
  auto r = ParseRunRecord(text, "run.jsonl");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->run.run, "r1");
  EXPECT_EQ(r->run.label, "gpumux");
  EXPECT_EQ(r->run.time_scale, 0.01);
  EXPECT_EQ(r->run.objects, 3);
  EXPECT_EQ(r->end_reason, "interrupted");
  EXPECT_TRUE(r->warnings.empty());
  ASSERT_EQ(r->jobs.size(), 3u);
  const RecordedJob& j1 = r->jobs[0];
  EXPECT_EQ(j1.job, "j1");
  EXPECT_EQ(j1.cls, "vgg16");
  EXPECT_EQ(j1.submit_at_s, 10);
  EXPECT_EQ(j1.submitted, 0.1);
  EXPECT_EQ(j1.scheduled, 0.2);
  EXPECT_EQ(j1.started, 1.5);
  EXPECT_EQ(j1.finished, 9.25);
  EXPECT_TRUE(j1.succeeded());
  EXPECT_EQ(j1.node, "n1");
  EXPECT_EQ(j1.gpus, std::vector<std::string>{"n1/0"});
  const RecordedJob& j2 = r->jobs[1];
  EXPECT_FALSE(j2.started.has_value());
  EXPECT_EQ(j2.reason, "Unschedulable");
  EXPECT_EQ(j2.message, "0/1 nodes are available");
  const RecordedJob& j3 = r->jobs[2];
  EXPECT_FALSE(j3.submitted.has_value());
  EXPECT_EQ(j3.error, "HTTP 409 AlreadyExists: pods \"j3\" already exists");
}

TEST(ParseRunRecord, AJobsRetrySucceedingReplacesItsFailureButNotTheOtherWayRound) {
  const std::string text = Lines({
      kRun,
      R"({"event":"submit","t":0,"job":"a","kind":"Job","name":"a"})",
      R"({"event":"start","t":1,"job":"a","pod":"a-1"})",
      R"({"event":"finish","t":2,"job":"a","pod":"a-1","phase":"Failed","reason":"Error"})",
      R"({"event":"start","t":3,"job":"a","pod":"a-2"})",
      R"({"event":"finish","t":5,"job":"a","pod":"a-2","phase":"Succeeded"})",
      R"({"event":"submit","t":0,"job":"b","kind":"Job","name":"b"})",
      R"({"event":"finish","t":4,"job":"b","pod":"b-1","phase":"Succeeded"})",
      R"({"event":"finish","t":6,"job":"b","pod":"b-2","phase":"Failed"})",
  });
  auto r = ParseRunRecord(text, "run.jsonl");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_FALSE(r->end_reason.has_value());  // cut off: no end line
  ASSERT_EQ(r->jobs.size(), 2u);
  EXPECT_EQ(r->jobs[0].started, 1);  // the first start
  EXPECT_EQ(r->jobs[0].finished, 5);
  EXPECT_TRUE(r->jobs[0].succeeded());
  EXPECT_EQ(r->jobs[0].pod, "a-2");
  EXPECT_EQ(r->jobs[1].finished, 4);
  EXPECT_TRUE(r->jobs[1].succeeded());
}

TEST(ParseRunRecord, AnIncompleteLastLineIsAWarningAndPodsWithoutSubmitAreIgnored) {
  const std::string text = Lines({kRun, R"({"event":"submit","t":0,"job":"a"})",
                                  R"({"event":"start","t":1,"job":"stranger","pod":"x"})"}) +
                           R"({"event":"finish","t":2,"jo)";
  auto r = ParseRunRecord(text, "run.jsonl");
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_EQ(r->warnings.size(), 2u);
  EXPECT_NE(r->warnings[0].find("run.jsonl:4: an incomplete last line"), std::string::npos)
      << r->warnings[0];
  EXPECT_NE(r->warnings[1].find("job 'stranger' has pod events but no submit line"),
            std::string::npos);
  ASSERT_EQ(r->jobs.size(), 1u);
  EXPECT_FALSE(r->jobs[0].finished.has_value());
}

struct BadRecordCase {
  std::string name;
  std::string text;
  std::string message;
};

class ParseRunRecordErrors : public ::testing::TestWithParam<BadRecordCase> {};

TEST_P(ParseRunRecordErrors, NameTheLine) {
  auto r = ParseRunRecord(GetParam().text, "run.jsonl");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find(GetParam().message), std::string::npos) << r.error().message;
}

INSTANTIATE_TEST_SUITE_P(
    RunRecord, ParseRunRecordErrors,
    ::testing::Values(
        BadRecordCase{"Empty", "", "run.jsonl: no run line"},
        BadRecordCase{"NotJson", Lines({kRun, "{oops", R"({"event":"end","t":1,"reason":"x"})"}),
                      "run.jsonl:2: not JSON ("},
        BadRecordCase{"NotAnObject", Lines({kRun, "[1]"}), "run.jsonl:2: not a JSON object"},
        BadRecordCase{"FirstLineNotRun", Lines({R"({"event":"submit","t":0,"job":"a"})"}),
                      "run.jsonl:1: the first line must be the run line, not 'submit'"},
        BadRecordCase{"UnknownEvent", Lines({kRun, R"({"event":"strat","t":1,"job":"a"})"}),
                      "run.jsonl:2: unknown event 'strat'"},
        BadRecordCase{"NegativeTime", Lines({kRun, R"({"event":"start","t":-1,"job":"a"})"}),
                      "run.jsonl:2: \"t\" is not a number >= 0"},
        BadRecordCase{"TimeAsText", Lines({kRun, R"({"event":"start","t":"1","job":"a"})"}),
                      "run.jsonl:2: \"t\" is not a number >= 0"},
        BadRecordCase{"NoJob", Lines({kRun, R"({"event":"start","t":1})"}),
                      "run.jsonl:2: no \"job\""},
        BadRecordCase{"AnotherVersion",
                      Lines({R"({"event":"run","t":0,"version":2,"time_scale":1})"}),
                      "run.jsonl:1: \"version\" must be 1"},
        BadRecordCase{"NoTimeScale", Lines({R"({"event":"run","t":0,"version":1})"}),
                      "run.jsonl:1: no \"time_scale\""},
        BadRecordCase{
            "ObjectsTooMany",
            Lines({R"({"event":"run","t":0,"version":1,"time_scale":1,"objects":1.25e67})"}),
            "run.jsonl:1: \"objects\" must be a whole number up to 1000000, not "},
        BadRecordCase{"ObjectsFraction",
                      Lines({R"({"event":"run","t":0,"version":1,"time_scale":1,"objects":2.5})"}),
                      "run.jsonl:1: \"objects\" must be a whole number"},
        BadRecordCase{"TwoRuns", Lines({kRun, kRun}), "run.jsonl:2: a second run line"},
        BadRecordCase{"AfterTheEnd",
                      Lines({kRun, R"({"event":"end","t":1,"reason":"finished"})",
                             R"({"event":"start","t":2,"job":"a"})"}),
                      "run.jsonl:3: 'start' after the end line"},
        BadRecordCase{"ABadPhase",
                      Lines({kRun, R"({"event":"finish","t":2,"job":"a","phase":"Done"})"}),
                      "run.jsonl:2: \"phase\" must be Succeeded or Failed, not 'Done'"},
        BadRecordCase{"SubmittedTwice",
                      Lines({kRun, R"({"event":"submit","t":0,"job":"a"})",
                             R"({"event":"submit","t":1,"job":"a"})"}),
                      "run.jsonl:3: job 'a' submitted twice"},
        BadRecordCase{"GpusNotStrings",
                      Lines({kRun, R"({"event":"start","t":2,"job":"a","gpus":[0]})"}),
                      "run.jsonl:2: \"gpus\" holds a non-string"}),
    [](const auto& test_case) { return test_case.param.name; });

class RecordWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("gpumux-record-test-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

TEST_F(RecordWriterTest, WritesOneLinePerEventAndRefusesAnExistingFile) {
  const std::string path = (dir_ / "run.jsonl").string();
  auto writer = RecordWriter::Create(path);
  ASSERT_TRUE(writer) << writer.error().message;
  auto run = RecordLine("run", 0);
  run["version"] = 1;
  run["time_scale"] = 1;
  ASSERT_TRUE((*writer)->Write(run));
  auto submit = RecordLine("submit", 0.1 + 0.2);
  submit["job"] = "a";
  ASSERT_TRUE((*writer)->Write(submit));
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_NE(text.str().find("{\"event\":\"submit\",\"t\":0.3,"), std::string::npos)
      << text.str();  // event and t first; no float noise (0.30000000000000004)
  auto parsed = ParseRunRecord(text.str(), path);
  ASSERT_TRUE(parsed) << parsed.error().message;
  ASSERT_EQ(parsed->jobs.size(), 1u);
  EXPECT_EQ(parsed->jobs[0].submitted, 0.3);

  auto again = RecordWriter::Create(path);
  ASSERT_FALSE(again);
  EXPECT_NE(again.error().message.find("exists"), std::string::npos);
  auto folder = RecordWriter::Create((dir_ / "missing" / "r.jsonl").string());
  ASSERT_FALSE(folder);
  EXPECT_NE(folder.error().message.find("No such file"), std::string::npos)
      << folder.error().message;
}

}  // namespace
}  // namespace gpumux::runs
