#include "src/coordinator/json_fields.h"

namespace gpumux::coordinator {

using Json = nlohmann::json;

std::optional<std::string> ReadString(const Json& body, const char* field, std::string* out,
                                      bool required) {
  auto it = body.find(field);
  if (it == body.end() || it->is_null()) {
    if (required) return std::string(field) + ": required";
    return std::nullopt;
  }
  if (!it->is_string()) return std::string(field) + ": must be a string";
  *out = it->get<std::string>();
  return std::nullopt;
}

std::optional<std::string> ReadNumber(const Json& body, const char* field, double* out) {
  auto it = body.find(field);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) return std::string(field) + ": must be a number";
  *out = it->get<double>();
  return std::nullopt;
}

std::optional<std::string> ReadRegistration(const Json& body, Registration* r) {
  if (!body.is_object()) return "must be a JSON object";
  std::optional<std::string> bad = ReadString(body, "job", &r->job, kRequired);
  if (!bad) bad = ReadString(body, "class", &r->cls, kRequired);
  if (!bad) bad = ReadInteger(body, "batch_size", &r->batch_size, kRequired);
  if (!bad) bad = ReadInteger(body, "pid", &r->pid, kOptional);
  if (!bad) bad = ReadInteger(body, "min_batch", &r->min_batch, kOptional);
  if (!bad) bad = ReadInteger(body, "max_batch", &r->max_batch, kOptional);
  if (!bad) bad = ReadInteger(body, "memory_mib", &r->memory_mib, kOptional);
  if (!bad) bad = ReadNumber(body, "noise_scale", &r->noise_scale);
  if (bad) return bad;
  if (!body.contains("gpus") || body["gpus"].is_null()) return std::nullopt;
  const Json& g = body["gpus"];
  if (!g.is_array() || g.size() > kMaxRegisteredGpus) {
    return "gpus: must be an array of at most " + std::to_string(kMaxRegisteredGpus) + " GPU UUIDs";
  }
  for (const Json& u : g) {
    if (!u.is_string()) return "gpus: every entry must be a string";
    r->gpus.push_back(u.get<std::string>());
  }
  return std::nullopt;
}

}  // namespace gpumux::coordinator
