// Result<T>: the error-returning convention across module boundaries.
// "Does not fit" is an outcome (a value), never an Error; Error is for bad input or failures.
#pragma once

#include <string>
#include <tl/expected.hpp>
#include <utility>

namespace gpumux::core {

enum class ErrorCode {
  kInvalidArgument,     // bad input: a malformed row, field or flag
  kNotFound,            // a named thing (node, tenant, file) does not exist
  kAlreadyExists,       // e.g. a tenant assigned twice
  kFailedPrecondition,  // the request is valid but the state does not allow it
  kIo,                  // reading or writing a file failed
  kPermissionDenied,    // the caller may not do this (it is not who the request is about)
  kUnavailable,         // not now: what is needed is not known yet or is busy (retry)
};

struct Error {
  ErrorCode code = ErrorCode::kInvalidArgument;
  std::string message;
};

template <typename T>
using Result = tl::expected<T, Error>;

inline tl::unexpected<Error> MakeError(ErrorCode code, std::string message) {
  return tl::unexpected<Error>(Error{code, std::move(message)});
}

}  // namespace gpumux::core
